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
//! Results are kept for [`StoreConfig::result_ttl`], so what a store holds grows with the task rate; each is bounded.
//! [`MemoryStore`] and [`SqliteStore`] drop the oldest ended tasks' records early past seven eighths of their bound
//! ([`StoreConfig::memory_max_bytes`], [`StoreConfig::sqlite_max_bytes`]); with nothing left to drop, the memory
//! store refuses new claims and the SQLite file any write, retryably. A Redis is bounded by its `maxmemory` (under
//! `noeviction`): [`RedisStore`] reads each primary's memory at most once a second after writes, and past seven
//! eighths, or when Redis refused a write for memory, drops the oldest ended tasks' records there, sampled with
//! `SCAN` ([`RedisStore::make_room`]); full of what may not be dropped, Redis refuses writes, retryably.
//!
//! `ldp serve --store memory|sqlite:PATH|redis://HOST:PORT[/DB]` picks one ([`StoreSpec`]); `memory` there means no
//! store at all: the machine's own tables, today's behaviour and speed. Redis may also be `rediss://` (TLS, with
//! [`StoreConfig::redis_tls`] for a private CA or a client certificate) or `redis+unix:///PATH`, and any of them may
//! carry a user and password, or be a Redis Cluster, `redis+cluster://HOST:PORT[,HOST:PORT...]`, or the primary that
//! Redis Sentinels name, `redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB]` (followed across failovers;
//! `rediss+sentinel://` over TLS); no
//! error or `Debug` output of this crate shows a password ([`redacted`]).
//!
//! A store is driven by the runtime, but its operations can be called directly; here a TASK_SUBMIT's id is claimed
//! once, and a second claim (a resend to another replica) is refused:
//!
//! ```
//! use std::time::Duration;
//! use ldp_session::TaskKey;
//! use ldp_session::shared::{SharedTask, TaskClaim};
//! use ldp_session::store::Store;
//! use ldp_store::{MemoryStore, StoreConfig};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = MemoryStore::new(StoreConfig::new("ldp:delegate:echo"));
//! let key = TaskKey { session_id: "s-1".into(), task_id: "t-1".into() };
//! let on_a = SharedTask::running("replica-a", ldp_types::PayloadMode::Text);
//! let on_b = SharedTask::running("replica-b", ldp_types::PayloadMode::Text);
//! assert_eq!(store.claim_task(&key, &on_a, Duration::from_secs(30)).await?, TaskClaim::Claimed);
//! assert_eq!(store.claim_task(&key, &on_b, Duration::from_secs(30)).await?, TaskClaim::Taken);
//! # Ok::<(), ldp_session::store::StoreError>(()) }).unwrap();
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]
#![warn(clippy::exhaustive_enums)]

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ldp_session::store::Store;

mod memory;
#[cfg(feature = "redis")]
mod redis_store;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(feature = "test-redis")]
pub mod test_redis;

pub use memory::MemoryStore;
#[cfg(feature = "redis")]
pub use redis_store::{RedisStore, RoomPass};
#[cfg(feature = "sqlite")]
pub use sqlite::{MAX_BATCH, MAX_QUEUED, SqliteStore};

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
    /// SQLite: the most bytes the database file may hold (4 GiB; at least 1 MiB). Past seven eighths of it in use, the writer drops
    /// the oldest ended tasks' records before their TTL (down to three quarters; a running task's record is never
    /// dropped, and an unsigned message's dedupe entry kept in a dropped record is written on its own first). At the
    /// bound itself (`PRAGMA max_page_count`) a write is refused, `STORE_UNAVAILABLE` and retryable, as on a full
    /// disk. So a peer that submits tasks as fast as it may shortens how long results are kept, and fills neither
    /// the disk nor the file. The WAL beside the file is bounded on its own ([`StoreConfig::sqlite_wal_pages`]).
    pub sqlite_max_bytes: u64,
    /// [`MemoryStore`]: the most bytes its task records are taken to hold (1 GiB; at least 1 MiB), each counted as
    /// its strings (the result's JSON text above all) and a fixed allowance for the record and the maps around it.
    /// Past seven eighths of it, the oldest ended tasks' records go before their TTL, down to three quarters, as in
    /// an SQLite file at its bound: never a running task's record, and an unsigned message's dedupe entry kept in a
    /// dropped record is written on its own first. With nothing left to drop, a claim is refused,
    /// `STORE_UNAVAILABLE` and retryable; a result is always recorded, so the bound may be passed by the results of
    /// tasks claimed before it was reached, until the next writes drop old records again.
    pub memory_max_bytes: u64,
    /// Redis over TLS (`rediss://`): the CA to trust instead of the system's roots, and a client certificate for
    /// servers that ask for one (`tls-auth-clients yes`). `None` trusts the system's roots and sends no certificate.
    pub redis_tls: Option<RedisTls>,
}

