//! Stores for the state replicas of one LDP delegate share (issue 17): sessions with their TTL, the replay window,
//! tasks with their leases and results. Each backend implements [`ldp_session::store::Store`], the interface the
//! runtime ([`ldp_session::runtime::DelegateRuntime::attach_store`]) drives; the rules stay in the session machine,
//! which hands the runtime the records (`ldp_session::shared`).
//!
//! | backend | for | durability |
//! | --- | --- | --- |
//! | [`MemoryStore`] | replicas in one process (tests), or a single process that needs the runtime's store path | none: gone with the process |
//! | [`SqliteStore`] (feature `sqlite`) | one replica that must survive restarts and `kill -9` | WAL journal, group commit; [`Durability::Process`] (default, `synchronous=NORMAL`): a call that returned survives the process dying; [`Durability::Full`] (`synchronous=FULL`): also a power cut |
//! | [`RedisStore`] (feature `redis`) | N replicas behind a load balancer | Redis's own (RDB/AOF as the operator configures it) |
//!
//! `ldp serve --store memory|sqlite:PATH|redis://HOST:PORT[/DB]` picks one ([`StoreSpec`]); `memory` there means no
//! store at all: the machine's own tables, today's behaviour and speed.
#![warn(missing_docs)]
#![forbid(unsafe_code)]
#![warn(clippy::exhaustive_enums)]

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ldp_session::store::{Store, StoreError};

mod memory;
#[cfg(feature = "redis")]
mod redis_store;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(feature = "test-redis")]
pub mod test_redis;

pub use memory::MemoryStore;
#[cfg(feature = "redis")]
pub use redis_store::RedisStore;
#[cfg(feature = "sqlite")]
pub use sqlite::{MAX_BATCH, SqliteStore};

/// What every backend keeps, besides the records themselves.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreConfig {
    /// The delegate whose state this is: Redis keys start with it, so delegates can share one Redis.
    pub namespace: String,
    /// How long an ended task's record (its result, for status queries) is kept.
    pub result_ttl: Duration,
    /// How long a closed or expired session's marker is kept (late messages are told `SESSION_CLOSED` or
    /// `SESSION_EXPIRED` by every replica).
    pub closed_ttl: Duration,
    /// How durable an SQLite commit is before its caller (and so the peer) is answered.
    pub sqlite_durability: Durability,
    /// SQLite: the WAL pages (4 KiB each) beyond which the writer checkpoints after a commit, so that the WAL starts
    /// over from its beginning; the WAL file is truncated back to this size when it does. A thread of its own copies
    /// the WAL into the database file all along, so the writer's checkpoint has little left to copy.
    pub sqlite_wal_pages: u32,
    /// SQLite: how long a generation of unsigned traffic's dedupe entries takes new ones at least before the other
    /// generation, once all its entries have expired, is emptied in one statement and takes over. Entries are never
    /// deleted one by one (each would rewrite a random page); the tables hold between one and two dedupe windows of
    /// entries plus this.
    pub sqlite_dedupe_generation: Duration,
    /// SQLite: how much of the database file the writer reads through a memory map (`PRAGMA mmap_size`; 1 GiB), with
    /// a 2 MiB page cache beside it; `0` reads with `pread` and keeps a 64 MiB page cache instead. Writes go through
    /// the WAL either way, so durability is the same. Pages read through the map count in the process's resident
    /// memory (they are the file's, shared with the OS page cache); an I/O error on a mapped page is a `SIGBUS`
    /// rather than an error, so turn it off on storage that reports read errors (a network file system).
    pub sqlite_mmap_bytes: u64,
}

/// How durable an SQLite commit is before its caller is answered (the WAL journal either way, one commit per batch
/// of concurrent operations: see [`SqliteStore`]'s module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// `synchronous=NORMAL`: committed to the WAL file (`write()`) before the answer, fsynced at checkpoints. An
    /// acknowledged operation survives the process dying at any point (`kill -9`, a panic, OOM); an OS crash or a
    /// power cut may lose the last commits (never corrupting the database).
    #[default]
    Process,
    /// `synchronous=FULL`: the WAL fsynced at every commit (one fsync per batch) before the answer; an acknowledged
    /// operation also survives an OS crash or a power cut.
    Full,
}

impl std::str::FromStr for Durability {
    type Err = UnknownDurability;

    /// `process` (or `normal`, SQLite's name) or `full`.
    fn from_str(s: &str) -> Result<Self, UnknownDurability> {
        match s {
            "process" | "normal" => Ok(Self::Process),
            "full" => Ok(Self::Full),
            _ => Err(UnknownDurability(s.to_owned())),
        }
    }
}

