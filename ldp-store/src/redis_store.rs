//! The Redis store, for replicas behind a load balancer.
//!
//! The store's rules run in Rust (`ldp_session::shared::rules`), over one session's records, and one script writes
//! what they decided only if every record they read is unchanged (`records.rs`): Redis offers atomic primitives, not
//! a copy of a rule. A task costs Redis two calls, its admission and its end, while this replica remembers the
//! session's row and the task's record.
//!
//! Keys start with `ldp:<delegate id>:` (several delegates can share one Redis), and every key of a session carries
//! the session id as its hash tag, `ldp:<ns>:{<session id>}:session|usage|task:<id>|replay:<digest>`, so on Redis
//! Cluster all of a session's keys live in one slot and the script that touches several of them runs there (a
//! session id's `%`, `{` and `}` escaped, see `tag`). A session's value is `<expiry ms>|<TTL ms>|<record>`, and its key
//! expires a marker time (`closed_ttl`) after the expiry (in that time it is looked up as expired, so every replica
//! answers `SESSION_EXPIRED`); a closed session's value is `closed`. A task's record holds its lease's end and expires
//! a result TTL after its last write.
//!
//! Replay entries are `ldp:<ns>:{<session id>}:replay:<message digest>` for a message in a session (its signature
//! covers the session id, so a replay carries the same one) and `ldp:<ns>:replay:{<message digest>}` for one outside
//! (`SET PXAT`), global across principals (a captured message replayed under another credential is still a
//! replay). Signed traffic's bounds are sorted sets scored by expiry in one slot, `ldp:<ns>:{replay-count}:share:
//! <principal>` and `ldp:<ns>:{replay-count}:total`.
//!
//! Near its `maxmemory`, or refused a write for memory, the store drops the oldest ended tasks' records early, as the
//! other backends do at their bounds (`room.rs`); a result is always recorded, a status query and a close always
//! answered, even when Redis is full (the script deletes before it writes, or only reads).
//!
//! Each call goes through `redis`'s `ConnectionManager` (one multiplexed connection, reconnected in the background
//! after a failure) with its own response and connection timeouts; the runtime adds its own timeout on top. Behind
//! Redis Sentinel (`redis+sentinel://`, `rediss+sentinel://`), the connection goes to the primary the sentinels name
//! (checked with `ROLE`), and is dropped, to be made again from what the sentinels then say, when a call finds the
//! primary gone or demoted (`READONLY`): see `SentinelLink`.

use std::time::Duration;

use async_trait::async_trait;
use ldp_session::TaskKey;
use ldp_session::shared::rules;
use ldp_session::shared::{
    Admission, Admitted, ReplayClaim, ReplayVerdict, SessionLookup, SharedSession, SharedTask, TaskClaim, TaskFinish,
    TaskStep,
};
use ldp_session::store::{LostTasks, Store, StoreError};
use redis::{AsyncCommands, Script};

use crate::{OpenError, StoreConfig, corrupt};

mod connection;
mod records;
mod room;
mod scripts;
pub use room::RoomPass;

use connection::*;
use records::Role;
use scripts::*;

const BACKEND: &str = "redis";

/// The value of a closed session's key.
const CLOSED: &str = "closed";