/// What a `rediss://` connection presents and trusts (PEM bytes, as read from files).
#[derive(Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct RedisTls {
    /// The CA certificates the server's chain must lead to; `None`: the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// A client certificate chain and its private key, for mutual TLS.
    pub client_pem: Option<(Vec<u8>, Vec<u8>)>,
}

impl RedisTls {
    /// Trusts `ca_pem` (PEM certificates) instead of the system's roots.
    pub fn with_ca(mut self, ca_pem: Vec<u8>) -> Self {
        self.ca_pem = Some(ca_pem);
        self
    }

    /// Presents this client certificate chain (PEM), proved by `key_pem` (a PEM private key).
    pub fn with_client_cert(mut self, cert_pem: Vec<u8>, key_pem: Vec<u8>) -> Self {
        self.client_pem = Some((cert_pem, key_pem));
        self
    }
}

impl std::fmt::Debug for RedisTls {
    // The private key is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTls")
            .field("ca_pem", &self.ca_pem.as_ref().map(|pem| format!("{} bytes", pem.len())))
            .field("client_cert", &self.client_pem.is_some())
            .finish()
    }
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
            sqlite_max_bytes: 4 << 30,
            memory_max_bytes: 1 << 30,
            redis_tls: None,
        }
    }
}

/// Which store `ldp serve --store` asked for.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreSpec {
    /// No shared store: the machine's own tables.
    Memory,
    /// An SQLite database file (created if absent).
    Sqlite(std::path::PathBuf),
    /// A Redis server: `redis://[USER:PASSWORD@]HOST:PORT[/DB]`, `rediss://...` (TLS) or `redis+unix:///PATH[?db=N]`;
    /// or a Redis Cluster, `redis+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]` (`rediss+cluster://`); or
    /// the primary that Redis Sentinels name, `redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]`
    /// (`rediss+sentinel://`: TLS to the sentinels and to the primary).
    Redis(String),
}

impl std::fmt::Debug for StoreSpec {
    // A Redis URL's password is not printed (clap and loggers print this).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Memory => f.write_str("Memory"),
            Self::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            Self::Redis(url) => f.debug_tuple("Redis").field(&redacted(url)).finish(),
        }
    }
}

/// The URL schemes a Redis store is reached by.
const REDIS_SCHEMES: [&str; 8] = [
    "redis://",
    "rediss://",
    "redis+unix://",
    "unix://",
    "redis+cluster://",
    "rediss+cluster://",
    "redis+sentinel://",
    "rediss+sentinel://",
];

impl std::str::FromStr for StoreSpec {
    type Err = OpenError;

    /// `memory`, `sqlite:PATH`, a Redis URL (`redis://`, `rediss://`, `redis+unix://`), or a bare path (SQLite, the
    /// default when a path is given).
    fn from_str(s: &str) -> Result<Self, OpenError> {
        if s == "memory" {
            return Ok(Self::Memory);
        }
        if REDIS_SCHEMES.iter().any(|scheme| s.starts_with(scheme)) {
            return Ok(Self::Redis(s.to_owned()));
        }
        let path = s.strip_prefix("sqlite:").unwrap_or(s);
        if path.is_empty() || s.contains("://") {
            return Err(OpenError::Spec(redacted(s)));
        }
        if path == s && looks_like_address(s) {
            // Shown without a `USER:PASSWORD@` part (no URL parser reads one without a scheme).
            let shown = s.rsplit_once('@').map_or_else(|| s.to_owned(), |(_, host)| format!("***@{host}"));
            return Err(OpenError::BareAddress(shown));
        }
        Ok(Self::Sqlite(path.into()))
    }
}