/// A durability name that is neither `process` (`normal`) nor `full` (`--sqlite-durability`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a durability: expected process or full")]
pub struct UnknownDurability(pub String);

impl StoreConfig {
    /// A configuration for `namespace` (the delegate id), keeping results and closed markers for an hour, SQLite
    /// with [`Durability::Process`].
    pub fn new(namespace: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            result_ttl: Duration::from_secs(3600),
            closed_ttl: Duration::from_secs(3600),
            sqlite_durability: Durability::default(),
            sqlite_wal_pages: 32_768,
            sqlite_dedupe_generation: Duration::from_secs(30),
            sqlite_mmap_bytes: 1 << 30,
        }
    }
}

/// Which store `ldp serve --store` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreSpec {
    /// No shared store: the machine's own tables.
    Memory,
    /// An SQLite database file (created if absent).
    Sqlite(std::path::PathBuf),
    /// A Redis server: `redis://HOST:PORT[/DB]`.
    Redis(String),
}

impl std::str::FromStr for StoreSpec {
    type Err = OpenError;

    /// `memory`, `sqlite:PATH`, `redis://HOST:PORT[/DB]`, or a bare path (SQLite, the default when a path is given).
    fn from_str(s: &str) -> Result<Self, OpenError> {
        if s == "memory" {
            return Ok(Self::Memory);
        }
        if s.starts_with("redis://") {
            return Ok(Self::Redis(s.to_owned()));
        }
        let path = s.strip_prefix("sqlite:").unwrap_or(s);
        if path.is_empty() || s.contains("://") {
            return Err(OpenError::Spec(s.to_owned()));
        }
        Ok(Self::Sqlite(path.into()))
    }
}

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The `--store` value is none of the accepted forms.
    #[error("{0:?} is not a store: expected memory, sqlite:PATH or redis://HOST:PORT[/DB]")]
    Spec(String),
    /// The backend was not compiled in.
    #[error("the {0} backend is not compiled in (feature `{0}` of ldp-store)")]
    NotCompiled(&'static str),
    /// The SQLite database could not be opened or prepared.
    #[error("SQLite database {path}: {reason}")]
    Sqlite {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The Redis URL is invalid.
    #[error("Redis {url}: {reason}")]
    Redis {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
}

/// Opens the store `spec` names; `None` for [`StoreSpec::Memory`] (no shared store: the machine's own tables).
pub async fn open(spec: &StoreSpec, cfg: StoreConfig) -> Result<Option<Arc<dyn Store>>, OpenError> {
    match spec {
        StoreSpec::Memory => Ok(None),
        #[cfg(feature = "sqlite")]
        StoreSpec::Sqlite(path) => Ok(Some(Arc::new(SqliteStore::open(path, cfg)?))),
        #[cfg(not(feature = "sqlite"))]
        StoreSpec::Sqlite(_) => Err(OpenError::NotCompiled("sqlite")),
        #[cfg(feature = "redis")]
        StoreSpec::Redis(url) => Ok(Some(Arc::new(RedisStore::open(url, cfg).await?))),
        #[cfg(not(feature = "redis"))]
        StoreSpec::Redis(_) => Err(OpenError::NotCompiled("redis")),
    }
}

/// Milliseconds since the Unix epoch on this machine's clock (the expiries of the memory and SQLite backends).
pub(crate) fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A duration in milliseconds, saturating.
pub(crate) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A record that does not decode.
pub(crate) fn corrupt(backend: &'static str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt { backend, reason: e.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_specs_parse() {
        assert_eq!("memory".parse::<StoreSpec>().unwrap(), StoreSpec::Memory);
        assert_eq!("sqlite:/tmp/a.db".parse::<StoreSpec>().unwrap(), StoreSpec::Sqlite("/tmp/a.db".into()));
        // A bare path is SQLite, the default when a path is given.
        assert_eq!("state.db".parse::<StoreSpec>().unwrap(), StoreSpec::Sqlite("state.db".into()));
        assert_eq!(
            "redis://127.0.0.1:6379/2".parse::<StoreSpec>().unwrap(),
            StoreSpec::Redis("redis://127.0.0.1:6379/2".into())
        );
        for bad in ["", "sqlite:", "postgres://db/x", "http://x"] {
            assert!(bad.parse::<StoreSpec>().is_err(), "{bad:?}");
        }
    }
}
