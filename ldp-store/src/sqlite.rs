//! The embedded SQLite store (`rusqlite`, SQLite compiled in).
//!
//! Durability: the database runs in WAL mode with `synchronous=FULL`, so every transaction that committed is on
//! disk (the WAL is fsynced at each commit) before the call returns, and the runtime answers a peer only after the
//! call returned: an acknowledged session, replay entry or result survives `kill -9` and a power cut. Each operation
//! is one `BEGIN IMMEDIATE` transaction (read-modify-write under the database's write lock), run on tokio's blocking
//! pool so the async workers never wait on the disk. One connection, one writer: several processes may open the
//! file (`busy_timeout` makes them take turns), but replicas on several machines want Redis.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use ldp_session::TaskKey;
use ldp_session::shared::{
    ReplayClaim, ReplayVerdict, SessionLookup, SharedSession, SharedTask, SharedTaskStatus, TaskClaim,
};
use ldp_session::store::{Store, StoreError};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::{OpenError, StoreConfig, corrupt, ms, now_ms};

const BACKEND: &str = "sqlite";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS replay (
    key TEXT PRIMARY KEY NOT NULL,
    principal TEXT NOT NULL,
    expires_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS replay_principal ON replay (principal, expires_ms);
CREATE INDEX IF NOT EXISTS replay_expiry ON replay (expires_ms);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY NOT NULL,
    record TEXT,
    expires_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tasks (
    session_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    record TEXT NOT NULL,
    expires_ms INTEGER NOT NULL,
    PRIMARY KEY (session_id, task_id)
) WITHOUT ROWID;
";

/// Shared state in an SQLite database file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    cfg: Arc<StoreConfig>,
    conn: Arc<Mutex<Connection>>,
    /// Operations so far, for sweeping expired rows every [`SWEEP_EVERY`].
    ops: Arc<AtomicU64>,
}