/// Whether `s` reads as `HOST:PORT` (or `USER:PASSWORD@HOST:PORT`): no path separator, and a port of digits after the
/// last `:`.
fn looks_like_address(s: &str) -> bool {
    let Some((host, port)) = s.rsplit_once(':') else { return false };
    !host.is_empty()
        && !port.is_empty()
        && port.len() <= 5
        && port.bytes().all(|b| b.is_ascii_digit())
        && !s.contains(['/', '\\'])
}

/// A URL whose authority is a list of hosts taken apart: a Redis Cluster's (`redis+cluster://`, `rediss+cluster://`)
/// or a Redis Sentinel deployment's (`redis+sentinel://`, `rediss+sentinel://`). Such a list (`HOST:PORT,HOST:PORT`)
/// is no URL authority, so no URL parser reads it: this is the one place that does, for connecting, redacting and
/// scrubbing.
pub(crate) struct HostListUrl<'a> {
    /// `redis+cluster`, `rediss+cluster`, `redis+sentinel` or `rediss+sentinel`.
    pub(crate) scheme: &'a str,
    /// What stands before the last `@` of the authority (`USER:PASSWORD`, `:PASSWORD` or `USER`), if anything.
    pub(crate) credentials: Option<&'a str>,
    /// The comma-separated `HOST:PORT` list.
    pub(crate) hosts: &'a str,
    /// Everything after the credentials' `@` (or after `://` without credentials): the hosts and any path or query.
    pub(crate) after_credentials: &'a str,
}

impl<'a> HostListUrl<'a> {
    /// `url` taken apart, or `None` when it is not a cluster or sentinel URL.
    pub(crate) fn parse(url: &'a str) -> Option<Self> {
        let (scheme, rest) = url.split_once("://")?;
        if !scheme.ends_with("+cluster") && !scheme.ends_with("+sentinel") {
            return None;
        }
        let authority = rest.split(['/', '?']).next().unwrap_or_default();
        Some(match authority.rsplit_once('@') {
            Some((credentials, hosts)) => Self {
                scheme,
                credentials: Some(credentials),
                hosts,
                after_credentials: &rest[credentials.len() + 1..],
            },
            None => Self { scheme, credentials: None, hosts: authority, after_credentials: rest },
        })
    }

    /// What follows the hosts: a path and query, or nothing (a sentinel URL's `/SERVICE[/DB]`).
    pub(crate) fn after_hosts(&self) -> &'a str {
        &self.after_credentials[self.hosts.len()..]
    }

    /// The path after the hosts (a sentinel URL's `/SERVICE[/DB]`), empty without one.
    pub(crate) fn path(&self) -> &'a str {
        self.after_hosts().split_once('?').map_or(self.after_hosts(), |(path, _)| path)
    }

    /// The query after the path (`sentinel_password=...`), if there is a `?`.
    pub(crate) fn query(&self) -> Option<&'a str> {
        self.after_hosts().split_once('?').map(|(_, query)| query)
    }

    /// The query's values that may be secret (all but [`HostListUrl::SHOWN`]'s), each as written and as decoded.
    #[cfg(feature = "redis")]
    fn query_secrets(&self) -> Vec<String> {
        let (hidden, query) = (|k: &str| !Self::SHOWN.contains(&k), self.query().unwrap_or_default());
        let raw = query.split('&').filter_map(|pair| pair.split_once('=')).filter(|(k, _)| hidden(k));
        let decoded = url::form_urlencoded::parse(query.as_bytes()).filter(|(k, _)| hidden(k)).map(|(_, v)| v.into());
        raw.map(|(_, v)| v.to_owned()).chain(decoded).collect()
    }

    /// The query parameters whose values are no secret. Every other value is hidden, a mistyped
    /// `sentinel_password` included (the sentinel URL refuses it, and the refusal shows the URL).
    const SHOWN: [&'static str; 1] = ["sentinel_user"];

    /// The scheme of each host's own URL, `redis://` or `rediss://` (TLS), when this is a `redis+KIND://` or
    /// `rediss+KIND://` URL (`kind`: `cluster` or `sentinel`).
    #[cfg(feature = "redis")]
    pub(crate) fn node_scheme(&self, kind: &str) -> Option<&'static str> {
        match self.scheme.split_once('+') {
            Some(("redis", k)) if k == kind => Some("redis://"),
            Some(("rediss", k)) if k == kind => Some("rediss://"),
            _ => None,
        }
    }

    /// The `(user, password)` of the credentials, when they hold a password.
    pub(crate) fn user_and_password(&self) -> Option<(&'a str, &'a str)> {
        self.credentials?.split_once(':')
    }
}

