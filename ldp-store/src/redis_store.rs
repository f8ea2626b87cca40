//! The Redis store, for replicas behind a load balancer.
//!
//! Keys start with `ldp:<delegate id>:` (several delegates can share one Redis), and every key of a session carries
//! the session id as its hash tag, `ldp:<ns>:{<session id>}:session|task:<id>|lease:<id>`, so on Redis Cluster all of
//! a session's keys live in one slot and the scripts that touch several of them run there (a session id's `%`, `{` and
//! `}` escaped, see `tag`). TTLs are Redis expiries
//! (`PX`): a session's key expires a marker time (`closed_ttl`) after its TTL without a message (in that time it is
//! looked up as expired, so every replica answers `SESSION_EXPIRED`), a lease key after the lease without renewal. A
//! session's TTL restart is written ahead by a tenth of the TTL (at most a second), so a busy session's value is
//! rewritten about once a second rather than by every message.
//! Replay entries are `ldp:<ns>:{<session id>}:replay:<message digest>` for a message in a session (its signature
//! covers the session id, so a replay carries the same one) and `ldp:<ns>:replay:{<message digest>}` for one outside
//! (`SET NX PXAT`), global across principals (a captured message replayed under another credential is still a
//! replay). Signed traffic's bounds are sorted sets scored by expiry in one slot, `ldp:<ns>:{replay-count}:share:
//! <principal>` and `ldp:<ns>:{replay-count}:total`.
//!
//! Near its `maxmemory`, or refused a write for memory, the store drops the oldest ended tasks' records early, as the
//! other backends do at their bounds (`room.rs`); a result is always recorded, a status query and a close always
//! answered, even when Redis is full (their scripts delete before they write, or only read).
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
    Admission, Admitted, ReplayClaim, ReplayVerdict, SessionLookup, SessionUsage, SharedSession, SharedTask,
    TaskAnswer, TaskClaim, TaskFinish, TaskStep,
};
use ldp_session::store::{Store, StoreError};
use redis::{AsyncCommands, Script};

use crate::{OpenError, StoreConfig, corrupt, ms};

mod connection;
mod room;
mod scripts;
pub use room::RoomPass;

use connection::*;
use scripts::*;

const BACKEND: &str = "redis";

/// The value of a closed session's key.
const CLOSED: &str = "closed";

/// The value of an expired session's key (kept as a marker until the key's own expiry).
const EXPIRED: &str = "expired";

/// What the admission script answers for a session's value it cannot read.
const CORRUPT: &str = "corrupt";

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
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

