//! The embedded SQLite store (`rusqlite`, SQLite compiled in).
//!
//! **Group commit.** One writer thread owns the database connection. Callers queue their operations to it; it takes
//! every operation waiting (up to [`MAX_BATCH`]), runs them in one `BEGIN IMMEDIATE` transaction, commits once, and
//! only then answers each caller. An operation that fails is rolled back alone: the batch then runs again with a
//! savepoint per operation (savepoints cost too much to pay for when nothing fails; see `write_loop`).
//! Concurrent messages thus share one commit (and, with [`Durability::Full`], one fsync), and a caller is never
//! answered before its operation is committed: the runtime answers a peer only after that, so nothing acknowledged
//! is lost to a crash the durability mode covers.
//!
//! **Durability** (WAL journal either way, [`Durability`], [`StoreConfig::sqlite_durability`]): `Process` (the
//! default: `synchronous=NORMAL`) — a
//! committed transaction is in the WAL file, written with `write()` before the caller is answered, so it survives
//! the process dying at any point (`kill -9`, a panic, OOM), but the WAL is fsynced only at checkpoints, so an OS
//! crash or power cut may lose the last transactions (never corrupting the database). `Full`
//! (`synchronous=FULL`) — the WAL is fsynced at every commit: it also survives power loss, at the cost of an fsync
//! per batch. Several processes may open the file (`busy_timeout` makes their writers take turns), but replicas on
//! several machines want Redis.
//!
//! **Checkpoints** run on a thread of their own (a second connection, a `PASSIVE` checkpoint every
//! [`CHECKPOINT_EVERY`]), so copying the WAL into the database file and fsyncing it do not stall the batches. The
//! writer checkpoints too once the WAL passes [`StoreConfig::sqlite_wal_pages`]: a checkpoint on another connection
//! never completes while the writer keeps committing, and only a complete one lets the WAL start over.
//!
//! **Reads** go through a memory map of the database file ([`StoreConfig::sqlite_mmap_bytes`]) with a small page
//! cache beside it (see `SqliteStore::open` for why small).
//!
//! There is no reader pool: almost every operation the runtime makes writes (the replay or dedupe entry of every
//! message, a task's claim or result), so reads on other connections would only add a second round trip. Within the
//! writer, an admission reads as little as its verdict needs: an unsigned TASK_SUBMIT's claim is one insert, and its
//! task's record is read only when the insert finds one there (a resend, whose record may hold the message).
//!
//! **Fewer pages per commit.** Each page a commit changes is one more frame in the WAL (two `write()`s, and a copy
//! at the next checkpoint), so rows that every message would touch are written less often: a live session's TTL
//! restart is written ahead by a tenth of its TTL (at most a second), so a busy session's row is rewritten about
//! once a second; unsigned traffic's dedupe entries live in two generation tables, emptied a generation at a time,
//! with no index on their expiry to keep and no entry deleted on its own (see `claim_dedupe`); tasks are rows in
//! insertion order, so that claims and results land on the table's newest pages.
//!
//! **A bounded file** ([`StoreConfig::sqlite_max_bytes`]): `PRAGMA max_page_count` stops the file at its bound, and
//! the writer reads how many pages are in use (the pager's count less the free list: no scan) every few hundred
//! operations (fewer for a small bound: see `Room::check_every`), and before every batch while near the bound or
//! after one failed; past seven eighths, the oldest ended tasks' records go before their TTL (see `Room::make`), so a
//! flood of tasks shortens how long results are kept rather than filling the disk or refusing every peer.
//!
//! **Expired rows** are deleted every [`SWEEP_EVERY`] operations, each table through an index on its expiry, so the
//! sweep reads what has expired and not everything the file holds (see `SWEEP_DELETES`).

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use async_trait::async_trait;
use ldp_session::shared::{
    Admission, Admitted, ReplayClaim, ReplayVerdict, SessionLookup, SessionUsage, SharedSession, SharedTask,
    SharedTaskStatus, TaskAnswer, TaskClaim, TaskCost, TaskFinish, TaskStep,
};
use ldp_session::store::{OUTAGE_LINE_EVERY, OutageLog, Store, StoreError};
use ldp_session::{TaskKey, replay_room};
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::oneshot;

use crate::{Durability, MIN_BOUND_BYTES, OpenError, StoreConfig, corrupt, drop_marks, ms, now_ms};