/// Shared state in Redis.
#[derive(Clone)]
pub struct RedisStore {
    cfg: StoreConfig,
    /// `ldp:<namespace>:`, braces removed from the namespace so that only the session id is a hash tag.
    prefix: String,
    conn: Connection,
    scripts: std::sync::Arc<Scripts>,
    /// When Redis's memory was last read, and whether room is being made (`room.rs`).
    room: std::sync::Arc<room::Room>,
    /// The records this replica last wrote or read: the first guess of the next operation on them (`records.rs`).
    remembered: std::sync::Arc<records::Remembered>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

struct Scripts {
    commit: Script,
    account: Script,
    drop_ended: Script,
}

impl RedisStore {
    /// A write Redis failed: `Unavailable` (retryable), and when Redis refused it for memory, room is made at once
    /// (`room.rs`), so that a retry finds it.
    fn refused(&self, e: redis::RedisError) -> StoreError {
        if room::out_of_memory(&e) {
            self.after_refusal();
            return unavailable(format!("Redis is full (maxmemory); room is being made, retry: {e}"));
        }
        unavailable(e)
    }
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable { backend: BACKEND, reason: e.to_string() }
}

/// Whether a server with this `maxmemory` (bytes; `0`: no limit) and `maxmemory-policy` may evict keys.
fn evicts(maxmemory: &str, policy: &str) -> bool {
    maxmemory.trim() != "0" && !policy.trim().eq_ignore_ascii_case("noeviction")
}

/// Whether a failure is the server's absence (it may come back), rather than a refusal that will not mend by
/// itself: credentials, a database index, a command the user may not run.
fn unreachable(e: &redis::RedisError) -> bool {
    (e.is_io_error() || e.is_connection_refusal() || e.is_timeout() || e.is_connection_dropped()) && !tls_refused(e)
}

/// Whether TLS failed on what the two ends present (a certificate that does not lead to a trusted CA, a name it
/// does not cover, a client certificate missing or refused): wrong files, not an outage.
fn tls_refused(e: &redis::RedisError) -> bool {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    // `redis` keeps the I/O error behind an `Arc`, whose `source` skips it, and the I/O error holds rustls's.
    fn is_tls(error: &(dyn std::error::Error + 'static)) -> bool {
        if let Some(shared) = error.downcast_ref::<Shared>() {
            return is_tls(&**shared);
        }
        error.downcast_ref::<rustls::Error>().is_some()
            || error
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = source {
        if is_tls(error) {
            return true;
        }
        source = error.source();
    }
    false
}

impl RedisStore {
    /// Connects to `url`: `redis://[USER:PASSWORD@]HOST:PORT[/DB]`, `rediss://...` (TLS: the system's roots, or
    /// [`StoreConfig::redis_tls`]), `redis+unix:///PATH[?db=N]`, a Redis Cluster,
    /// `redis+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]`, or the primary Redis Sentinels name,
    /// `redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]` (`rediss+cluster://` and
    /// `rediss+sentinel://` over TLS). It asks the server once (`PING`): credentials it refuses, a database it does
    /// not have, TLS files that do not parse or a certificate that does not verify are an [`OpenError`], since they
    /// will not mend. A server that cannot be reached is not: the connection is remade after failures, so a Redis
    /// that is down at start (logged as a warning) or later only makes calls fail (typed, retryable) until it is
    /// back.
    pub async fn open(url: &str, cfg: StoreConfig) -> Result<Self, OpenError> {
        let fail = |e: redis::RedisError| OpenError::Redis {
            url: crate::redacted(url),
            reason: crate::scrubbed(url, &e.to_string()),
        };
        let tls_elsewhere = cfg.redis_tls.is_some() && !url.starts_with("rediss://") && !url.starts_with("rediss+");
        if tls_elsewhere {
            return Err(OpenError::Redis {
                url: crate::redacted(url),
                reason: "TLS files were given for a URL that is not rediss://, rediss+cluster:// or rediss+sentinel://"
                    .to_owned(),
            });
        }
        let conn = match (cluster_client(url, &cfg), sentinel_client(url, &cfg)) {
            (Some(client), _) => Connection::Cluster(std::sync::Arc::new(ClusterLink {
                client: client.map_err(fail)?,
                conn: tokio::sync::Mutex::new(None),
            })),
            (None, Some(client)) => {
                let link = std::sync::Arc::new(SentinelLink {
                    client: tokio::sync::Mutex::new(client.map_err(fail)?),
                    conn: tokio::sync::Mutex::new(SentinelConn::default()),
                });
                SentinelLink::watch(&link);
                Connection::Sentinel(link)
            }
            (None, None) => {
                let client = match &cfg.redis_tls {
                    Some(tls) if url.starts_with("rediss://") => {
                        redis::Client::build_with_tls(url, tls_certificates(tls)).map_err(fail)?
                    }
                    _ => redis::Client::open(url).map_err(fail)?,
                };
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_response_timeout(Some(COMMAND_TIMEOUT))
                    .set_connection_timeout(Some(COMMAND_TIMEOUT))
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_secs(1));
                Connection::Node(client.get_connection_manager_lazy(config).map_err(fail)?)
            }
        };
        let namespace: String = cfg.namespace.chars().filter(|c| !matches!(c, '{' | '}')).collect();
        let scripts = Scripts {
            commit: Script::new(COMMIT),
            account: Script::new(ACCOUNT),
            drop_ended: Script::new(room::DROP_ENDED),
        };
        let store = Self {
            prefix: format!("ldp:{namespace}:"),
            cfg,
            conn,
            scripts: std::sync::Arc::new(scripts),
            room: std::sync::Arc::default(),
            remembered: std::sync::Arc::default(),
        };
        let mut conn = store.conn();
        let ping = redis::cmd("PING");
        match tokio::time::timeout(COMMAND_TIMEOUT + Duration::from_millis(500), ping.query_async::<String>(&mut conn))
            .await
        {
            Ok(Ok(_)) => store.warn_of_memory_settings(url).await,
            Ok(Err(e)) if !unreachable(&e) => return Err(fail(e)),
            Ok(Err(e)) => tracing::warn!(
                url = %crate::redacted(url),
                error = %crate::scrubbed(url, &e.to_string()),
                "Redis cannot be reached yet; messages are refused STORE_UNAVAILABLE (retryable) until it can"
            ),
            Err(_) => tracing::warn!(
                url = %crate::redacted(url),
                "Redis did not answer PING in time; messages are refused STORE_UNAVAILABLE (retryable) until it does"
            ),
        }
        Ok(store)
    }

    /// Warns when the server may evict keys under memory pressure: every key of this store has an expiry, so any
    /// policy but `noeviction` (the `volatile-*` ones too, the default of some managed services) may drop replay
    /// entries, and a captured message would then be accepted again, or live sessions and task claims. Warns too
    /// when it has no `maxmemory` at all: task results are kept for the result TTL, so a flood of tasks grows the
    /// server until its host runs out of memory, and a Redis killed for it (without persistence) forgets the replay
    /// window. A server that does not answer `CONFIG GET` (managed services often rename it) is not judged.
    async fn warn_of_memory_settings(&self, url: &str) {
        let setting = |name: &'static str| {
            let mut conn = self.conn();
            async move {
                let pair: Vec<String> = redis::cmd("CONFIG").arg("GET").arg(name).query_async(&mut conn).await.ok()?;
                pair.into_iter().nth(1)
            }
        };
        let (Some(limit), Some(policy)) = (setting("maxmemory").await, setting("maxmemory-policy").await) else {
            return;
        };
        if limit.trim() == "0" {
            tracing::warn!(
                url = %crate::redacted(url),
                "Redis has no maxmemory: task results are kept for --result-ttl, so a flood of tasks grows it until its \
                 host runs out of memory; set maxmemory, with maxmemory-policy noeviction (near it, the oldest ended \
                 tasks' results are dropped early; full, it refuses writes, and messages are refused STORE_UNAVAILABLE)"
            );
        } else if evicts(&limit, &policy) {
            tracing::warn!(
                url = %crate::redacted(url),
                maxmemory = %limit,
                policy = %policy,
                "Redis may evict this store's keys when full: replay entries (a replayed message is then accepted), \
                 sessions and task claims; set maxmemory-policy noeviction (near maxmemory, the oldest ended tasks' \
                 results are dropped early; full, it refuses writes, and messages are refused STORE_UNAVAILABLE)"
            );
        }
    }

    fn session_key(&self, session_id: &str) -> String {
        format!("{}{{{}}}:session", self.prefix, tag(session_id))
    }

    /// The hash of a session's usage across replicas (`t` tasks counted, `k` tokens, `c` cost), in its slot.
    fn usage_key(&self, session_id: &str) -> String {
        format!("{}{{{}}}:usage", self.prefix, tag(session_id))
    }

    fn task_key(&self, key: &TaskKey) -> String {
        format!("{}{{{}}}:task:{}", self.prefix, tag(&key.session_id), key.task_id)
    }

    /// The store's keeping times as the rules take them.
    fn keeping(&self) -> rules::Keeping {
        rules::Keeping::new(self.cfg.closed_ttl, self.cfg.result_ttl)
    }

    fn conn(&self) -> Connection {
        self.conn.clone()
    }
}

/// A session id as it stands between the braces of its keys' hash tag. Initiators may propose session ids, so an id
/// may hold `}`: written as it is, `{x}:task:y}:session` (session `x}:task:y`) would be the key of session `x`'s task
/// `y}:session`, and a peer could write one of its records over another. `%`, `{` and `}` are written `%25`, `%7B`,
/// `%7D`, so the tag ends at the first `}` and every key reads back one way; other ids, UUIDs among them, are written
/// as they are, so their keys are those of earlier versions.
fn tag(session_id: &str) -> std::borrow::Cow<'_, str> {
    if !session_id.contains(['%', '{', '}']) {
        return std::borrow::Cow::Borrowed(session_id);
    }
    let mut escaped = String::with_capacity(session_id.len() + 8);
    for c in session_id.chars() {
        match c {
            '%' => escaped.push_str("%25"),
            '{' => escaped.push_str("%7B"),
            '}' => escaped.push_str("%7D"),
            c => escaped.push(c),
        }
    }
    std::borrow::Cow::Owned(escaped)
}

