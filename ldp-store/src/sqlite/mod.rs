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
//! writer checkpoints too once the WAL passes [`StoreConfig::sqlite_wal_pages`] (see [`WalBound`]): a checkpoint on
//! another connection never completes while the writer keeps committing, and only a complete one lets the WAL start
//! over.
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
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use async_trait::async_trait;
use ldp_session::TaskKey;
use ldp_session::shared::rules::{self, Keeping};
use ldp_session::shared::{
    Admission, Admitted, ReplayClaim, SessionLookup, SharedSession, SharedTask, TaskClaim, TaskFinish,
};
use ldp_session::store::{LostTasks, OUTAGE_LINE_EVERY, OutageLog, Store, StoreError};
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::{Durability, OpenError, StoreConfig, ms, now_ms};

mod records;
mod room;

use records::*;
use room::*;

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
    /// The writer thread's queue (the thread ends at [`Store::close`], or when the last clone of the store is
    /// dropped).
    writer: Arc<mpsc::SyncSender<Queued>>,
    /// Ends the checkpoint thread (after a last checkpoint) when sent to, or dropped with the last clone.
    checkpointer: Arc<mpsc::Sender<()>>,
    /// The writer and checkpoint threads, until [`Store::close`] joins them.
    threads: Arc<Mutex<Option<[std::thread::JoinHandle<()>; 2]>>>,
}

/// What the writer thread's queue carries.
enum Queued {
    /// An operation for the next batch.
    Op(Box<dyn Op>),
    /// Close the connection once the operations queued before are committed ([`Store::close`]).
    Close,
}

/// How long a connection waits for another process's write lock (or checkpoint) before it answers busy.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

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
/// then answers them all; until [`Queued::Close`] (after the operations queued before it) or the last sender goes.
///
/// Operations run without savepoints: each would cost two statements and a copy of every page the operation first
/// touches (the statement journal), for a failure that almost never comes (an I/O error, a corrupt record). When one
/// does fail, the whole transaction is rolled back and the batch runs again with a savepoint per operation, so that
/// only the failed one is undone; operations are `Fn` and read what they decide from the database, which the
/// rollback has put back as it was, and `now` is the same, so the second run decides as the first did.
fn write_loop(conn: Connection, cfg: StoreConfig, room: Room, wal: WalBound, queue: mpsc::Receiver<Queued>) {
    let mut ops: u64 = 0;
    let sweeps = OutageLog::new("the SQLite sweep", OUTAGE_LINE_EVERY);
    let early_drops = OutageLog::new("keeping every result for its TTL", OUTAGE_LINE_EVERY);
    // While the file is near its bound (or after a batch failed), every batch checks; otherwise every
    // `room.check_every` operations.
    let pressed = std::cell::Cell::new(false);
    let mut closing = false;
    while !closing && let Ok(first) = queue.recv() {
        let mut batch = Vec::new();
        let mut next = Ok(first);
        while let Ok(queued) = next {
            match queued {
                Queued::Op(op) => batch.push(op),
                Queued::Close => {
                    closing = true;
                    break;
                }
            }
            if batch.len() == MAX_BATCH {
                break;
            }
            next = queue.try_recv();
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
        // After the answers: the batch's callers do not wait for the checkpoint, the next batch's do.
        wal.restart_if_full(&conn);
    }
}

/// Keeps the WAL within [`StoreConfig::sqlite_wal_pages`]: the writer's commits count its frames, and the first
/// commit past the limit is followed by a `RESTART` checkpoint on the writer's connection, after which the next
/// commit writes the WAL from its beginning (and truncates it to the limit, `journal_size_limit`).
///
/// The checkpoint thread and the writer take turns through `turn`: SQLite answers a checkpoint `SQLITE_BUSY` at once,
/// without its busy handler, while another connection checkpoints, and under a slow disk the thread's checkpoints
/// (an fsync each) left the writer almost no moment to run its own: the WAL grew to 15 MB past a 1 MiB limit.
struct WalBound {
    /// The WAL's frames after the writer's last commit (SQLite's WAL hook).
    frames: Arc<AtomicU32>,
    /// The frames past which the writer checkpoints (`sqlite_wal_pages`).
    limit: u32,
    /// The frames past which it next tries: the limit, or twice the WAL's frames after a checkpoint that another
    /// process kept from completing, so that a long reader elsewhere stalls the writer a few times, not once per
    /// limit's worth of commits.
    next_try: std::cell::Cell<u32>,
    /// Held by whichever connection of this process is checkpointing.
    turn: Arc<Mutex<()>>,
    /// Restart checkpoints that could not complete (another process reading an old snapshot, or its checkpoint).
    outage: OutageLog,
}

/// How long the writer retries a `RESTART` checkpoint that another process keeps busy before it gives up until the
/// WAL has doubled.
const RESTART_PATIENCE: Duration = Duration::from_millis(200);

impl WalBound {
    /// Counts `conn`'s commits' frames from now on, and checkpoints past `limit` pages.
    fn install(conn: &mut Connection, limit: u32, turn: Arc<Mutex<()>>) -> rusqlite::Result<Self> {
        let frames = Arc::new(AtomicU32::new(0));
        let counted = frames.clone();
        // Replaces SQLite's own autocheckpoint, a `PASSIVE` one that gives up whenever the thread is checkpointing.
        conn.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages: std::ffi::c_int| {
            counted.store(u32::try_from(pages).unwrap_or(0), Ordering::Relaxed);
            Ok(())
        }))?;
        let outage = OutageLog::new("the SQLite WAL's restart", OUTAGE_LINE_EVERY);
        let limit = limit.max(1);
        Ok(Self { frames, limit, next_try: std::cell::Cell::new(limit), turn, outage })
    }

    /// Checkpoints the whole WAL if the last commit left it past the limit, so that the next commit starts it over.
    fn restart_if_full(&self, conn: &Connection) {
        let frames = self.frames.load(Ordering::Relaxed);
        if frames <= self.next_try.get() {
            return;
        }
        let deadline = std::time::Instant::now() + RESTART_PATIENCE;
        // Another process's readers of an old snapshot hold the checkpoint up through the busy handler: for no
        // longer than the retries do, not the 5 s a write lock is waited for.
        let _ = conn.busy_timeout(RESTART_PATIENCE);
        self.restart_until(conn, deadline);
        let _ = conn.busy_timeout(BUSY_TIMEOUT);
    }

    fn back_off(&self) {
        self.next_try.set(self.frames.load(Ordering::Relaxed).max(self.limit).saturating_mul(2));
    }

    fn restart_until(&self, conn: &Connection, deadline: std::time::Instant) {
        loop {
            let done = {
                let _turn = self.turn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                // The row is (busy, frames in the WAL, frames checkpointed); busy means it stopped short.
                conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| r.get::<_, i64>(0))
            };
            match done {
                Ok(0) => {
                    self.frames.store(0, Ordering::Relaxed);
                    self.next_try.set(self.limit);
                    self.outage.succeeded();
                    return;
                }
                Ok(_) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                Ok(_) => {
                    self.back_off();
                    return self.outage.failed(
                        &"another connection kept the checkpoint busy",
                        "the SQLite WAL grows past --sqlite-wal-pages until a checkpoint completes",
                    );
                }
                Err(e) => {
                    self.back_off();
                    return self.outage.failed(&e, "could not checkpoint the SQLite WAL");
                }
            }
        }
    }
}