const BACKEND: &str = "sqlite";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS replay (
    key TEXT PRIMARY KEY NOT NULL,
    principal TEXT NOT NULL,
    expires_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS replay_principal ON replay (principal, expires_ms);
CREATE TABLE IF NOT EXISTS replay_shares (
    principal TEXT PRIMARY KEY NOT NULL,
    n INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS replay_expiry ON replay (expires_ms);
CREATE TABLE IF NOT EXISTS dedupe_0 (
    key BLOB PRIMARY KEY NOT NULL,
    expires_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dedupe_1 (
    key BLOB PRIMARY KEY NOT NULL,
    expires_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY NOT NULL,
    record TEXT,
    expires_ms INTEGER NOT NULL,
    tasks INTEGER NOT NULL DEFAULT 0,
    tokens INTEGER NOT NULL DEFAULT 0,
    cost REAL NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY NOT NULL,
    value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS delegate (
    namespace TEXT PRIMARY KEY NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (name, value) SELECT 'replay_rows', COUNT(*) FROM replay;
INSERT OR IGNORE INTO meta (name, value) VALUES ('dedupe_current', 0), ('dedupe_since_ms', 0),
    ('dedupe_0_until_ms', 0), ('dedupe_1_until_ms', 0);
CREATE TABLE IF NOT EXISTS task_rows (
    row INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    record TEXT NOT NULL,
    expires_ms INTEGER NOT NULL,
    message_key TEXT,
    message_until_ms INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS task_rows_key ON task_rows (session_id, task_id);
CREATE INDEX IF NOT EXISTS task_rows_expiry ON task_rows (expires_ms);
CREATE INDEX IF NOT EXISTS sessions_expiry ON sessions (expires_ms);
";

/// Tasks are rows in insertion order (`task_rows`), with the key in an index: a task's claim and its result land on
/// the table's newest pages, which every commit writes anyway, where a table keyed by the (random) task id put each
/// on a leaf of its own, two WAL pages more per task. Files written before keep their tasks in `tasks`, moved over
/// once at open.
const MIGRATE_TASKS: &str = "
INSERT OR IGNORE INTO task_rows (session_id, task_id, record, expires_ms)
    SELECT session_id, task_id, record, expires_ms FROM tasks;
DROP TABLE tasks;
";

/// A session's usage across replicas (`SessionUsage`) are columns of its row; files written before get them, at 0,
/// once at open.
const MIGRATE_SESSION_USAGE: &str = "
ALTER TABLE sessions ADD COLUMN tasks INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN cost REAL NOT NULL DEFAULT 0;
";

/// The dedupe entry of the unsigned message that claimed a task (`SharedTask::message_key` and `message_until_ms`) is
/// two columns of its row, which the writes of its end leave as they are; files written before get them, empty, once
/// at open.
const MIGRATE_MESSAGE_KEY: &str = "
ALTER TABLE task_rows ADD COLUMN message_key TEXT;
ALTER TABLE task_rows ADD COLUMN message_until_ms INTEGER NOT NULL DEFAULT 0;
";

/// Each principal's count of replay entries (`replay_shares`), kept as entries come and go; files written before
/// count theirs once at open.
const MIGRATE_REPLAY_SHARES: &str = "
INSERT OR REPLACE INTO replay_shares (principal, n) SELECT principal, COUNT(*) FROM replay GROUP BY principal;
INSERT INTO meta (name, value) VALUES ('replay_shares', 1);
";

/// Unsigned traffic's dedupe entries used to be one table keyed by hex text, with an index on their expiry for the
/// sweep; files written before keep their entries, moved over once at open into the first generation.
const MIGRATE_DEDUPE: &str = "
INSERT OR IGNORE INTO dedupe_0 (key, expires_ms)
    SELECT CASE WHEN length(key) = 32 AND key NOT GLOB '*[^0-9a-f]*' THEN unhex(key) ELSE key END, expires_ms
    FROM dedupe;
UPDATE meta SET value = MAX(value, (SELECT COALESCE(MAX(expires_ms), 0) FROM dedupe))
    WHERE name = 'dedupe_0_until_ms';
DROP TABLE dedupe;
";

fn synchronous(durability: Durability) -> &'static str {
    match durability {
        Durability::Process => "PRAGMA synchronous=NORMAL;",
        Durability::Full => "PRAGMA synchronous=FULL;",
    }
}

/// Shared state in an SQLite database file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// The writer thread's queue (the thread ends when the last clone of the store is dropped).
    writer: Arc<mpsc::SyncSender<Box<dyn Op>>>,
    /// Dropped with the last clone of the store, which ends the checkpoint thread (after a last checkpoint).
    _checkpointer: Arc<mpsc::Sender<()>>,
}

/// How often the checkpoint thread copies the WAL's committed pages into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(50);

/// Expired rows are deleted every this many operations.
const SWEEP_EVERY: u64 = 1024;

/// The most operations one transaction commits.
pub const MAX_BATCH: usize = 256;

/// The most operations waiting for the writer. Past it, a call is refused at once (`Unavailable`, retryable) rather
/// than queued behind a writer that is not keeping up (a stalled disk, another process holding the write lock):
/// callers' own concurrency bounds the queue in normal running, this bounds it when the writer stalls.
pub const MAX_QUEUED: usize = 16 * MAX_BATCH;

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable { backend: BACKEND, reason: e.to_string() }
}

/// One queued operation: run inside the batch's transaction, answered once the batch is committed.
trait Op: Send {
    /// Runs the operation with nothing to undo it alone: `false` if it failed, which may leave some of its writes
    /// behind (the writer then rolls the whole batch back and runs it again with [`Op::run_alone`]).
    fn run(&mut self, conn: &Connection, cfg: &StoreConfig, now: i64) -> bool;
    /// Runs the operation inside a savepoint of its own: a failure leaves nothing behind, the batch's others commit.
    /// `false` when a failure could not be undone alone (its savepoint gone, with the whole transaction when SQLite
    /// rolled that back itself): the batch then keeps nothing.
    fn run_alone(&mut self, conn: &Connection, cfg: &StoreConfig, now: i64) -> bool;
    fn answer(self: Box<Self>, committed: Result<(), StoreError>);
    /// The error of its last run, if it failed.
    fn failure(&self) -> Option<StoreError>;
    /// Whether the operation is one only worth running while its caller waits (an admission, a claim, a read), and
    /// its caller has given up (its timeout): the runtime has refused the message, retryably, so running it later
    /// would leave a replay entry or a claim behind for a message that was refused, and the peer's retry would then
    /// be refused `REPLAY_DETECTED` or `DUPLICATE_TASK`.
    fn abandoned(&self) -> bool;
}

/// `Fn`, not `FnOnce`: a batch in which one operation fails is run again, the others included.
type OpFn<T> = Box<dyn Fn(&Connection, &StoreConfig, i64) -> Result<T, StoreError> + Send>;

struct Pending<T> {
    op: OpFn<T>,
    out: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
    /// Skipped when its caller has given up ([`Op::abandoned`]).
    only_while_awaited: bool,
}

impl<T: Send> Op for Pending<T> {
    fn run(&mut self, conn: &Connection, cfg: &StoreConfig, now: i64) -> bool {
        let out = (self.op)(conn, cfg, now);
        let ok = out.is_ok();
        self.out = Some(out);
        ok
    }

    fn run_alone(&mut self, conn: &Connection, cfg: &StoreConfig, now: i64) -> bool {
        let statement = |sql: &str| conn.prepare_cached(sql).and_then(|mut st| st.execute([])).map_err(unavailable);
        let out = statement("SAVEPOINT op").and_then(|_| (self.op)(conn, cfg, now));
        let (out, undone) = match out {
            Ok(value) => match statement("RELEASE op") {
                Ok(_) => (Ok(value), true),
                Err(e) => (Err(e), false),
            },
            // The operation's own error is the cause, whether or not its savepoint could be rolled back to.
            Err(e) => (Err(e), statement("ROLLBACK TO op").and_then(|_| statement("RELEASE op")).is_ok()),
        };
        self.out = Some(out);
        undone
    }

    fn answer(self: Box<Self>, committed: Result<(), StoreError>) {
        let this = *self;
        let out = match committed {
            Ok(()) => this.out.unwrap_or_else(|| Err(unavailable("the operation did not run"))),
            Err(e) => Err(e),
        };
        // The caller may have given up (its timeout): nothing to tell it then.
        let _ = this.reply.send(out);
    }

    fn failure(&self) -> Option<StoreError> {
        self.out.as_ref().and_then(|out| out.as_ref().err().cloned())
    }

    fn abandoned(&self) -> bool {
        self.only_while_awaited && self.reply.is_closed()
    }
}

/// The writer thread: takes every queued operation (up to [`MAX_BATCH`]), runs them in one transaction, commits,
/// then answers them all.
///
/// Operations run without savepoints: each would cost two statements and a copy of every page the operation first
/// touches (the statement journal), for a failure that almost never comes (an I/O error, a corrupt record). When one
/// does fail, the whole transaction is rolled back and the batch runs again with a savepoint per operation, so that
/// only the failed one is undone; operations are `Fn` and read what they decide from the database, which the
/// rollback has put back as it was, and `now` is the same, so the second run decides as the first did.
fn write_loop(conn: Connection, cfg: StoreConfig, room: Room, queue: mpsc::Receiver<Box<dyn Op>>) {
    let mut ops: u64 = 0;
    let sweeps = OutageLog::new("the SQLite sweep", OUTAGE_LINE_EVERY);
    let early_drops = OutageLog::new("keeping every result for its TTL", OUTAGE_LINE_EVERY);
    // While the file is near its bound (or after a batch failed), every batch checks; otherwise every
    // `room.check_every` operations.
    let pressed = std::cell::Cell::new(false);
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        batch.retain(|op| !op.abandoned());
        if batch.is_empty() {
            continue;
        }
        let now = now_ms();
        let sweep_due = ops / SWEEP_EVERY != (ops + batch.len() as u64) / SWEEP_EVERY;
        let room_due = pressed.get() || ops / room.check_every != (ops + batch.len() as u64) / room.check_every;
        ops += batch.len() as u64;
        let begin = || -> Result<(), StoreError> {
            conn.execute_batch("BEGIN IMMEDIATE").map_err(unavailable)?;
            if sweep_due {
                match sweep(&conn, now, ms(cfg.closed_ttl)) {
                    Ok(()) => sweeps.succeeded(),
                    Err(e) => sweeps.failed(&e, "could not sweep expired rows"),
                }
            }
            if room_due {
                let made = room.make(&conn, &cfg, now);
                pressed.set(!matches!(made, Ok(0)));
                match made {
                    Ok(0) => early_drops.succeeded(),
                    Ok(dropped) => early_drops.failed(
                        &format_args!("{dropped} ended tasks' records dropped before their TTL"),
                        "the SQLite file is near its bound (--sqlite-max-bytes): the oldest results go first",
                    ),
                    Err(e) => early_drops.failed(&e, "could not make room in the SQLite file"),
                }
            }
            if conn.is_autocommit() {
                // SQLite rolled the transaction back itself (a full file or disk while sweeping or making room):
                // the operations must not run outside one.
                return Err(unavailable("the batch's transaction was rolled back before its operations ran"));
            }
            Ok(())
        };
        let committed = (|| {
            begin()?;
            // Waiting for the write lock (another process's transaction, `busy_timeout`) may have outlasted callers.
            batch.retain(|op| !op.abandoned());
            // Stops at the first failure: some errors (a full disk or file, an I/O error) have SQLite roll the
            // transaction back itself, and an operation run after that would commit on its own, outside the batch,
            // and then run again below.
            let all_ran = batch.iter_mut().all(|op| op.run(&conn, &cfg, now));
            if !all_ran {
                if !conn.is_autocommit() {
                    conn.execute_batch("ROLLBACK").map_err(unavailable)?;
                }
                begin()?;
                for op in &mut batch {
                    if !op.run_alone(&conn, &cfg, now) || conn.is_autocommit() {
                        // Rolled back by SQLite (the operations released before this one with it), or left half
                        // done: the batch keeps nothing, and each of its callers is told why.
                        let cause = match op.failure() {
                            Some(StoreError::Unavailable { reason, .. }) => reason,
                            Some(other) => other.to_string(),
                            None => "no cause given".to_owned(),
                        };
                        return Err(unavailable(format!("the batch was rolled back: {cause}")));
                    }
                }
            }
            conn.execute_batch("COMMIT").map_err(unavailable)
        })();
        if committed.is_err() {
            // A batch that failed for a full file makes room before the next one, not a few hundred operations on.
            pressed.set(true);
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
        }
        for op in batch {
            op.answer(committed.clone());
        }
    }
}

/// Checkpoints the WAL every [`CHECKPOINT_EVERY`] until the store is dropped, then once more. `PASSIVE`: it copies
/// what it can without waiting for, or blocking, the writer; the writer starts the WAL over from its beginning once a
/// checkpoint has copied all of it.
fn checkpoint_loop(conn: &Connection, stop: &mpsc::Receiver<()>) {
    // A full disk fails every checkpoint, 20 a second: logged as one outage, not a line each.
    let outage = OutageLog::new("the SQLite checkpoint", OUTAGE_LINE_EVERY);
    let checkpoint = || match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
        Ok(()) => outage.succeeded(),
        Err(e) => outage.failed(&e, "could not checkpoint the SQLite WAL"),
    };
    while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(CHECKPOINT_EVERY) {
        checkpoint();
    }
    checkpoint();
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`, in WAL mode with `cfg.sqlite_durability`, and starts its
    /// writer thread.
    pub fn open(path: &Path, cfg: StoreConfig) -> Result<Self, OpenError> {
        let fail = |e: rusqlite::Error| OpenError::Sqlite { path: path.display().to_string(), reason: e.to_string() };
        let conn = Connection::open(path).map_err(fail)?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(fail)?;
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).map_err(fail)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(OpenError::Sqlite {
                path: path.display().to_string(),
                reason: format!("the journal mode is {mode}, not WAL"),
            });
        }
        conn.execute_batch(synchronous(cfg.sqlite_durability)).map_err(fail)?;
        // Savepoints write their undo pages to a statement journal: in memory, not a temporary file.
        conn.execute_batch("PRAGMA temp_store=MEMORY;").map_err(fail)?;
        // The database file is read through a memory map (`StoreConfig::sqlite_mmap_bytes`), so a page read back
        // costs no system call and the page cache can be small (2 MiB). A small one matters: whenever a commit
        // rebalanced a b-tree (random task ids and dedupe keys split leaves often), SQLite scans the cache's whole
        // hash table at the commit's end (`pcache1TruncateUnsafe`, 13 % of the writer's time with 64 MiB). Without
        // the map, pages are read back with `pread`, and a larger cache pays (64 MiB).
        let (cache_kib, mmap) = match cfg.sqlite_mmap_bytes {
            0 => (65_536, 0),
            bytes => (2048, bytes.min(i64::MAX as u64)),
        };
        conn.execute_batch(&format!("PRAGMA cache_size=-{cache_kib}; PRAGMA mmap_size={mmap};")).map_err(fail)?;
        conn.execute_batch(SCHEMA).map_err(fail)?;
        // In a write transaction, so that of two processes opening an older file at once one moves the tasks (and
        // the dedupe entries) and the other then finds nothing to move.
        conn.execute_batch("BEGIN IMMEDIATE").map_err(fail)?;
        let has_table = |name: &str| {
            conn.query_row("SELECT COUNT(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?1", [name], |r| {
                r.get::<_, bool>(0)
            })
        };
        let owner = has_table("tasks")
            .and_then(|old| if old { conn.execute_batch(MIGRATE_TASKS) } else { Ok(()) })
            .and_then(|()| has_table("dedupe"))
            .and_then(|old| if old { conn.execute_batch(MIGRATE_DEDUPE) } else { Ok(()) })
            .and_then(|()| {
                conn.query_row("SELECT COUNT(*) = 0 FROM pragma_table_info('sessions') WHERE name = 'tasks'", [], |r| {
                    r.get::<_, bool>(0)
                })
            })
            .and_then(|old| if old { conn.execute_batch(MIGRATE_SESSION_USAGE) } else { Ok(()) })
            .and_then(|()| {
                conn.query_row("SELECT COUNT(*) = 0 FROM meta WHERE name = 'replay_shares'", [], |r| {
                    r.get::<_, bool>(0)
                })
            })
            .and_then(|old| if old { conn.execute_batch(MIGRATE_REPLAY_SHARES) } else { Ok(()) })
            .and_then(|()| {
                conn.query_row(
                    "SELECT COUNT(*) = 0 FROM pragma_table_info('task_rows') WHERE name = 'message_key'",
                    [],
                    |r| r.get::<_, bool>(0),
                )
            })
            .and_then(|old| if old { conn.execute_batch(MIGRATE_MESSAGE_KEY) } else { Ok(()) })
            .and_then(|()| {
                // A file is one delegate's (Redis keys carry the delegate instead): its first opener's, files from
                // before included.
                conn.execute(
                    "INSERT INTO delegate (namespace) SELECT ?1 WHERE NOT EXISTS (SELECT 1 FROM delegate)",
                    [&cfg.namespace],
                )?;
                conn.query_row("SELECT namespace FROM delegate LIMIT 1", [], |r| r.get::<_, String>(0))
            })
            .and_then(|owner| conn.execute_batch("COMMIT").map(|()| owner));
        match owner {
            Ok(owner) if owner == cfg.namespace => {}
            Ok(owner) => {
                return Err(OpenError::Sqlite {
                    path: path.display().to_string(),
                    reason: format!(
                        "the file holds the state of delegate {owner:?}, not {:?}: replicas of one delegate share a \
                         file, each delegate needs its own",
                        cfg.namespace
                    ),
                });
            }
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(fail(e));
            }
        }
        // Most checkpointing runs on a thread of its own (below), not in the writer's commits: a checkpoint copies
        // pages into the database file and fsyncs it, which stalls every caller of the batch it follows. The writer
        // still checkpoints past `sqlite_wal_pages` (by then the thread has copied all but the last
        // `CHECKPOINT_EVERY`'s pages): a checkpoint on another thread never catches up with a writer that keeps
        // committing, and only a complete one lets the next commit start the WAL over.
        let pages = cfg.sqlite_wal_pages.max(1);
        conn.execute_batch(&format!(
            "PRAGMA wal_autocheckpoint={pages}; PRAGMA journal_size_limit={};",
            u64::from(pages) * 4096
        ))
        .map_err(fail)?;
        let room = Room::new(&conn, cfg.sqlite_max_bytes).map_err(fail)?;
        let checkpoints = Connection::open(path).map_err(fail)?;
        checkpoints.busy_timeout(Duration::from_secs(5)).map_err(fail)?;
        let spawn_error =
            |e: std::io::Error| OpenError::Sqlite { path: path.display().to_string(), reason: e.to_string() };
        let (checkpointer, stop) = mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("ldp-sqlite-checkpoint".into())
            .spawn(move || checkpoint_loop(&checkpoints, &stop))
            .map_err(spawn_error)?;
        let (writer, queue) = mpsc::sync_channel::<Box<dyn Op>>(MAX_QUEUED);
        std::thread::Builder::new()
            .name("ldp-sqlite-writer".into())
            .spawn(move || write_loop(conn, cfg, room, queue))
            .map_err(spawn_error)?;
        Ok(Self { writer: Arc::new(writer), _checkpointer: Arc::new(checkpointer) })
    }

    /// Runs `op` in the writer's next batch; answers once that batch is committed. It runs even if the caller has
    /// given up meanwhile (a result, a close, a release: what the caller decided stands).
    async fn tx<T: Send + 'static>(
        &self,
        op: impl Fn(&Connection, &StoreConfig, i64) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.queue(op, false).await
    }

    /// [`SqliteStore::tx`] for an operation only worth running while its caller waits for it (an admission, a
    /// claim, a read): skipped if its caller has given up by the time the writer takes it ([`Op::abandoned`]).
    async fn tx_while_awaited<T: Send + 'static>(
        &self,
        op: impl Fn(&Connection, &StoreConfig, i64) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.queue(op, true).await
    }

    async fn queue<T: Send + 'static>(
        &self,
        op: impl Fn(&Connection, &StoreConfig, i64) -> Result<T, StoreError> + Send + 'static,
        only_while_awaited: bool,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        let pending: Box<dyn Op> = Box::new(Pending { op: Box::new(op), out: None, reply, only_while_awaited });
        self.writer.try_send(pending).map_err(|e| match e {
            mpsc::TrySendError::Full(_) => {
                unavailable(format!("{MAX_QUEUED} operations are already waiting for the SQLite writer"))
            }
            mpsc::TrySendError::Disconnected(_) => unavailable("the writer thread has stopped"),
        })?;
        answer.await.map_err(|_| unavailable("the writer thread has stopped"))?
    }
}

/// The bound of the database file's pages in use ([`StoreConfig::sqlite_max_bytes`]) and the marks between which
/// the writer drops the oldest ended tasks' records early.
#[derive(Debug, Clone, Copy)]
struct Room {
    /// Past this many pages in use, a batch first drops old records.
    drop_above: u64,
    /// ... until this many are in use (or it has dropped [`ROOM_ROWS_PER_BATCH`]).
    drop_to: u64,
    /// How often, in operations, the writer reads the pages in use while the file is not near its bound
    /// ([`Room::check_every`]).
    check_every: u64,
}

/// The most records one batch drops to make room: a writer that must drop more to get under the mark does so over
/// the next batches, rather than stalling this one's callers. (A batch's own writes add at most [`MAX_BATCH`] records.)
const ROOM_ROWS_PER_BATCH: usize = 1024;

/// The fewest operations between two reads of the pages in use while the file is not near its bound.
const ROOM_CHECK_EVERY: u64 = 16;

/// The most operations between two such reads. Each read costs about as much as a claim (the pager's page counts
/// through two table-valued pragmas), so a bound with room to spare is read less often.
const ROOM_CHECK_MOST: u64 = 256;

/// The result size the eighth between the mark and the bound is sized for (see [`Room::check_every`]).
const ROOM_RESULT_BYTES: u64 = 8 << 10;

/// Records read and dropped at a time while making room, between checks of the pages in use.
const ROOM_CHUNK: i64 = 64;

/// The oldest ended tasks' records, in insertion order (`?1` at most). A running task's record starts so: `status` is
/// [`SharedTask`]'s first field, and these are the only records this store writes. Reading that prefix spares
/// parsing a record, which may hold a result of up to a megabyte.
const OLDEST_ENDED: &str = "SELECT row, message_key, message_until_ms FROM task_rows \
     WHERE substr(record, 1, 19) <> '{\"status\":\"running\"' ORDER BY row LIMIT ?1";

impl Room {
    /// Sets the file's bound on `conn` (`PRAGMA max_page_count`, which never goes below the pages the file has; at
    /// least [`MIN_BOUND_BYTES`]) and its marks ([`drop_marks`]).
    fn new(conn: &Connection, max_bytes: u64) -> rusqlite::Result<Self> {
        let page_size: u32 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        let max_pages = max_bytes.max(MIN_BOUND_BYTES) / u64::from(page_size.max(512));
        conn.query_row(&format!("PRAGMA max_page_count={max_pages}"), [], |_| Ok(()))?;
        let (drop_above, drop_to) = drop_marks(max_pages);
        let eighth = max_pages.saturating_sub(drop_above).saturating_mul(u64::from(page_size.max(512)));
        Ok(Self { drop_above, drop_to, check_every: Self::check_every(eighth) })
    }

    /// How often to read the pages in use, given the bytes between the mark and the bound (`eighth`): between two
    /// reads the file grows by at most that many results (plus a batch's), which the eighth must hold. The smallest
    /// bound the store takes, 1 MiB, holds [`ROOM_CHECK_EVERY`] results of [`ROOM_RESULT_BYTES`]; the default bound
    /// (4 GiB) holds [`ROOM_CHECK_MOST`] results of a megabyte.
    fn check_every(eighth: u64) -> u64 {
        (eighth / ROOM_RESULT_BYTES).clamp(ROOM_CHECK_EVERY, ROOM_CHECK_MOST)
    }

    /// Drops the oldest ended tasks' records while more than [`Room::drop_above`] pages are in use, down to
    /// [`Room::drop_to`] or [`ROOM_ROWS_PER_BATCH`] records. A dropped record's message dedupe entry, while it
    /// lasts, is written on its own first, so that a resent unsigned message is still refused. Returns how many it
    /// dropped.
    fn make(&self, conn: &Connection, cfg: &StoreConfig, now: i64) -> Result<usize, StoreError> {
        if pages_in_use(conn)? <= self.drop_above {
            return Ok(0);
        }
        let mut dropped = 0;
        while dropped < ROOM_ROWS_PER_BATCH {
            let oldest = conn
                .prepare_cached(OLDEST_ENDED)
                .and_then(|mut st| {
                    st.query_map(params![ROOM_CHUNK], |r| {
                        Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?, r.get::<_, i64>(2)?))
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(unavailable)?;
            if oldest.is_empty() {
                break;
            }
            for (row, message_key, message_until) in &oldest {
                if let Some(key) = message_key.as_ref().filter(|_| *message_until > now) {
                    claim_dedupe(conn, cfg, &ReplayClaim::new("", key.clone(), *message_until), now)?;
                }
                conn.prepare_cached("DELETE FROM task_rows WHERE row = ?1")
                    .and_then(|mut st| st.execute(params![row]))
                    .map_err(unavailable)?;
            }
            dropped += oldest.len();
            if pages_in_use(conn)? <= self.drop_to {
                break;
            }
        }
        Ok(dropped)
    }
}

/// The database's pages in use: the pager's count less the free list's (both kept, neither counted by a scan).
fn pages_in_use(conn: &Connection) -> Result<u64, StoreError> {
    let used: i64 = conn
        .prepare_cached("SELECT page_count - freelist_count FROM pragma_page_count(), pragma_freelist_count()")
        .and_then(|mut st| st.query_row([], |r| r.get(0)))
        .map_err(unavailable)?;
    Ok(used.unsigned_abs())
}

/// The sweep's deletes (replay entries, tasks, sessions), each a range of an expiry index: the sweep runs every
/// [`SWEEP_EVERY`] operations, and a scan of every row would make its cost grow with everything the file holds (an
/// hour of results), not with what has expired. A task's expiry is its last write plus the result TTL, so the tasks'
/// expiry index takes its entries at its newest pages, as the tasks themselves do; a live session's row (and so its
/// index entry) is rewritten about once a second.
const SWEEP_DELETES: [&str; 3] = [
    // After `EXPIRED_SHARES` has uncounted them.
    "DELETE FROM replay WHERE expires_ms <= ?1",
    "DELETE FROM task_rows WHERE expires_ms <= ?1",
    // An expired session's row stays as the marker that it expired until `?2` (its expiry plus the marker's time); a
    // closed one (no record) goes at its expiry.
    "DELETE FROM sessions WHERE expires_ms <= ?1 AND (record IS NULL OR expires_ms <= ?2)",
];

/// Uncounts expired replay entries from their principals' shares, before they are deleted: every principal that
/// has expired entries (`?1` the time), then the shares that fell to none. Each reads the expired range of an index
/// (`replay_expiry`, then `replay_principal` per principal), never every entry.
const EXPIRED_SHARES: [&str; 2] = [
    "UPDATE replay_shares SET n = MAX(n - (SELECT COUNT(*) FROM replay WHERE replay.principal = replay_shares.principal \
     AND replay.expires_ms <= ?1), 0) WHERE principal IN (SELECT principal FROM replay WHERE expires_ms <= ?1)",
    "DELETE FROM replay_shares WHERE n <= 0 AND principal IN (SELECT principal FROM replay WHERE expires_ms <= ?1)",
];

/// [`EXPIRED_SHARES`] and the delete for one principal's expired entries (`?1` the principal, `?2` the time).
const EXPIRED_OF_PRINCIPAL: [&str; 3] = [
    "UPDATE replay_shares SET n = MAX(n - (SELECT COUNT(*) FROM replay WHERE principal = ?1 AND expires_ms <= ?2), 0) \
     WHERE principal = ?1",
    "DELETE FROM replay_shares WHERE principal = ?1 AND n <= 0",
    "DELETE FROM replay WHERE principal = ?1 AND expires_ms <= ?2",
];

/// Deletes the expired replay entries, of every principal or of one, keeping the total and the shares counted.
fn delete_expired_replay(conn: &Connection, now: i64, principal: Option<&str>) -> Result<(), StoreError> {
    let run = |sql: &str, params: &[&dyn rusqlite::ToSql]| {
        conn.prepare_cached(sql).and_then(|mut st| st.execute(params)).map_err(unavailable)
    };
    let gone = match principal {
        None => {
            for sql in EXPIRED_SHARES {
                run(sql, params![now])?;
            }
            run(SWEEP_DELETES[0], params![now])?
        }
        Some(principal) => {
            let [uncount, empty, delete] = EXPIRED_OF_PRINCIPAL;
            run(uncount, params![principal, now])?;
            run(empty, params![principal])?;
            run(delete, params![principal, now])?
        }
    };
    count_replay_rows(conn, -i64::try_from(gone).unwrap_or(i64::MAX))
}

/// Adds `delta` to `principal`'s count of replay entries (a share at none is deleted).
fn count_share(conn: &Connection, principal: &str, delta: i64) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO replay_shares (principal, n) VALUES (?1, MAX(?2, 0)) \
         ON CONFLICT (principal) DO UPDATE SET n = MAX(n + ?2, 0)",
    )
    .and_then(|mut st| st.execute(params![principal, delta]))
    .map_err(unavailable)?;
    if delta < 0 {
        conn.prepare_cached("DELETE FROM replay_shares WHERE principal = ?1 AND n <= 0")
            .and_then(|mut st| st.execute(params![principal]))
            .map_err(unavailable)?;
    }
    Ok(())
}

/// `principal`'s count of replay entries, live or expired but not yet deleted.
fn share(conn: &Connection, principal: &str) -> Result<usize, StoreError> {
    let n: Option<i64> = conn
        .prepare_cached("SELECT n FROM replay_shares WHERE principal = ?1")
        .and_then(|mut st| st.query_row(params![principal], |r| r.get(0)).optional())
        .map_err(unavailable)?;
    Ok(n.map_or(0, |n| usize::try_from(n).unwrap_or(0)))
}

/// Deletes expired rows (lookups ignore them already; this returns their space). An expired session stays as a
/// marker for `marker` ms after its expiry.
fn sweep(conn: &Connection, now: i64, marker: i64) -> Result<(), StoreError> {
    let [_, tasks, sessions] = SWEEP_DELETES;
    delete_expired_replay(conn, now, None)?;
    // Dedupe entries go a generation at a time instead ([`claim_dedupe`]).
    conn.prepare_cached(tasks).and_then(|mut st| st.execute(params![now])).map_err(unavailable)?;
    conn.prepare_cached(sessions)
        .and_then(|mut st| st.execute(params![now, now.saturating_sub(marker)]))
        .map_err(unavailable)?;
    Ok(())
}

/// Adds `delta` to the count of rows in the replay table (live or expired but not yet swept): the window's total,
/// read in O(1) where `COUNT(*)` would scan.
fn count_replay_rows(conn: &Connection, delta: i64) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE meta SET value = MAX(value + ?1, 0) WHERE name = 'replay_rows'")
        .and_then(|mut st| st.execute(params![delta]))
        .map_err(unavailable)?;
    Ok(())
}

fn replay_rows(conn: &Connection) -> Result<usize, StoreError> {
    let n: i64 = conn
        .prepare_cached("SELECT value FROM meta WHERE name = 'replay_rows'")
        .and_then(|mut st| st.query_row([], |r| r.get(0)))
        .map_err(unavailable)?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// A session's row: its record (`None` once closed) and expiry.
fn load_session(conn: &Connection, id: &str) -> Result<Option<(Option<String>, i64)>, StoreError> {
    Ok(load_session_usage(conn, id)?.map(|(record, expires, _)| (record, expires)))
}

/// A session's row with its usage.
fn load_session_usage(conn: &Connection, id: &str) -> Result<Option<(Option<String>, i64, SessionUsage)>, StoreError> {
    let row = conn
        .prepare_cached("SELECT record, expires_ms, tasks, tokens, cost FROM sessions WHERE id = ?1")
        .and_then(|mut st| {
            st.query_row(params![id], |r| {
                Ok((r.get::<_, Option<String>>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?, r.get::<_, i64>(3)?, {
                    r.get::<_, f64>(4)?
                }))
            })
            .optional()
        })
        .map_err(unavailable)?;
    Ok(row.map(|(record, expires, tasks, tokens, cost)| {
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        (record, expires, SessionUsage::new(count(tasks), count(tokens), cost))
    }))
}

/// What a session's row says now, `marker` being how long an expired session is remembered.
fn lookup(row: Option<(Option<String>, i64)>, now: i64, marker: i64) -> Result<SessionLookup, StoreError> {
    Ok(match row {
        Some((Some(text), expires)) if expires > now => SessionLookup::Live(decode(&text)?),
        Some((Some(_), expires)) if expires.saturating_add(marker) > now => SessionLookup::Expired,
        Some((None, expires)) if expires > now => SessionLookup::Closed,
        _ => SessionLookup::Unknown,
    })
}

fn decode<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt(BACKEND, e))
}

fn encode<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| corrupt(BACKEND, e))
}

fn load_task(conn: &Connection, key: &TaskKey, now: i64) -> Result<Option<SharedTask>, StoreError> {
    let row: Option<(String, Option<String>, i64)> = conn
        .prepare_cached(
            "SELECT record, message_key, message_until_ms FROM task_rows \
             WHERE session_id = ?1 AND task_id = ?2 AND expires_ms > ?3",
        )
        .and_then(|mut st| {
            st.query_row(params![key.session_id, key.task_id, now], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()
        })
        .map_err(unavailable)?;
    let Some((text, message_key, message_until_ms)) = row else { return Ok(None) };
    let mut task: SharedTask = decode(&text)?;
    (task.message_key, task.message_until_ms) = (message_key, message_until_ms);
    Ok(Some(task))
}

/// Writes a task's record; its message key (a column of the row) stays as it is.
fn put_task(conn: &Connection, key: &TaskKey, task: &SharedTask, expires: i64) -> Result<(), StoreError> {
    put_task_record(conn, key, &encode(&crate::without_message_key(task))?, expires)
}

/// [`put_task`] of a record already encoded.
fn put_task_record(conn: &Connection, key: &TaskKey, record: &str, expires: i64) -> Result<(), StoreError> {
    conn.prepare_cached(
        // In place when the task is there already (its row keeps its place, near the table's end).
        "INSERT INTO task_rows (session_id, task_id, record, expires_ms) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (session_id, task_id) DO UPDATE SET record = excluded.record, expires_ms = excluded.expires_ms",
    )
    .and_then(|mut st| st.execute(params![key.session_id, key.task_id, record, expires]))
    .map_err(unavailable)?;
    Ok(())
}

/// The replay step of an admission. Entries without bounds (unsigned traffic's dedupe) live in a table of their own,
/// with no principal or count to keep: one upsert decides.
fn claim_message(
    conn: &Connection,
    cfg: &StoreConfig,
    claim: &ReplayClaim,
    now: i64,
) -> Result<ReplayVerdict, StoreError> {
    if claim.max_per_principal.is_none() && claim.max_total.is_none() {
        return claim_dedupe(conn, cfg, claim, now);
    }
    let seen: Option<(String, i64)> = conn
        .prepare_cached("SELECT principal, expires_ms FROM replay WHERE key = ?1")
        .and_then(|mut st| st.query_row(params![claim.key], |r| Ok((r.get(0)?, r.get(1)?))).optional())
        .map_err(unavailable)?;
    match seen {
        Some((_, expires)) if expires > now => return Ok(ReplayVerdict::Seen),
        // An expired entry of the same key, not yet swept: it goes first, uncounted, and the key is new again.
        Some((held_by, _)) => {
            conn.prepare_cached("DELETE FROM replay WHERE key = ?1")
                .and_then(|mut st| st.execute(params![claim.key]))
                .map_err(unavailable)?;
            count_share(conn, &held_by, -1)?;
            count_replay_rows(conn, -1)?;
        }
        None => {}
    }
    // Counts kept as entries come and go: a principal's share in O(1), where counting its entries took a time that
    // grew with them, on the one writer every message waits for.
    let room = |conn: &Connection| -> Result<ReplayVerdict, StoreError> {
        Ok(replay_room(share(conn, &claim.principal)?, replay_rows(conn)?, claim.max_per_principal, claim.max_total))
    };
    let mut verdict = room(conn)?;
    // Expired entries still count until deleted: delete this principal's, then everyone's, before refusing.
    for of in [Some(claim.principal.as_str()), None] {
        if verdict == ReplayVerdict::Fresh {
            break;
        }
        delete_expired_replay(conn, now, of)?;
        verdict = room(conn)?;
    }
    if verdict != ReplayVerdict::Fresh {
        return Ok(verdict);
    }
    conn.prepare_cached("INSERT INTO replay (key, principal, expires_ms) VALUES (?1, ?2, ?3)")
        .and_then(|mut st| st.execute(params![claim.key, claim.principal, claim.expires_at_ms]))
        .map_err(unavailable)?;
    count_replay_rows(conn, 1)?;
    count_share(conn, &claim.principal, 1)?;
    Ok(ReplayVerdict::Fresh)
}

/// SQL of the two dedupe generations: (look up a key, upsert an entry, clear the table).
fn dedupe_sql(generation: i64) -> (&'static str, &'static str, &'static str) {
    if generation == 0 {
        (
            "SELECT expires_ms FROM dedupe_0 WHERE key = ?1",
            "INSERT INTO dedupe_0 (key, expires_ms) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE \
             SET expires_ms = excluded.expires_ms WHERE dedupe_0.expires_ms <= ?3",
            "DELETE FROM dedupe_0",
        )
    } else {
        (
            "SELECT expires_ms FROM dedupe_1 WHERE key = ?1",
            "INSERT INTO dedupe_1 (key, expires_ms) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE \
             SET expires_ms = excluded.expires_ms WHERE dedupe_1.expires_ms <= ?3",
            "DELETE FROM dedupe_1",
        )
    }
}

fn set_meta(conn: &Connection, name: &str, value: i64) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE meta SET value = ?2 WHERE name = ?1")
        .and_then(|mut st| st.execute(params![name, value]))
        .map_err(unavailable)?;
    Ok(())
}

fn until_name(generation: i64) -> &'static str {
    if generation == 0 { "dedupe_0_until_ms" } else { "dedupe_1_until_ms" }
}

/// A dedupe key as stored: the machine's keys (32 hex digits) as their 16 bytes, any other as its text (a text never
/// equals a blob in SQLite, so the two forms cannot collide).
fn dedupe_value(key: &str) -> rusqlite::types::Value {
    let hex = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let bytes: Option<Vec<u8>> = (key.len() == 32)
        .then(|| key.as_bytes().chunks(2).map(|pair| Some(hex(pair[0])? << 4 | hex(pair[1])?)).collect())
        .flatten();
    match bytes {
        Some(bytes) => rusqlite::types::Value::Blob(bytes),
        None => rusqlite::types::Value::Text(key.to_owned()),
    }
}

/// Unsigned traffic's dedupe step. The entries live in two generation tables: new ones go into the current one, a
/// key is seen if either holds it unexpired. Once the other generation's entries have all expired (its `until_ms`,
/// kept a second ahead so that it is written about once a second, has passed) and the current one has taken
/// entries for [`StoreConfig::sqlite_dedupe_generation`], the other is emptied at once and becomes the current one.
/// So no entry is deleted on its own: a sweep by expiry would rewrite a random page per entry, and an index on the
/// expiry would add a page to every commit.
fn claim_dedupe(
    conn: &Connection,
    cfg: &StoreConfig,
    claim: &ReplayClaim,
    now: i64,
) -> Result<ReplayVerdict, StoreError> {
    let (current, until) = dedupe_generation(conn, cfg, now)?;
    let key = dedupe_value(&claim.key);
    if dedupe_held(conn, 1 - current, &key, now)? {
        return Ok(ReplayVerdict::Seen);
    }
    let inserted = conn
        .prepare_cached(dedupe_sql(current).1)
        .and_then(|mut st| st.execute(params![key, claim.expires_at_ms, now]))
        .map_err(unavailable)?;
    if inserted == 0 {
        return Ok(ReplayVerdict::Seen);
    }
    if claim.expires_at_ms > until {
        set_meta(conn, until_name(current), claim.expires_at_ms.saturating_add(1000))?;
    }
    Ok(ReplayVerdict::Fresh)
}

/// The current dedupe generation and how long its entries last (`dedupe_N_until_ms`), the older one cleared and made
/// current first when its time has come.
fn dedupe_generation(conn: &Connection, cfg: &StoreConfig, now: i64) -> Result<(i64, i64), StoreError> {
    // One statement for the four values: this runs for nearly every unsigned message.
    let (current, since, until): (i64, i64, [i64; 2]) = conn
        .prepare_cached(
            "SELECT (SELECT value FROM meta WHERE name = 'dedupe_current'), \
             (SELECT value FROM meta WHERE name = 'dedupe_since_ms'), \
             (SELECT value FROM meta WHERE name = 'dedupe_0_until_ms'), \
             (SELECT value FROM meta WHERE name = 'dedupe_1_until_ms')",
        )
        .and_then(|mut st| {
            st.query_row([], |r| Ok((r.get::<_, i64>(0)?.clamp(0, 1), r.get(1)?, [r.get(2)?, r.get(3)?])))
        })
        .map_err(unavailable)?;
    let (other, until_of) = (1 - current, |generation: i64| until[usize::from(generation != 0)]);
    if now.saturating_sub(since) >= ms(cfg.sqlite_dedupe_generation) && until_of(other) <= now {
        conn.prepare_cached(dedupe_sql(other).2).and_then(|mut st| st.execute([])).map_err(unavailable)?;
        set_meta(conn, until_name(other), 0)?;
        set_meta(conn, "dedupe_current", other)?;
        set_meta(conn, "dedupe_since_ms", now)?;
        return Ok((other, 0));
    }
    Ok((current, until_of(current)))
}

/// Whether generation `generation` holds a live entry for `key`.
fn dedupe_held(conn: &Connection, generation: i64, key: &rusqlite::types::Value, now: i64) -> Result<bool, StoreError> {
    let expires: Option<i64> = conn
        .prepare_cached(dedupe_sql(generation).0)
        .and_then(|mut st| st.query_row(params![key], |r| r.get(0)).optional())
        .map_err(unavailable)?;
    Ok(expires.is_some_and(|expires| expires > now))
}

/// Whether an unsigned message's dedupe entry is held as an entry (in either generation), without writing it. The
/// record of the task the message claimed may hold it too ([`record_holds`]).
fn dedupe_holds(conn: &Connection, cfg: &StoreConfig, claim: &ReplayClaim, now: i64) -> Result<bool, StoreError> {
    let (current, _) = dedupe_generation(conn, cfg, now)?;
    let key = dedupe_value(&claim.key);
    Ok(dedupe_held(conn, current, &key, now)? || dedupe_held(conn, 1 - current, &key, now)?)
}

/// Whether the record of `task` holds an unsigned message's dedupe entry (`SharedTask::holds_message`): the message
/// claimed the task before. Only the paths that make no claim read it (the task limit, a session no longer live): a
/// claim learns it from its insert ([`claim_task`]).
fn record_holds(conn: &Connection, task: &TaskKey, claim: &ReplayClaim, now: i64) -> Result<bool, StoreError> {
    Ok(load_task(conn, task, now)?.is_some_and(|held| held.holds_message(claim, now)))
}

/// The session step of an admission, read only: the lookup, with the session's usage and the expiry to write if the
/// message is admitted ([`renew_session`]): the write waits for the admission's replay verdict, which a task's record
/// may decide after this ([`claim_task`]), so that a replayed message changes nothing.
fn admission_session(
    conn: &Connection,
    id: &str,
    now: i64,
    marker: i64,
) -> Result<(SessionLookup, SessionUsage, Option<i64>), StoreError> {
    let row = load_session_usage(conn, id)?;
    let stored = row.as_ref().map(|(_, expires, _)| *expires);
    let usage = row.as_ref().map(|(_, _, usage)| *usage).unwrap_or_default();
    let found = lookup(row.map(|(record, expires, _)| (record, expires)), now, marker)?;
    let mut renew = None;
    if let (SessionLookup::Live(session), Some(stored)) = (&found, stored) {
        let ttl = ms(Duration::from_secs(session.ttl_secs));
        let due = now.saturating_add(ttl);
        // Written ahead by a tenth of the TTL (at most a second), so that a busy session's row is rewritten about
        // once a second rather than by every commit; the session lives that much longer at most, never shorter.
        if stored < due {
            renew = Some(due.saturating_add((ttl / 10).min(1000)));
        }
    }
    Ok((found, usage, renew))
}

/// Restarts a live session's TTL: its row expires at `until`.
fn renew_session(conn: &Connection, id: &str, until: i64) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE sessions SET expires_ms = ?2 WHERE id = ?1")
        .and_then(|mut st| st.execute(params![id, until]))
        .map_err(unavailable)?;
    Ok(())
}

/// Adds what a task spent to its session's usage, while the session is live.
fn add_session_cost(conn: &Connection, id: &str, cost: TaskCost, now: i64) -> Result<(), StoreError> {
    let tokens = i64::try_from(cost.tokens).unwrap_or(i64::MAX);
    conn.prepare_cached(
        // An integer sum past i64 would turn into a REAL in SQLite: saturate instead.
        "UPDATE sessions SET tokens = CASE WHEN tokens > 9223372036854775807 - ?2 THEN 9223372036854775807 \
         ELSE tokens + ?2 END, cost = cost + ?3 WHERE id = ?1 AND record IS NOT NULL AND expires_ms > ?4",
    )
    .and_then(|mut st| st.execute(params![id, tokens, cost.cost_usd, now]))
    .map_err(unavailable)?;
    Ok(())
}

/// The claim step of an admission: refused at the session's task limit, counted in the session's row under one.
/// `message` is the unsigned message's dedupe entry the claim stands in for, if any: [`Claimed::Replayed`] when the
/// task's record holds it already.
fn claim_counted(
    conn: &Connection,
    cfg: &StoreConfig,
    step: (&TaskKey, &SharedTask, Duration, Option<u64>),
    usage: SessionUsage,
    message: Option<&ReplayClaim>,
    now: i64,
) -> Result<Claimed, StoreError> {
    let (key, task, lease, max_tasks) = step;
    if max_tasks.is_some_and(|max| usage.tasks >= max) {
        if let Some(entry) = message
            && record_holds(conn, key, entry, now)?
        {
            return Ok(Claimed::Replayed);
        }
        return Ok(Claimed::Answer(TaskClaim::LimitReached));
    }
    let claim = claim_task(conn, cfg, (key, task, lease), message, now)?;
    if claim == Claimed::Answer(TaskClaim::Claimed) && max_tasks.is_some() {
        count_session_tasks(conn, &key.session_id, 1)?;
    }
    Ok(claim)
}

/// How a claim went: answered, or the message that made it is a replay.
#[derive(Debug, Clone, PartialEq)]
enum Claimed {
    /// The store's answer to the claim.
    Answer(TaskClaim),
    /// The task's record holds the claiming message's dedupe entry (`SharedTask::holds_message`): the same unsigned
    /// message claimed it before, and nothing was written.
    Replayed,
}

/// Adds `delta` to a session's count of admitted tasks, never below 0.
fn count_session_tasks(conn: &Connection, id: &str, delta: i64) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE sessions SET tasks = MAX(tasks + ?2, 0) WHERE id = ?1")
        .and_then(|mut st| st.execute(params![id, delta]))
        .map_err(unavailable)?;
    Ok(())
}

/// Claims a task for `task.owner`. `message` is as for [`claim_counted`]: whether the record holds it is read only
/// when the task is in the store already, so a new task id (nearly every claim) costs no lookup before its insert.
fn claim_task(
    conn: &Connection,
    cfg: &StoreConfig,
    (key, task, lease): (&TaskKey, &SharedTask, Duration),
    message: Option<&ReplayClaim>,
    now: i64,
) -> Result<Claimed, StoreError> {
    let mut running = task.clone();
    running.lease_until_ms = now.saturating_add(ms(lease));
    let (message_key, message_until) = (running.message_key.take(), std::mem::take(&mut running.message_until_ms));
    let (record, expires) = (encode(&running)?, now.saturating_add(ms(cfg.result_ttl)));
    // A task id new to the store (nearly every claim) is claimed by this one statement; one the store holds (even
    // expired) is decided on its record.
    let inserted = conn
        .prepare_cached(
            "INSERT INTO task_rows (session_id, task_id, record, expires_ms, message_key, message_until_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (session_id, task_id) DO NOTHING",
        )
        .and_then(|mut st| {
            st.execute(params![key.session_id, key.task_id, record, expires, message_key, message_until])
        })
        .map_err(unavailable)?;
    // The dedupe entries records stand for must outlive them: the one of a record replaced (a failed task submitted
    // again), and the new one's when it lasts longer than the record will.
    let note = |(message, until): (String, i64)| claim_dedupe(conn, cfg, &ReplayClaim::new("", message, until), now);
    if inserted == 0 {
        if let Some(held) = load_task(conn, key, now)? {
            if message.is_some_and(|entry| held.holds_message(entry, now)) {
                return Ok(Claimed::Replayed);
            }
            if !held.claimable(held.lease_until_ms > now) {
                return Ok(Claimed::Answer(TaskClaim::Taken));
            }
            crate::outlived(&held, task, now).map(note).transpose()?;
        }
        conn.prepare_cached(
            "INSERT INTO task_rows (session_id, task_id, record, expires_ms, message_key, message_until_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (session_id, task_id) DO UPDATE SET \
             record = excluded.record, expires_ms = excluded.expires_ms, message_key = excluded.message_key, \
             message_until_ms = excluded.message_until_ms",
        )
        .and_then(|mut st| {
            st.execute(params![key.session_id, key.task_id, record, expires, message_key, message_until])
        })
        .map_err(unavailable)?;
    }
    crate::outliving(task, expires).map(note).transpose()?;
    Ok(Claimed::Answer(TaskClaim::Claimed))
}

/// A task's record, a lapsed lease failed first.
fn read_task(conn: &Connection, cfg: &StoreConfig, key: &TaskKey, now: i64) -> Result<Option<SharedTask>, StoreError> {
    let Some(task) = load_task(conn, key, now)? else { return Ok(None) };
    if task.status == SharedTaskStatus::Running && task.lease_until_ms <= now {
        let failed = task.lease_expired();
        put_task(conn, key, &failed, now.saturating_add(ms(cfg.result_ttl)))?;
        return Ok(Some(failed));
    }
    Ok(Some(task))
}

fn cancel_task(
    conn: &Connection,
    cfg: &StoreConfig,
    key: &TaskKey,
    now: i64,
) -> Result<Option<SharedTask>, StoreError> {
    let Some(task) = load_task(conn, key, now)? else { return Ok(None) };
    if task.status != SharedTaskStatus::Running || task.lease_until_ms <= now {
        return Ok(None);
    }
    let cancelled = task.cancelled();
    put_task(conn, key, &cancelled, now.saturating_add(ms(cfg.result_ttl)))?;
    Ok(Some(cancelled))
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn admit(&self, admission: &Admission) -> Result<Admitted, StoreError> {
        let admission = admission.clone();
        self.tx_while_awaited(move |conn, cfg, now| {
            // A claim standing in for the message's dedupe entry: checked first against the dedupe entries, then
            // against the task's record where the claim finds one (`claim_task`); written only if no claim is made.
            let dedupe = match &admission.task {
                Some(TaskStep::Claim { key, dedupe: Some(entry), .. }) => Some((key, entry)),
                _ => None,
            };
            let replay = match (&admission.replay, dedupe) {
                (Some(claim), _) => claim_message(conn, cfg, claim, now)?,
                (None, Some((_, entry))) if dedupe_holds(conn, cfg, entry, now)? => ReplayVerdict::Seen,
                (None, _) => ReplayVerdict::Fresh,
            };
            let replayed = || Ok(Admitted::replay_only(ReplayVerdict::Seen));
            let mut admitted = Admitted::replay_only(replay);
            let Some(id) = admission.session_id.as_deref().filter(|_| replay == ReplayVerdict::Fresh) else {
                return Ok(admitted);
            };
            let (session, usage, renew) = admission_session(conn, id, now, ms(cfg.closed_ttl))?;
            if !matches!(session, SessionLookup::Live(_)) {
                if let Some((key, entry)) = dedupe {
                    if record_holds(conn, key, entry, now)? {
                        return replayed();
                    }
                    claim_dedupe(conn, cfg, entry, now)?;
                }
                admitted.session = Some(session);
                return Ok(admitted);
            }
            admitted.task = match &admission.task {
                Some(TaskStep::Claim { key, task, lease, max_tasks, usage: read, dedupe }) => {
                    admitted.usage = read.then_some(usage);
                    let step = (key, task, *lease, *max_tasks);
                    let claim = match claim_counted(conn, cfg, step, usage, dedupe.as_ref(), now)? {
                        Claimed::Answer(claim) => claim,
                        Claimed::Replayed => return replayed(),
                    };
                    if let (Some(entry), TaskClaim::Taken | TaskClaim::LimitReached) = (dedupe, &claim) {
                        claim_dedupe(conn, cfg, entry, now)?;
                    }
                    Some(TaskAnswer::Claim(claim))
                }
                Some(TaskStep::Read(key)) => Some(TaskAnswer::Read(read_task(conn, cfg, key, now)?)),
                Some(TaskStep::Cancel(key)) => Some(TaskAnswer::Cancel(cancel_task(conn, cfg, key, now)?)),
                _ => None,
            };
            if let Some(until) = renew {
                renew_session(conn, id, until)?;
            }
            admitted.session = Some(session);
            Ok(admitted)
        })
        .await
    }

    async fn create_session(&self, session: &SharedSession) -> Result<bool, StoreError> {
        let record = encode(session)?;
        let (id, ttl) = (session.session_id.clone(), Duration::from_secs(session.ttl_secs));
        self.tx_while_awaited(move |conn, cfg, now| {
            if !matches!(lookup(load_session(conn, &id)?, now, ms(cfg.closed_ttl))?, SessionLookup::Unknown) {
                return Ok(false);
            }
            conn.prepare_cached("INSERT OR REPLACE INTO sessions (id, record, expires_ms) VALUES (?1, ?2, ?3)")
                .and_then(|mut st| st.execute(params![id, record, now.saturating_add(ms(ttl))]))
                .map_err(unavailable)?;
            Ok(true)
        })
        .await
    }

    async fn close_session(&self, session_id: &str) -> Result<(), StoreError> {
        let id = session_id.to_owned();
        self.tx(move |conn, cfg, now| {
            conn.prepare_cached("INSERT OR REPLACE INTO sessions (id, record, expires_ms) VALUES (?1, NULL, ?2)")
                .and_then(|mut st| st.execute(params![id, now.saturating_add(ms(cfg.closed_ttl))]))
                .map_err(unavailable)?;
            Ok(())
        })
        .await
    }

    async fn claim_task(&self, key: &TaskKey, task: &SharedTask, lease: Duration) -> Result<TaskClaim, StoreError> {
        let (key, task) = (key.clone(), task.clone());
        self.tx_while_awaited(move |conn, cfg, now| match claim_task(conn, cfg, (&key, &task, lease), None, now)? {
            Claimed::Answer(claim) => Ok(claim),
            // Without a message to hold, no record holds it.
            Claimed::Replayed => Ok(TaskClaim::Taken),
        })
        .await
    }

    async fn release_task(&self, key: &TaskKey, owner: &str, dedupe: Option<&ReplayClaim>) -> Result<(), StoreError> {
        let (key, owner, dedupe) = (key.clone(), owner.to_owned(), dedupe.cloned());
        self.tx(move |conn, cfg, now| {
            if let Some(entry) = &dedupe {
                claim_dedupe(conn, cfg, entry, now)?;
            }
            if load_task(conn, &key, now)?.is_some_and(|t| t.owner == owner && t.status == SharedTaskStatus::Running) {
                conn.execute(
                    "DELETE FROM task_rows WHERE session_id = ?1 AND task_id = ?2",
                    params![key.session_id, key.task_id],
                )
                .map_err(unavailable)?;
                // Its claim counted against the session's task limit (when it has one): it never ran.
                count_session_tasks(conn, &key.session_id, -1)?;
            }
            Ok(())
        })
        .await
    }

    async fn renew_leases(
        &self,
        owner: &str,
        keys: &[TaskKey],
        lease: Duration,
    ) -> Result<Vec<(TaskKey, SharedTask)>, StoreError> {
        let (owner, keys) = (owner.to_owned(), keys.to_vec());
        self.tx(move |conn, cfg, now| {
            let mut lost = Vec::new();
            for key in &keys {
                match load_task(conn, key, now)? {
                    Some(mut task) if task.owner == owner && task.status == SharedTaskStatus::Running => {
                        task.lease_until_ms = now.saturating_add(ms(lease));
                        put_task(conn, key, &task, now.saturating_add(ms(cfg.result_ttl)))?;
                    }
                    Some(task) => lost.push((key.clone(), task)),
                    None => {}
                }
            }
            Ok(lost)
        })
        .await
    }

    async fn finish_task(&self, key: &TaskKey, task: &SharedTask) -> Result<TaskFinish, StoreError> {
        // Encoded here, on the caller's thread, rather than by the one writer.
        let (key, record, owner, cost) =
            (key.clone(), encode(&crate::without_message_key(task))?, task.owner.clone(), task.cost.sanitized());
        self.tx(move |conn, cfg, now| {
            let recorded = |conn: &Connection| {
                if !cost.is_zero() {
                    add_session_cost(conn, &key.session_id, cost, now)?;
                }
                Ok(TaskFinish::Recorded)
            };
            let expires = now.saturating_add(ms(cfg.result_ttl));
            // The usual case in one statement: the record is this owner's, still running. A record that is not
            // JSON does not match (`json_extract` would fail the statement) and is answered below, as corrupt.
            let ended = conn
                .prepare_cached(
                    "UPDATE task_rows SET record = ?3, expires_ms = ?4 WHERE session_id = ?1 AND task_id = ?2 \
                     AND expires_ms > ?5 AND CASE WHEN json_valid(record) THEN \
                     json_extract(record, '$.status') = 'running' AND json_extract(record, '$.owner') = ?6 END",
                )
                .and_then(|mut st| st.execute(params![key.session_id, key.task_id, record, expires, now, owner]))
                .map_err(unavailable)?;
            if ended == 1 {
                return recorded(conn);
            }
            if let Some(held) = load_task(conn, &key, now)?
                && (held.owner != owner || held.status != SharedTaskStatus::Running)
            {
                return Ok(TaskFinish::Refused(Box::new(held)));
            }
            put_task_record(conn, &key, &record, expires)?;
            recorded(conn)
        })
        .await
    }

    async fn task(&self, key: &TaskKey) -> Result<Option<SharedTask>, StoreError> {
        let key = key.clone();
        self.tx_while_awaited(move |conn, cfg, now| read_task(conn, cfg, &key, now)).await
    }

    async fn ended_sessions(&self, session_ids: &[String]) -> Result<Vec<(String, SessionLookup)>, StoreError> {
        let ids = session_ids.to_vec();
        self.tx_while_awaited(move |conn, cfg, now| {
            let mut ended = Vec::new();
            for id in &ids {
                let how = lookup(load_session(conn, id)?, now, ms(cfg.closed_ttl))?;
                if matches!(how, SessionLookup::Closed | SessionLookup::Expired) {
                    ended.push((id.clone(), how));
                }
            }
            Ok(ended)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{
        Connection, EXPIRED_OF_PRINCIPAL, EXPIRED_SHARES, MIN_BOUND_BYTES, ROOM_CHECK_EVERY, ROOM_CHECK_MOST,
        ROOM_RESULT_BYTES, Room, SCHEMA, SWEEP_DELETES,
    };

    /// Between two reads of the pages in use, the file may grow by as many results as operations run: the eighth
    /// between the drop mark and the bound holds them at [`ROOM_RESULT_BYTES`] each for every bound, and the default
    /// bound holds them at a megabyte each.
    #[test]
    fn the_pages_in_use_are_read_before_the_bound_can_be_reached() {
        let default_bound = crate::StoreConfig::new("x").sqlite_max_bytes;
        for max_bytes in [MIN_BOUND_BYTES, 4 << 20, 64 << 20, 1 << 30, default_bound] {
            let conn = Connection::open_in_memory().unwrap();
            let room = Room::new(&conn, max_bytes).unwrap();
            let page = conn.query_row("PRAGMA page_size", [], |r| r.get::<_, i64>(0)).unwrap().unsigned_abs();
            let eighth = (max_bytes / page - room.drop_above) * page;
            assert!((ROOM_CHECK_EVERY..=ROOM_CHECK_MOST).contains(&room.check_every), "{max_bytes}");
            assert!(room.check_every * ROOM_RESULT_BYTES <= eighth, "{max_bytes}: every {}", room.check_every);
            if max_bytes == default_bound {
                assert_eq!(room.check_every, ROOM_CHECK_MOST);
                assert!(room.check_every << 20 <= eighth, "the default bound holds a megabyte per operation");
            }
        }
    }

    /// Each step of a query plan (`EXPLAIN QUERY PLAN`), with zeros for its parameters.
    fn plan(conn: &Connection, sql: &str) -> Vec<String> {
        let mut plan = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let params = vec![0_i64; plan.parameter_count()];
        plan.query_map(rusqlite::params_from_iter(params), |r| r.get(3)).unwrap().map(Result::unwrap).collect()
    }

    /// Keeping the replay window's counts as entries expire reads what expired, through an index, never every entry
    /// nor every share: a principal's share used to be counted with a `COUNT(*)` over its entries on every signed
    /// message, which one principal holding many entries turned into seconds of the one writer's time.
    #[test]
    fn the_replay_counts_read_only_expired_entries() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        for sql in EXPIRED_SHARES.iter().chain(&EXPIRED_OF_PRINCIPAL) {
            let steps = plan(&conn, sql);
            assert!(!steps.is_empty(), "{sql}: no plan");
            assert!(steps.iter().any(|step| step.starts_with("SEARCH ")), "{sql}: {steps:?}");
            assert!(!steps.iter().any(|step| step.starts_with("SCAN")), "{sql}: {steps:?}");
        }
    }

    /// Each delete of the sweep reads a range of an index, never the whole table: a scan's cost would grow with every
    /// row the file holds, every `SWEEP_EVERY` operations.
    #[test]
    fn the_sweep_reads_only_expired_rows() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        for delete in SWEEP_DELETES {
            let steps = plan(&conn, delete);
            assert!(!steps.is_empty(), "{delete}: no plan");
            for step in &steps {
                assert!(step.starts_with("SEARCH ") && step.contains("_expiry"), "{delete}: {steps:?}");
            }
        }
    }
}