/// Expired rows are deleted every this many operations.
const SWEEP_EVERY: u64 = 1024;

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable { backend: BACKEND, reason: e.to_string() }
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`, in WAL mode with `synchronous=FULL`.
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
        conn.execute_batch("PRAGMA synchronous=FULL;").map_err(fail)?;
        conn.execute_batch(SCHEMA).map_err(fail)?;
        Ok(Self { cfg: Arc::new(cfg), conn: Arc::new(Mutex::new(conn)), ops: Arc::new(AtomicU64::new(0)) })
    }

    /// Runs `op` in one immediate transaction on the blocking pool.
    async fn tx<T: Send + 'static>(
        &self,
        op: impl FnOnce(&rusqlite::Transaction<'_>, &StoreConfig, i64) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.conn.clone();
        let cfg = self.cfg.clone();
        let sweep_due = self.ops.fetch_add(1, Ordering::Relaxed).is_multiple_of(SWEEP_EVERY);
        tokio::task::spawn_blocking(move || {
            let mut conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
            let now = now_ms();
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(unavailable)?;
            if sweep_due {
                sweep(&tx, now, ms(cfg.closed_ttl))?;
            }
            let out = op(&tx, &cfg, now)?;
            tx.commit().map_err(unavailable)?;
            Ok(out)
        })
        .await
        .map_err(unavailable)?
    }
}

/// Deletes expired rows (lookups ignore them already; this returns their space). An expired session stays as a
/// marker for `marker` ms after its expiry.
fn sweep(tx: &rusqlite::Transaction<'_>, now: i64, marker: i64) -> Result<(), StoreError> {
    for table in ["replay", "tasks"] {
        tx.execute(&format!("DELETE FROM {table} WHERE expires_ms <= ?1"), params![now]).map_err(unavailable)?;
    }
    tx.execute(
        "DELETE FROM sessions WHERE (record IS NULL AND expires_ms <= ?1) OR (record IS NOT NULL AND expires_ms <= ?2)",
        params![now, now.saturating_sub(marker)],
    )
    .map_err(unavailable)?;
    Ok(())
}

/// A session's row: its record (`None` once closed) and expiry.
fn load_session(tx: &rusqlite::Transaction<'_>, id: &str) -> Result<Option<(Option<String>, i64)>, StoreError> {
    tx.query_row("SELECT record, expires_ms FROM sessions WHERE id = ?1", params![id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .map_err(unavailable)
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

fn load_task(tx: &rusqlite::Transaction<'_>, key: &TaskKey, now: i64) -> Result<Option<SharedTask>, StoreError> {
    let text: Option<String> = tx
        .query_row(
            "SELECT record FROM tasks WHERE session_id = ?1 AND task_id = ?2 AND expires_ms > ?3",
            params![key.session_id, key.task_id, now],
            |r| r.get(0),
        )
        .optional()
        .map_err(unavailable)?;
    text.as_deref().map(decode).transpose()
}

fn put_task(tx: &rusqlite::Transaction<'_>, key: &TaskKey, task: &SharedTask, expires: i64) -> Result<(), StoreError> {
    tx.execute(
        "INSERT OR REPLACE INTO tasks (session_id, task_id, record, expires_ms) VALUES (?1, ?2, ?3, ?4)",
        params![key.session_id, key.task_id, encode(task)?, expires],
    )
    .map_err(unavailable)?;
    Ok(())
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn claim_message(&self, claim: &ReplayClaim) -> Result<ReplayVerdict, StoreError> {
        let claim = claim.clone();
        self.tx(move |tx, _, now| {
            let seen: Option<i64> = tx
                .query_row("SELECT expires_ms FROM replay WHERE key = ?1", params![claim.key], |r| r.get(0))
                .optional()
                .map_err(unavailable)?;
            if seen.is_some_and(|expires| expires > now) {
                return Ok(ReplayVerdict::Seen);
            }
            if let Some(max) = claim.max_per_principal {
                let held: i64 = tx
                    .query_row(
                        "SELECT COUNT(*) FROM replay WHERE principal = ?1 AND expires_ms > ?2",
                        params![claim.principal, now],
                        |r| r.get(0),
                    )
                    .map_err(unavailable)?;
                if usize::try_from(held).unwrap_or(usize::MAX) >= max {
                    return Ok(ReplayVerdict::Full);
                }
            }
            tx.execute(
                "INSERT OR REPLACE INTO replay (key, principal, expires_ms) VALUES (?1, ?2, ?3)",
                params![claim.key, claim.principal, claim.expires_at_ms],
            )
            .map_err(unavailable)?;
            Ok(ReplayVerdict::Fresh)
        })
        .await
    }

    async fn create_session(&self, session: &SharedSession) -> Result<bool, StoreError> {
        let record = encode(session)?;
        let (id, ttl) = (session.session_id.clone(), Duration::from_secs(session.ttl_secs));
        self.tx(move |tx, cfg, now| {
            if !matches!(lookup(load_session(tx, &id)?, now, ms(cfg.closed_ttl))?, SessionLookup::Unknown) {
                return Ok(false);
            }
            tx.execute(
                "INSERT OR REPLACE INTO sessions (id, record, expires_ms) VALUES (?1, ?2, ?3)",
                params![id, record, now.saturating_add(ms(ttl))],
            )
            .map_err(unavailable)?;
            Ok(true)
        })
        .await
    }

    async fn touch_session(&self, session_id: &str) -> Result<SessionLookup, StoreError> {
        let id = session_id.to_owned();
        self.tx(move |tx, cfg, now| {
            let found = lookup(load_session(tx, &id)?, now, ms(cfg.closed_ttl))?;
            if let SessionLookup::Live(session) = &found {
                let expires = now.saturating_add(ms(Duration::from_secs(session.ttl_secs)));
                tx.execute("UPDATE sessions SET expires_ms = ?2 WHERE id = ?1", params![id, expires])
                    .map_err(unavailable)?;
            }
            Ok(found)
        })
        .await
    }

    async fn close_session(&self, session_id: &str) -> Result<(), StoreError> {
        let id = session_id.to_owned();
        self.tx(move |tx, cfg, now| {
            tx.execute(
                "INSERT OR REPLACE INTO sessions (id, record, expires_ms) VALUES (?1, NULL, ?2)",
                params![id, now.saturating_add(ms(cfg.closed_ttl))],
            )
            .map_err(unavailable)?;
            Ok(())
        })
        .await
    }

    async fn claim_task(&self, key: &TaskKey, task: &SharedTask, lease: Duration) -> Result<TaskClaim, StoreError> {
        let (key, mut task) = (key.clone(), task.clone());
        self.tx(move |tx, cfg, now| {
            if let Some(held) = load_task(tx, &key, now)?
                && !held.claimable(held.lease_until_ms > now)
            {
                return Ok(TaskClaim::Taken);
            }
            task.lease_until_ms = now.saturating_add(ms(lease));
            put_task(tx, &key, &task, now.saturating_add(ms(cfg.result_ttl)))?;
            Ok(TaskClaim::Claimed)
        })
        .await
    }

    async fn renew_leases(&self, owner: &str, keys: &[TaskKey], lease: Duration) -> Result<(), StoreError> {
        let (owner, keys) = (owner.to_owned(), keys.to_vec());
        self.tx(move |tx, cfg, now| {
            for key in &keys {
                if let Some(mut task) = load_task(tx, key, now)?
                    && task.owner == owner
                    && task.status == SharedTaskStatus::Running
                {
                    task.lease_until_ms = now.saturating_add(ms(lease));
                    put_task(tx, key, &task, now.saturating_add(ms(cfg.result_ttl)))?;
                }
            }
            Ok(())
        })
        .await
    }

    async fn finish_task(&self, key: &TaskKey, task: &SharedTask) -> Result<(), StoreError> {
        let (key, task) = (key.clone(), task.clone());
        self.tx(move |tx, cfg, now| {
            if load_task(tx, &key, now)?.is_some_and(|held| held.owner != task.owner) {
                return Ok(());
            }
            put_task(tx, &key, &task, now.saturating_add(ms(cfg.result_ttl)))
        })
        .await
    }

    async fn task(&self, key: &TaskKey) -> Result<Option<SharedTask>, StoreError> {
        let key = key.clone();
        self.tx(move |tx, cfg, now| {
            let Some(task) = load_task(tx, &key, now)? else { return Ok(None) };
            if task.status == SharedTaskStatus::Running && task.lease_until_ms <= now {
                let failed = task.lease_expired();
                put_task(tx, &key, &failed, now.saturating_add(ms(cfg.result_ttl)))?;
                return Ok(Some(failed));
            }
            Ok(Some(task))
        })
        .await
    }
}