struct Scripts {
    admit: Script,
    account: Script,
    claim: Script,
    release: Script,
    renew: Script,
    finish: Script,
    lapse: Script,
    cancel: Script,
    drop_ended: Script,
    read: Script,
    close: Script,
    /// The rules' decisions the scripts look up.
    tables: Tables,
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
            admit: Script::new(&format!("{STATE}{ADMIT}")),
            account: Script::new(ACCOUNT),
            claim: Script::new(&format!("{STATE}{CLAIM}")),
            release: Script::new(&format!("{STATE}{RELEASE}")),
            renew: Script::new(&format!("{STATE}{RENEW}")),
            finish: Script::new(&format!("{STATE}{FINISH}")),
            lapse: Script::new(LAPSE),
            cancel: Script::new(CANCEL),
            drop_ended: Script::new(room::DROP_ENDED),
            read: Script::new(READ),
            close: Script::new(CLOSE),
            tables: Tables::new(),
        };
        let store = Self {
            prefix: format!("ldp:{namespace}:"),
            cfg,
            conn,
            scripts: std::sync::Arc::new(scripts),
            room: std::sync::Arc::default(),
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

    fn task_keys(&self, key: &TaskKey) -> (String, String) {
        let base = format!("{}{{{}}}", self.prefix, tag(&key.session_id));
        (format!("{base}:task:{}", key.task_id), format!("{base}:lease:{}", key.task_id))
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

/// A session's usage as the admission script replies it: tasks, tokens and cost, as text.
fn usage(mut reply: impl Iterator<Item = Option<String>>) -> Result<SessionUsage, StoreError> {
    let mut field = || reply.next().flatten().unwrap_or_default();
    let (tasks, tokens, cost) = (field(), field(), field());
    let count = |text: &str| text.parse::<u64>().map_err(|e| corrupt(BACKEND, e));
    let cost: f64 = cost.parse().map_err(|e| corrupt(BACKEND, e))?;
    Ok(SessionUsage::new(count(&tasks)?, count(&tokens)?, cost))
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

    /// A task's record as read (`text`, with whether its lease key exists), a lapsed lease failed first by the rules
    /// ([`rules::lapsed`]) with a compare-and-set; when the record changed meanwhile (finished, or claimed again), what
    /// it is now.
    async fn settle_read(
        &self,
        key: &TaskKey,
        text: Option<String>,
        leased: bool,
    ) -> Result<Option<SharedTask>, StoreError> {
        let Some(text) = text else { return Ok(None) };
        let task: SharedTask = decode(&text)?;
        let Some(failed) = rules::lapsed(&task, leased) else { return Ok(Some(task)) };
        if self.swap(&self.scripts.lapse, key, &text, &failed).await? {
            return Ok(Some(failed));
        }
        let now: Option<String> = self.conn().get(&self.task_keys(key).0).await.map_err(unavailable)?;
        now.as_deref().map(decode).transpose()
    }

    /// A compare-and-set of a task's record read by the admission (`LAPSE` or `CANCEL`); `true` when it swapped.
    async fn swap(&self, script: &Script, key: &TaskKey, read: &str, new: &SharedTask) -> Result<bool, StoreError> {
        let (record, lease_key) = self.task_keys(key);
        let swapped: i64 = script
            .key(&record)
            .key(&lease_key)
            .arg(read)
            .arg(encode(new)?)
            .arg(ms(self.cfg.result_ttl).max(1))
            .invoke_async(&mut self.conn())
            .await
            .map_err(unavailable)?;
        Ok(swapped == 1)
    }
}

#[async_trait]
impl Store for RedisStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn admit(&self, admission: &Admission) -> Result<Admitted, StoreError> {
        let mut conn = self.conn();
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
                .invoke_async(&mut conn)
                .await
                .map_err(|e| self.refused(e))?;
            match counted {
                0 => return Ok(Admitted::replay_only(ReplayVerdict::Full)),
                2 => return Ok(Admitted::replay_only(ReplayVerdict::TableFull)),
                _ => {}
            }
        }
        let mut invocation = self.scripts.admit.prepare_invoke();
        // A claim standing in for the message's dedupe entry: checked first, written only if no claim is made.
        let dedupe = match &admission.task {
            Some(TaskStep::Claim { dedupe: Some(entry), .. }) if admission.replay.is_none() => Some(entry),
            _ => None,
        };
        // Without a replay entry, a placeholder in the session's slot (the script does not touch it).
        let entry = admission.replay.as_ref().or(dedupe);
        let replay_key = match (entry, session_id) {
            (Some(claim), _) => self.replay_key(session_id, &claim.key),
            (None, Some(id)) => self.replay_key(Some(id), ""),
            (None, None) => return Ok(Admitted::replay_only(ReplayVerdict::Fresh)),
        };
        invocation.key(&replay_key);
        let task_key = match &admission.task {
            Some(TaskStep::Claim { key, .. } | TaskStep::Read(key) | TaskStep::Cancel(key)) => Some(key),
            _ => None,
        };
        if let Some(id) = session_id {
            invocation.key(self.session_key(id));
            // The task keys are in the session's slot; a message with no task step names placeholders there.
            let (record, lease) = match task_key {
                Some(key) => self.task_keys(key),
                None => self.task_keys(&TaskKey { session_id: id.to_owned(), task_id: String::new() }),
            };
            invocation.key(record).key(lease).key(self.usage_key(id));
        }
        invocation
            .arg(crate::now_ms())
            .arg(ms(self.cfg.closed_ttl).max(1))
            .arg(entry.map(|c| c.expires_at_ms.to_string()).unwrap_or_default());
        match &admission.task {
            Some(TaskStep::Claim { task, lease, max_tasks, usage, .. }) => {
                invocation
                    .arg("claim")
                    .arg(encode(task)?)
                    .arg(&task.owner)
                    .arg(ms(*lease).max(1))
                    .arg(ms(self.cfg.result_ttl).max(1))
                    .arg(max_tasks.map(|n| n.to_string()).unwrap_or_default())
                    .arg(if *usage { "1" } else { "" })
                    .arg(task.message_key.as_deref().unwrap_or_default())
                    .arg(if dedupe.is_some() { "1" } else { "" })
                    .arg(&self.scripts.tables.claim);
            }
            Some(TaskStep::Read(_)) => {
                invocation.arg("read");
            }
            Some(TaskStep::Cancel(_)) => {
                invocation.arg("cancel");
            }
            _ => {
                invocation.arg("");
            }
        }
        let reply: Vec<Option<String>> = invocation.invoke_async(&mut conn).await.map_err(|e| self.refused(e))?;
        self.after_write();
        let mut reply = reply.into_iter();
        if reply.next().flatten().as_deref() == Some("seen") {
            return Ok(Admitted::replay_only(ReplayVerdict::Seen));
        }
        let mut admitted = Admitted::replay_only(ReplayVerdict::Fresh);
        if session_id.is_none() {
            return Ok(admitted);
        }
        let session = match reply.next().flatten().as_deref() {
            None => SessionLookup::Unknown,
            Some(CLOSED) => SessionLookup::Closed,
            Some(EXPIRED) => SessionLookup::Expired,
            Some(CORRUPT) => return Err(corrupt(BACKEND, "a session's value is not <expiry>|<TTL>|<record>")),
            Some(text) => SessionLookup::Live(decode(text)?),
        };
        let live = matches!(session, SessionLookup::Live(_));
        admitted.session = Some(session);
        let (Some(step), true) = (&admission.task, live) else { return Ok(admitted) };
        if let TaskStep::Claim { usage: read, .. } = step {
            let claim = match reply.next().flatten().as_deref() {
                Some("1") => TaskClaim::Claimed,
                Some("2") => TaskClaim::LimitReached,
                _ => TaskClaim::Taken,
            };
            admitted.usage = if *read { Some(usage(reply)?) } else { None };
            admitted.task = Some(TaskAnswer::Claim(claim));
            return Ok(admitted);
        }
        let (record, leased) = (reply.next().flatten(), reply.next().flatten().as_deref() == Some("1"));
        admitted.task = match step {
            TaskStep::Read(key) => Some(TaskAnswer::Read(self.settle_read(key, record, leased).await?)),
            TaskStep::Cancel(key) => {
                let cancelled = match record {
                    Some(text) => {
                        let task: SharedTask = decode(&text)?;
                        match rules::cancelled(&task, leased) {
                            Some(cancelled) => {
                                self.swap(&self.scripts.cancel, key, &text, &cancelled).await?.then_some(cancelled)
                            }
                            None => None,
                        }
                    }
                    None => None,
                };
                Some(TaskAnswer::Cancel(cancelled))
            }
            _ => None,
        };
        Ok(admitted)
    }

    async fn create_session(&self, session: &SharedSession) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let ttl = ms(Duration::from_secs(session.ttl_secs)).max(1);
        let value = format!("{}|{ttl}|{}", crate::now_ms().saturating_add(ttl), encode(session)?);
        let set: Option<String> = redis::cmd("SET")
            .arg(self.session_key(&session.session_id))
            .arg(value)
            .arg("NX")
            .arg("PX")
            .arg(ttl.saturating_add(ms(self.cfg.closed_ttl)))
            .query_async(&mut conn)
            .await
            .map_err(|e| self.refused(e))?;
        Ok(set.is_some())
    }

    async fn close_session(&self, session_id: &str) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let ttl = u64::try_from(ms(self.cfg.closed_ttl).max(1)).unwrap_or(1);
        let _: i64 = self
            .scripts
            .close
            .key(self.session_key(session_id))
            .key(self.usage_key(session_id))
            .arg(CLOSED)
            .arg(ttl)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.refused(e))?;
        Ok(())
    }

    async fn claim_task(&self, key: &TaskKey, task: &SharedTask, lease: Duration) -> Result<TaskClaim, StoreError> {
        let mut conn = self.conn();
        let (record, lease_key) = self.task_keys(key);
        let claimed: i64 = self
            .scripts
            .claim
            .key(&record)
            .key(&lease_key)
            .arg(encode(task)?)
            .arg(&task.owner)
            .arg(ms(lease).max(1))
            .arg(ms(self.cfg.result_ttl).max(1))
            .arg(&self.scripts.tables.claim)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.refused(e))?;
        self.after_write();
        Ok(if claimed == 1 { TaskClaim::Claimed } else { TaskClaim::Taken })
    }

    async fn release_task(&self, key: &TaskKey, owner: &str, dedupe: Option<&ReplayClaim>) -> Result<(), StoreError> {
        let (record, lease_key) = self.task_keys(key);
        let entry = self.replay_key(Some(&key.session_id), dedupe.map_or("", |e| e.key.as_str()));
        let _: i64 = self
            .scripts
            .release
            .key(&record)
            .key(&lease_key)
            .key(self.usage_key(&key.session_id))
            .key(entry)
            .arg(owner)
            .arg(dedupe.map(|e| e.expires_at_ms.to_string()).unwrap_or_default())
            .arg(&self.scripts.tables.owner)
            .invoke_async(&mut self.conn())
            .await
            .map_err(|e| self.refused(e))?;
        Ok(())
    }

    async fn renew_leases(
        &self,
        owner: &str,
        keys: &[TaskKey],
        lease: Duration,
    ) -> Result<Vec<(TaskKey, SharedTask)>, StoreError> {
        let mut conn = self.conn();
        let mut lost = Vec::new();
        for key in keys {
            let (record, lease_key) = self.task_keys(key);
            let held: Option<String> = self
                .scripts
                .renew
                .key(&record)
                .key(&lease_key)
                .arg(owner)
                .arg(ms(lease).max(1))
                .arg(ms(self.cfg.result_ttl).max(1))
                .arg(&self.scripts.tables.owner)
                .invoke_async(&mut conn)
                .await
                .map_err(|e| self.refused(e))?;
            if let Some(text) = held {
                lost.push((key.clone(), decode(&text)?));
            }
        }
        Ok(lost)
    }

    async fn finish_task(&self, key: &TaskKey, task: &SharedTask) -> Result<TaskFinish, StoreError> {
        let mut conn = self.conn();
        let (record, lease_key) = self.task_keys(key);
        let cost = task.cost.sanitized();
        let answer: Vec<redis::Value> = self
            .scripts
            .finish
            .key(&record)
            .key(&lease_key)
            .key(self.session_key(&key.session_id))
            .key(self.usage_key(&key.session_id))
            .arg(encode(&crate::without_message_key(task))?)
            .arg(&task.owner)
            .arg(ms(self.cfg.result_ttl).max(1))
            .arg(if cost.is_zero() { String::new() } else { cost.tokens.min(i64::MAX as u64).to_string() })
            .arg(cost.cost_usd.to_string())
            .arg(crate::now_ms())
            .arg(&self.scripts.tables.end)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.refused(e))?;
        self.after_write();
        match answer.as_slice() {
            [redis::Value::Int(1)] => Ok(TaskFinish::Recorded),
            [redis::Value::Int(0), held] => {
                let held: String = redis::from_redis_value_ref(held).map_err(unavailable)?;
                Ok(TaskFinish::Refused(Box::new(decode(&held)?)))
            }
            other => Err(unavailable(format!("the finish script answered {other:?}"))),
        }
    }

    async fn task(&self, key: &TaskKey) -> Result<Option<SharedTask>, StoreError> {
        let mut conn = self.conn();
        let (record, lease_key) = self.task_keys(key);
        let (text, leased): (Option<String>, bool) =
            self.scripts.read.key(&record).key(&lease_key).invoke_async(&mut conn).await.map_err(unavailable)?;
        self.settle_read(key, text, leased).await
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
        let now = crate::now_ms();
        let ended = session_ids.iter().zip(values).filter_map(|(id, value)| {
            let value = value?;
            let how = if value == CLOSED {
                SessionLookup::Closed
            } else {
                // `<expiry ms>|...`: past the expiry, the key is the expired session's marker.
                let expiry: i64 = value.split('|').next()?.parse().ok()?;
                if expiry > now {
                    return None;
                }
                SessionLookup::Expired
            };
            Some((id.clone(), how))
        });
        Ok(ended.collect())
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