/// `url` with its password, if any, written `***`: in the user part (`redis://user:secret@host`) and in the `pass` or
/// `password` query parameter (`redis+unix:///sock?pass=secret`). Text that is not a URL is returned as `(not a
/// URL)` when it holds an `@` (it may hold a password the parser could not find), else as it is.
pub fn redacted(url: &str) -> String {
    if let Some(list) = HostListUrl::parse(url) {
        let query = list.query().map(|query| {
            let pairs = query.split('&').map(|pair| match pair.split_once('=') {
                Some((k, _)) if !HostListUrl::SHOWN.contains(&k) => format!("{k}=***"),
                _ => pair.to_owned(),
            });
            format!("?{}", pairs.collect::<Vec<_>>().join("&"))
        });
        let credentials = match (list.user_and_password(), list.credentials) {
            (Some((user, _)), _) => format!("{user}:***@"),
            (None, Some(user)) => format!("{user}@"),
            (None, None) => String::new(),
        };
        let (scheme, hosts, path) = (list.scheme, list.hosts, list.path());
        return format!("{scheme}://{credentials}{hosts}{path}{}", query.unwrap_or_default());
    }
    let Ok(mut parsed) = url::Url::parse(url) else {
        return if url.contains('@') { "(not a URL)".to_owned() } else { url.to_owned() };
    };
    if parsed.password().is_some() && parsed.set_password(Some("***")).is_err() {
        return "(not a URL)".to_owned();
    }
    if parsed.query_pairs().any(|(k, _)| is_secret(&k)) {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(k, v)| {
                let v = if is_secret(&k) { "***".to_owned() } else { v.into_owned() };
                (k.into_owned(), v)
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    // A value the URL parser read as something other than a URL with an authority (`a:://user:secret@host` is
    // scheme `a` and a path; so is `user:secret@host:6379`) may still hold a password, which it did not find.
    let authority = parsed.has_host();
    let shown: String = parsed.into();
    if (!authority && shown.contains('@')) || unmasked_password(&shown) { "(not a URL)".to_owned() } else { shown }
}

/// Whether `text` has a `USER:PASSWORD@` after its first `://` whose password is not `***`.
fn unmasked_password(text: &str) -> bool {
    let Some((_, rest)) = text.split_once("://") else { return false };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    authority
        .rsplit_once('@')
        .and_then(|(credentials, _)| credentials.split_once(':'))
        .is_some_and(|(_, password)| password != "***")
}

/// Whether a URL's query parameter holds a password (`redis+unix:///sock?pass=...`,
/// `redis+sentinel://...?sentinel_password=...`).
fn is_secret(key: &str) -> bool {
    key.eq_ignore_ascii_case("pass") || key.to_ascii_lowercase().ends_with("password")
}

/// `text` (an error's, say) with every password `url` holds written `***`, as it stands in the URL and decoded:
/// what [`redacted`] hides in the URL, hidden wherever else it is quoted.
#[cfg(feature = "redis")]
pub(crate) fn scrubbed(url: &str, text: &str) -> String {
    let (password, mut secrets) = match HostListUrl::parse(url) {
        Some(list) => (list.user_and_password().map(|(_, password)| password.to_owned()), list.query_secrets()),
        None => {
            let Ok(parsed) = url::Url::parse(url) else { return text.to_owned() };
            let secrets = parsed.query_pairs().filter(|(k, _)| is_secret(k)).map(|(_, v)| v.into_owned()).collect();
            (parsed.password().map(str::to_owned), secrets)
        }
    };
    if let Some(password) = password {
        secrets.extend(url::form_urlencoded::parse(format!("p={password}").as_bytes()).map(|(_, v)| v.into_owned()));
        secrets.push(password);
    }
    secrets.iter().filter(|s| !s.is_empty()).fold(text.to_owned(), |text, secret| text.replace(secret.as_str(), "***"))
}

/// `task` without its claiming message's entry, for a task's end: the store keeps the one the claim wrote
/// (`SharedTask::message_key`), whatever the end carries.
#[cfg(any(feature = "sqlite", feature = "redis"))]
pub(crate) fn without_message_key(
    task: &ldp_session::shared::SharedTask,
) -> std::borrow::Cow<'_, ldp_session::shared::SharedTask> {
    if task.message_key.is_none() && task.message_until_ms == 0 {
        return std::borrow::Cow::Borrowed(task);
    }
    let mut task = task.clone();
    (task.message_key, task.message_until_ms) = (None, 0);
    std::borrow::Cow::Owned(task)
}

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The `--store` value is none of the accepted forms (shown with any password redacted).
    #[error(
        "{0:?} is not a store: expected memory, sqlite:PATH, redis://HOST:PORT[/DB], rediss://..., \
         redis+unix:///PATH, unix:///PATH, redis+cluster://HOST:PORT[,HOST:PORT...] (rediss+cluster://) or \
         redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB] (rediss+sentinel://)"
    )]
    Spec(String),
    /// A bare `HOST:PORT` (shown without any `USER:PASSWORD@`): a Redis address without its scheme, far likelier
    /// than an SQLite file of that name (which `sqlite:HOST:PORT` still opens).
    #[error("{0:?} looks like a Redis address, not a file: write it as a redis:// URL (or sqlite:PATH for a file)")]
    BareAddress(String),
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
    /// The Redis URL is invalid, its TLS files do not parse, or the server refused the credentials or the database
    /// (a server that cannot be reached is no error: the store reconnects, and refuses messages until then).
    #[error("Redis {url}: {reason}")]
    Redis {
        /// The URL, its password redacted ([`redacted`]).
        url: String,
        /// Why.
        reason: String,
    },
}