fn decode<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt(BACKEND, e))
}

fn encode<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| corrupt(BACKEND, e))
}

impl RedisStore {
    /// The replay entry's key: in the session's slot for a message in a session (so the admission script touches one
    /// slot), else its own.
    fn replay_key(&self, session_id: Option<&str>, digest: &str) -> String {
        match session_id {
            Some(id) => format!("{}{{{}}}:replay:{digest}", self.prefix, tag(id)),
            None => format!("{}replay:{{{digest}}}", self.prefix),
        }
    }

    /// The share and total sorted sets of the replay window's bounds, in one slot of their own.
    fn account_keys(&self, principal: &str) -> (String, String) {
        let base = format!("{}{{replay-count}}", self.prefix);
        (format!("{base}:share:{principal}"), format!("{base}:total"))
    }
}

#[async_trait]
impl Store for RedisStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn admit(&self, admission: &Admission) -> Result<Admitted, StoreError> {
        let session_id = admission.session_id.as_deref();
        if let Some(claim) = &admission.replay
            && (claim.max_per_principal.is_some() || claim.max_total.is_some())
        {
            let (share, total) = self.account_keys(&claim.principal);
            let counted: i64 = self
                .scripts
                .account
                .key(&share)
                .key(&total)
                .arg(&claim.key)
                .arg(claim.expires_at_ms)
                .arg(claim.max_per_principal.map(|n| n.to_string()).unwrap_or_default())
                .arg(claim.max_total.map(|n| n.to_string()).unwrap_or_default())
                .arg(crate::now_ms())
                .invoke_async(&mut self.conn())
                .await
                .map_err(|e| self.refused(e))?;
            match counted {
                0 => return Ok(Admitted::replay_only(ReplayVerdict::Full)),
                2 => return Ok(Admitted::replay_only(ReplayVerdict::TableFull)),
                _ => {}
            }
        }
        // What the rules may read, all in the session's slot (or the replay entry's own, outside a session).
        let mut watch = Vec::with_capacity(4);
        let dedupe = match &admission.task {
            Some(TaskStep::Claim { dedupe: Some(entry), .. }) if admission.replay.is_none() => Some(entry),
            _ => None,
        };
        if let Some(entry) = admission.replay.as_ref().or(dedupe) {
            watch.push((self.replay_key(session_id, &entry.key), Role::Entry));
        }
        if let Some(id) = session_id {
            watch.push((self.session_key(id), Role::Session));
            match &admission.task {
                Some(TaskStep::Claim { key, max_tasks, usage, .. }) => {
                    if max_tasks.is_some() || *usage {
                        watch.push((self.usage_key(id), Role::Usage));
                    }
                    watch.push((self.task_key(key), Role::Task));
                }
                Some(TaskStep::Read(key) | TaskStep::Cancel(key)) => watch.push((self.task_key(key), Role::Task)),
                _ => {}
            }
        } else if watch.is_empty() {
            return Ok(Admitted::replay_only(ReplayVerdict::Fresh));
        }
        let keeping = self.keeping();
        self.atomically(session_id, &watch, |slot, now| rules::admit(slot, admission, now, keeping)).await
    }

    async fn create_session(&self, session: &SharedSession) -> Result<bool, StoreError> {
        let id = session.session_id.as_str();
        let watch = [(self.session_key(id), Role::Session)];
        let keeping = self.keeping();
        self.atomically(Some(id), &watch, |slot, now| rules::create_session(slot, session, now, keeping)).await
    }

    async fn close_session(&self, session_id: &str) -> Result<(), StoreError> {
        let keeping = self.keeping();
        self.atomically(Some(session_id), &[], |slot, now| rules::close_session(slot, session_id, now, keeping)).await
    }

    async fn claim_task(&self, key: &TaskKey, task: &SharedTask, lease: Duration) -> Result<TaskClaim, StoreError> {
        let (watch, keeping) = ([(self.task_key(key), Role::Task)], self.keeping());
        self.atomically(Some(&key.session_id), &watch, |slot, now| rules::claim(slot, key, task, lease, now, keeping))
            .await
    }

    async fn release_task(&self, key: &TaskKey, owner: &str, dedupe: Option<&ReplayClaim>) -> Result<(), StoreError> {
        let watch = [(self.task_key(key), Role::Task)];
        self.atomically(Some(&key.session_id), &watch, |slot, _| rules::release(slot, key, owner, dedupe)).await
    }

    async fn renew_leases(&self, owner: &str, keys: &[TaskKey], lease: Duration) -> Result<LostTasks, StoreError> {
        let keeping = self.keeping();
        let mut lost = Vec::new();
        // One task at a time: each is in its session's slot.
        for key in keys {
            let (watch, one) = ([(self.task_key(key), Role::Task)], std::slice::from_ref(key));
            let renew = |slot: &mut records::Slot<'_>, now| rules::renew(slot, owner, one, lease, now, keeping);
            lost.extend(self.atomically(Some(&key.session_id), &watch, renew).await?);
        }
        Ok(lost)
    }

    async fn finish_task(&self, key: &TaskKey, task: &SharedTask) -> Result<TaskFinish, StoreError> {
        let (watch, keeping) = ([(self.task_key(key), Role::Task)], self.keeping());
        self.atomically(Some(&key.session_id), &watch, |slot, now| rules::finish(slot, key, task, now, keeping)).await
    }

    async fn task(&self, key: &TaskKey) -> Result<Option<SharedTask>, StoreError> {
        let (watch, keeping) = ([(self.task_key(key), Role::Task)], self.keeping());
        self.atomically(Some(&key.session_id), &watch, |slot, now| rules::read(slot, key, now, keeping)).await
    }

    async fn ended_sessions(&self, session_ids: &[String]) -> Result<Vec<(String, SessionLookup)>, StoreError> {
        if session_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn();
        // One GET per session, each in its own slot: in one round trip to a single server; one by one to a cluster,
        // whose client refuses a pipeline across slots. Nothing is written.
        let values: Vec<Option<String>> = if let Connection::Cluster(_) = conn {
            let mut values = Vec::with_capacity(session_ids.len());
            for id in session_ids {
                values.push(conn.get(self.session_key(id)).await.map_err(unavailable)?);
            }
            values
        } else {
            let mut pipe = redis::pipe();
            for id in session_ids {
                pipe.get(self.session_key(id));
            }
            pipe.query_async(&mut conn).await.map_err(unavailable)?
        };
        let (now, keeping) = (crate::now_ms(), self.keeping());
        let mut ended = Vec::new();
        for (id, value) in session_ids.iter().zip(values) {
            // A value that cannot be read is left to the admission, which answers it `Corrupt`.
            let row = value.as_deref().and_then(|value| records::session_row(value).ok());
            let how = rules::session_lookup(row.as_ref(), now, keeping);
            if matches!(how, SessionLookup::Closed | SessionLookup::Expired) {
                ended.push((id.clone(), how));
            }
        }
        Ok(ended)
    }
}

