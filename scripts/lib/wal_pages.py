"""Counts the frames of an SQLite WAL per b-tree (table or index) and per commit: see scripts/sqlite-wal-pages."""
import collections
import shutil
import sqlite3
import struct
import sys
import tempfile


def frames(wal_path):
    """The (page number, database size if a commit frame else 0) of each frame written since the WAL last started
    over (frames left from before carry the old salt)."""
    wal = open(wal_path, 'rb').read()
    if len(wal) < 32:
        return [], 4096
    _magic, _version, page_size, _seq, salt1, salt2, _c1, _c2 = struct.unpack('>IIIIIIII', wal[:32])
    out, offset = [], 32
    while offset + 24 + page_size <= len(wal):
        page, db_size, s1, s2, _c1, _c2 = struct.unpack('>IIIIII', wal[offset:offset + 24])
        if (s1, s2) != (salt1, salt2):
            break
        out.append((page, db_size))
        offset += 24 + page_size
    return out, page_size


def main(db_path):
    written, _ = frames(db_path + '-wal')
    commits = sum(1 for _, db_size in written if db_size)
    # Which b-tree owns each page, read from a copy of the database file alone: the WAL's pages are not copied in
    # yet, so a page the file does not reach yet is a new one.
    with tempfile.TemporaryDirectory() as scratch:
        copy = f'{scratch}/copy.db'
        shutil.copy(db_path, copy)
        conn = sqlite3.connect(copy)
        owner = {page: name for name, page in conn.execute('SELECT name, pageno FROM dbstat')}
        conn.close()
    per_tree = collections.Counter(owner.get(page, '(new page)') for page, _ in written)
    distinct = collections.Counter(owner.get(page, '(new page)') for page in {page for page, _ in written})
    print(f'{len(written)} frames in {commits} commits: {len(written) / max(commits, 1):.1f} frames per commit')
    print('| b-tree | frames | per commit | distinct pages |')
    print('| --- | ---: | ---: | ---: |')
    for name, n in per_tree.most_common():
        label = 'page 1 (file header)' if name == 'sqlite_schema' else name
        print(f'| {label} | {n} | {n / max(commits, 1):.2f} | {distinct[name]} |')


if __name__ == '__main__':
    main(sys.argv[1])