/// Checkpoints the WAL every [`CHECKPOINT_EVERY`] until the store is dropped, then once more. `PASSIVE`: it copies
/// what it can without waiting for, or blocking, the writer; the writer starts the WAL over from its beginning once a
/// checkpoint has copied all of it.
fn checkpoint_loop(conn: &Connection, turn: &Mutex<()>, stop: &mpsc::Receiver<()>) {
    // A full disk fails every checkpoint, 20 a second: logged as one outage, not a line each.
    let outage = OutageLog::new("the SQLite checkpoint", OUTAGE_LINE_EVERY);
    let checkpoint = || {
        let _turn = turn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            Ok(()) => outage.succeeded(),
            Err(e) => outage.failed(&e, "could not checkpoint the SQLite WAL"),
        }
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
        let mut conn = Connection::open(path).map_err(fail)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(fail)?;
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
        conn.execute_batch(&format!("PRAGMA journal_size_limit={};", u64::from(pages) * 4096)).map_err(fail)?;
        let turn = Arc::new(Mutex::new(()));
        let wal = WalBound::install(&mut conn, pages, turn.clone()).map_err(fail)?;
        let room = Room::new(&conn, cfg.sqlite_max_bytes).map_err(fail)?;
        let checkpoints = Connection::open(path).map_err(fail)?;
        checkpoints.busy_timeout(BUSY_TIMEOUT).map_err(fail)?;
        let spawn_error =
            |e: std::io::Error| OpenError::Sqlite { path: path.display().to_string(), reason: e.to_string() };
        let (checkpointer, stop) = mpsc::channel::<()>();
        let checkpointing = std::thread::Builder::new()
            .name("ldp-sqlite-checkpoint".into())
            .spawn(move || checkpoint_loop(&checkpoints, &turn, &stop))
            .map_err(spawn_error)?;
        let (writer, queue) = mpsc::sync_channel::<Queued>(MAX_QUEUED);
        let writing = std::thread::Builder::new()
            .name("ldp-sqlite-writer".into())
            .spawn(move || write_loop(conn, cfg, room, wal, queue))
            .map_err(spawn_error)?;
        Ok(Self {
            writer: Arc::new(writer),
            checkpointer: Arc::new(checkpointer),
            threads: Arc::new(Mutex::new(Some([writing, checkpointing]))),
        })
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

    /// [`SqliteStore::tx_while_awaited`] of an operation of the store's rules, run on the transaction's records.
    async fn rules_while_awaited<T: Send + 'static>(
        &self,
        op: impl Fn(&mut Records<'_>, i64, Keeping) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.tx_while_awaited(move |conn, cfg, now| {
            op(&mut Records { conn, cfg, now, end_text: None }, now, keeping(cfg))
        })
        .await
    }

    async fn queue<T: Send + 'static>(
        &self,
        op: impl Fn(&Connection, &StoreConfig, i64) -> Result<T, StoreError> + Send + 'static,
        only_while_awaited: bool,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        let pending: Box<dyn Op> = Box::new(Pending { op: Box::new(op), out: None, reply, only_while_awaited });
        self.writer.try_send(Queued::Op(pending)).map_err(|e| match e {
            mpsc::TrySendError::Full(_) => {
                unavailable(format!("{MAX_QUEUED} operations are already waiting for the SQLite writer"))
            }
            mpsc::TrySendError::Disconnected(_) => unavailable("the store is closed"),
        })?;
        answer.await.map_err(|_| unavailable("the writer thread has stopped"))?
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    /// Commits what was queued before, closes both connections (the last close checkpoints the WAL and removes it
    /// and the shared-memory file) and joins both threads: the database is one settled file when this returns.
    async fn close(&self) -> Result<(), StoreError> {
        let threads = self.threads.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        let Some([writing, checkpointing]) = threads else { return Ok(()) };
        let (writer, checkpointer) = ((*self.writer).clone(), Arc::clone(&self.checkpointer));
        // Blocking: the queue may be full, and joining waits for the last commit and checkpoint.
        let joined = tokio::task::spawn_blocking(move || {
            // A writer that has stopped already has nothing left to commit.
            let _ = writer.send(Queued::Close);
            let wrote = writing.join();
            let _ = checkpointer.send(());
            let checkpointed = checkpointing.join();
            wrote.and(checkpointed).is_ok()
        })
        .await;
        match joined {
            Ok(true) => Ok(()),
            _ => Err(unavailable("a thread of the store panicked while closing")),
        }
    }

    async fn admit(&self, admission: &Admission) -> Result<Admitted, StoreError> {
        let admission = admission.clone();
        self.rules_while_awaited(move |records, now, keeping| rules::admit(records, &admission, now, keeping)).await
    }

    async fn create_session(&self, session: &SharedSession) -> Result<bool, StoreError> {
        let session = session.clone();
        self.rules_while_awaited(move |records, now, keeping| rules::create_session(records, &session, now, keeping))
            .await
    }

    async fn close_session(&self, session_id: &str) -> Result<(), StoreError> {
        let id = session_id.to_owned();
        self.tx(move |conn, cfg, now| {
            rules::close_session(&mut Records { conn, cfg, now, end_text: None }, &id, now, keeping(cfg))
        })
        .await
    }

    async fn claim_task(&self, key: &TaskKey, task: &SharedTask, lease: Duration) -> Result<TaskClaim, StoreError> {
        let (key, task) = (key.clone(), task.clone());
        self.rules_while_awaited(move |records, now, keeping| rules::claim(records, &key, &task, lease, now, keeping))
            .await
    }

    async fn release_task(&self, key: &TaskKey, owner: &str, dedupe: Option<&ReplayClaim>) -> Result<(), StoreError> {
        let (key, owner, dedupe) = (key.clone(), owner.to_owned(), dedupe.cloned());
        self.tx(move |conn, cfg, now| {
            rules::release(&mut Records { conn, cfg, now, end_text: None }, &key, &owner, dedupe.as_ref())
        })
        .await
    }

    async fn renew_leases(&self, owner: &str, keys: &[TaskKey], lease: Duration) -> Result<LostTasks, StoreError> {
        let (owner, keys) = (owner.to_owned(), keys.to_vec());
        self.tx(move |conn, cfg, now| {
            rules::renew(&mut Records { conn, cfg, now, end_text: None }, &owner, &keys, lease, now, keeping(cfg))
        })
        .await
    }

    async fn finish_task(&self, key: &TaskKey, task: &SharedTask) -> Result<TaskFinish, StoreError> {
        // Encoded here, on the caller's thread, rather than by the one writer.
        let (key, task, text) = (key.clone(), task.clone(), encode(&crate::without_message_key(task))?);
        self.tx(move |conn, cfg, now| {
            let mut records = Records { conn, cfg, now, end_text: Some(&text) };
            rules::finish(&mut records, &key, &task, now, keeping(cfg))
        })
        .await
    }

    async fn task(&self, key: &TaskKey) -> Result<Option<SharedTask>, StoreError> {
        let key = key.clone();
        self.rules_while_awaited(move |records, now, keeping| rules::read(records, &key, now, keeping)).await
    }

    async fn ended_sessions(&self, session_ids: &[String]) -> Result<Vec<(String, SessionLookup)>, StoreError> {
        let ids = session_ids.to_vec();
        self.rules_while_awaited(move |records, now, keeping| rules::ended_sessions(records, &ids, now, keeping)).await
    }
}

/// What the store keeps, and for how long, as the store's rules take it.
fn keeping(cfg: &StoreConfig) -> Keeping {
    Keeping::new(cfg.closed_ttl, cfg.result_ttl)
}

#[cfg(test)]
mod tests;