#[cfg(test)]
mod tests {
    use super::{evicts, tag};

    #[test]
    fn only_noeviction_or_no_limit_keeps_every_key() {
        assert!(!evicts("0", "allkeys-lru"), "no limit: nothing is evicted");
        assert!(!evicts("104857600", "noeviction"));
        assert!(!evicts("104857600", "NoEviction"));
        for policy in ["allkeys-lru", "volatile-lru", "volatile-ttl", "allkeys-random", "volatile-lfu"] {
            assert!(evicts("104857600", policy), "{policy}");
        }
    }

    /// Ordinary ids keep the keys earlier versions wrote; ids with `%`, `{` or `}` are escaped so that the hash tag
    /// ends at the first `}` and two different ids never give the same tag.
    #[test]
    fn session_ids_are_tagged_one_way() {
        let uuid = "3f1c6a52-6b5e-4c8e-9a34-1f0e2d9c7b11";
        assert_eq!(tag(uuid), uuid);
        assert_eq!(tag("x}:task:y"), "x%7D:task:y");
        assert_eq!(tag("{a}"), "%7Ba%7D");
        assert_eq!(tag("%7D"), "%257D");
        let ids = ["}", "%7D", "%257D", "{", "%7B", "a}b", "a%7Db", "", "%", "%25"];
        for (i, a) in ids.iter().enumerate() {
            assert!(!tag(a).contains(['{', '}']), "{a:?}");
            for b in &ids[i + 1..] {
                assert_ne!(tag(a), tag(b), "{a:?} and {b:?}");
            }
        }
    }
}