/// Opens the store `spec` names; `None` for [`StoreSpec::Memory`] (no shared store: the machine's own tables).
#[cfg_attr(not(any(feature = "sqlite", feature = "redis")), allow(unused_variables))]
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

/// The smallest bound a store's task records take ([`StoreConfig::memory_max_bytes`],
/// [`StoreConfig::sqlite_max_bytes`]); a smaller one is taken as this.
pub(crate) const MIN_BOUND_BYTES: u64 = 1 << 20;

/// The marks of a bound of `max` (bytes or pages, as the store counts): past the first, the oldest ended tasks'
/// records are dropped, down to the second. Seven eighths and three quarters, the same for every bounded store.
pub(crate) fn drop_marks(max: u64) -> (u64, u64) {
    (max / 8 * 7, max / 4 * 3)
}

/// A duration in milliseconds, saturating.
#[cfg(any(feature = "sqlite", feature = "redis"))]
pub(crate) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A record that does not decode.
#[cfg(any(feature = "sqlite", feature = "redis"))]
pub(crate) fn corrupt(backend: &'static str, e: impl std::fmt::Display) -> ldp_session::store::StoreError {
    ldp_session::store::StoreError::Corrupt { backend, reason: e.to_string() }
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
        for url in [
            "rediss://:pw@redis.internal:6380/1",
            "redis+unix:///run/redis.sock?db=2",
            "unix:///run/r.sock",
            "redis+cluster://10.0.0.1:7000,10.0.0.2:7000",
            "rediss+cluster://app:pw@10.0.0.1:7000,10.0.0.2:7000",
            "redis+sentinel://10.0.0.1:26379/svc",
            "rediss+sentinel://:pw@10.0.0.1:26379,10.0.0.2:26379/svc/1",
        ] {
            assert_eq!(url.parse::<StoreSpec>().unwrap(), StoreSpec::Redis(url.into()));
        }
        for bad in ["", "sqlite:", "postgres://db/x", "http://x"] {
            assert!(bad.parse::<StoreSpec>().is_err(), "{bad:?}");
        }
        let refused = "postgres://admin:hunter2@db/x".parse::<StoreSpec>().unwrap_err().to_string();
        assert!(!refused.contains("hunter2"), "{refused}");
    }

    /// A Redis address without its scheme is refused rather than opened as an SQLite file of that name, without
    /// showing a password it may hold; `sqlite:` opens such a file on purpose, and paths with a colon stay paths.
    #[test]
    fn a_bare_address_is_not_taken_for_a_file() {
        for bare in ["localhost:6379", "10.0.0.5:6380", "redis.internal:6379", ":hunter2@db:6379", "app:hunter2@db:1"] {
            let refused = bare.parse::<StoreSpec>().unwrap_err();
            assert!(matches!(refused, OpenError::BareAddress(_)), "{bare:?}: {refused}");
            assert!(!refused.to_string().contains("hunter2"), "{refused}");
        }
        assert_eq!("sqlite:localhost:6379".parse::<StoreSpec>().unwrap(), StoreSpec::Sqlite("localhost:6379".into()));
        for path in ["./a:1", "/var/lib/ldp/x:2", "c:state.db", "state:db", "state.db:"] {
            assert_eq!(path.parse::<StoreSpec>().unwrap(), StoreSpec::Sqlite(path.into()), "{path:?}");
        }
    }

    #[test]
    fn passwords_are_redacted_wherever_a_url_holds_them() {
        assert_eq!(redacted("redis://:hunter2@host:6379/1"), "redis://:***@host:6379/1");
        assert_eq!(redacted("rediss://app:hunter2@host:6380"), "rediss://app:***@host:6380");
        assert_eq!(redacted("redis+unix:///s.sock?db=1&pass=hunter2"), "redis+unix:///s.sock?db=1&pass=***");
        assert_eq!(redacted("redis+unix:///s.sock?PASSWORD=hunter2"), "redis+unix:///s.sock?PASSWORD=***");
        assert_eq!(redacted("redis+cluster://app:hunter2@h1:7000,h2:7000"), "redis+cluster://app:***@h1:7000,h2:7000");
        assert_eq!(redacted("rediss+cluster://:hunter2@h1:7000"), "rediss+cluster://:***@h1:7000");
        assert_eq!(redacted("redis+cluster://h1:7000,h2:7000"), "redis+cluster://h1:7000,h2:7000");
        // No password: unchanged. A user alone is no secret.
        assert_eq!(redacted("redis://127.0.0.1:6379/2"), "redis://127.0.0.1:6379/2");
        assert_eq!(redacted("redis://app@host"), "redis://app@host");
        // Not a URL, but it may hold one's credentials (found by the property test below).
        assert_eq!(redacted("redis://us er:hunter2@[bad"), "(not a URL)");
        assert_eq!(redacted("a:://u:hunter2@h:1"), "(not a URL)");
        assert_eq!(redacted("u:hunter2@://:6379"), "(not a URL)");
        let spec = StoreSpec::Redis("redis://:hunter2@host".into());
        assert!(!format!("{spec:?}").contains("hunter2"));
    }

    #[cfg(feature = "redis")]
    #[test]
    fn quoted_passwords_are_scrubbed_from_error_text() {
        let said = "AUTH p%40ss failed for p@ss; socket pass s3cret";
        assert_eq!(scrubbed("redis://u:p%40ss@host", said), "AUTH *** failed for ***; socket pass s3cret");
        assert_eq!(scrubbed("redis+unix:///s.sock?pass=s3cret", said), "AUTH p%40ss failed for p@ss; socket pass ***");
        assert_eq!(scrubbed("redis://host", said), said);
        assert_eq!(
            scrubbed("redis+cluster://u:p%40ss@h1:7000,h2:7000", said),
            "AUTH *** failed for ***; socket pass s3cret"
        );
        assert_eq!(scrubbed("redis+cluster://h1:7000", said), said);
        assert_eq!(
            scrubbed("redis+sentinel://s1:1/svc?sentinel_password=p%40ss", said),
            "AUTH *** failed for ***; socket pass s3cret"
        );
    }

    #[test]
    fn a_cluster_url_is_taken_apart_once_for_every_use() {
        let cluster = HostListUrl::parse("rediss+cluster://app:pw@h1:7000,h2:7001/0?x=1").unwrap();
        assert_eq!(cluster.scheme, "rediss+cluster");
        assert_eq!(cluster.hosts, "h1:7000,h2:7001");
        assert_eq!(cluster.user_and_password(), Some(("app", "pw")));
        assert_eq!(cluster.after_credentials, "h1:7000,h2:7001/0?x=1");
        let bare = HostListUrl::parse("redis+cluster://h1:7000").unwrap();
        assert_eq!((bare.credentials, bare.hosts, bare.user_and_password()), (None, "h1:7000", None));
        #[cfg(feature = "redis")]
        {
            assert_eq!(cluster.node_scheme("cluster"), Some("rediss://"));
            assert_eq!(bare.node_scheme("cluster"), Some("redis://"));
            assert_eq!(cluster.node_scheme("sentinel"), None);
            let sentinel = HostListUrl::parse("rediss+sentinel://s1:26379/svc").unwrap();
            assert_eq!(sentinel.node_scheme("sentinel"), Some("rediss://"));
            assert_eq!(HostListUrl::parse("redisx+sentinel://s1:1/svc").unwrap().node_scheme("sentinel"), None);
        }
        assert_eq!(HostListUrl::parse("redis+cluster://app@h1:7000").unwrap().user_and_password(), None);
        assert!(HostListUrl::parse("redis://u:p@h1:7000").is_none());
        let sentinel = HostListUrl::parse("redis+sentinel://:pw@s1:26379,s2:26379/svc/3").unwrap();
        assert_eq!((sentinel.hosts, sentinel.after_hosts()), ("s1:26379,s2:26379", "/svc/3"));
        assert_eq!(sentinel.user_and_password(), Some(("", "pw")));
        assert_eq!(redacted("redis+sentinel://:pw@s1:26379/svc"), "redis+sentinel://:***@s1:26379/svc");
        assert_eq!(
            redacted("rediss+sentinel://u:pw@s1:26379/svc?sentinel_password=sp"),
            "rediss+sentinel://u:***@s1:26379/svc?sentinel_password=***"
        );
        assert_eq!(HostListUrl::parse("redis+sentinel://s1:26379").unwrap().after_hosts(), "");
        assert_eq!(
            redacted("redis+sentinel://u@s1:1/svc?sentinel_user=a&sentinel_password=p%40ss&x=1"),
            "redis+sentinel://u@s1:1/svc?sentinel_user=a&sentinel_password=***&x=***"
        );
        assert_eq!(redacted("redis+cluster://h1:1?password=pw"), "redis+cluster://h1:1?password=***");
        assert_eq!(
            redacted("redis+sentinel://s1:1/svc?sentinel_pasword=pw"),
            "redis+sentinel://s1:1/svc?sentinel_pasword=***"
        );
    }

    proptest::proptest! {
        /// Any `--store` value parses or is refused, never panics, and a refusal shows no password it carried.
        #[test]
        fn any_store_value_is_parsed_or_refused(value in "[ -~]{0,48}", password in "[a-zA-Z0-9]{8,16}") {
            let _ = value.parse::<StoreSpec>();
            for shaped in [format!("{value}://u:{password}@h:1"), format!("u:{password}@{value}:6379")] {
                if let Err(e) = shaped.parse::<StoreSpec>() {
                    proptest::prop_assert!(!e.to_string().contains(&password), "{shaped} -> {e}");
                }
            }
        }

        /// Whatever the password (percent-encoded in the URL, as it must be), `redacted` does not show it, in the
        /// user part or in the query.
        #[test]
        fn no_password_survives_redaction(password in "[ -~]{1,24}", user in "[a-z]{0,8}", form in 0..3_u8) {
            let encoded: String = url::form_urlencoded::byte_serialize(password.as_bytes()).collect();
            let url = match form {
                0 => format!("redis+unix:///run/redis.sock?db=1&pass={encoded}"),
                1 => format!("redis+cluster://{user}:{encoded}@10.0.0.1:7000,10.0.0.2:7000"),
                _ => format!("redis://{user}:{encoded}@127.0.0.1:6379/0"),
            };
            let shown = redacted(&url);
            // Short passwords may be found by chance in the rest of the URL ("1", "redis"): judge what replaced them.
            proptest::prop_assert!(shown.contains("***") || shown == "(not a URL)", "{url} -> {shown}");
            if password.len() >= 6 {
                proptest::prop_assert!(!shown.contains(&password) && !shown.contains(&encoded), "{url} -> {shown}");
            }
        }
    }
}
