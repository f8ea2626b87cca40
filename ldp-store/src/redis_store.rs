//! The Redis store, for replicas behind a load balancer.
//!
//! Keys start with `ldp:<delegate id>:` (several delegates can share one Redis), and every key of a session carries
//! the session id as its hash tag, `ldp:<ns>:{<session id>}:session|task:<id>|lease:<id>`, so on Redis Cluster all of
//! a session's keys live in one slot and the scripts that touch several of them run there. TTLs are Redis expiries
//! (`PX`): a session's key expires a marker time (`closed_ttl`) after its TTL without a message (in that time it is
//! looked up as expired, so every replica answers `SESSION_EXPIRED`), a lease key after the lease without renewal.
//! Replay entries are `ldp:<ns>:replay:{<message digest>}` (`SET NX PXAT`), global across principals (a captured
//! message replayed under another credential is still a replay), with each principal's share counted in a sorted
//! set `ldp:<ns>:replay-share:{<principal digest>}` scored by expiry.
//!
//! Each call goes through `redis`'s `ConnectionManager` (one multiplexed connection, reconnected in the background
//! after a failure) with its own response and connection timeouts; the runtime adds its own timeout on top.

use std::time::Duration;

use async_trait::async_trait;
use ldp_session::TaskKey;
use ldp_session::shared::{
    ReplayClaim, ReplayVerdict, SessionLookup, SharedSession, SharedTask, SharedTaskStatus, TaskClaim,
};
use ldp_session::store::{Store, StoreError};
use redis::aio::ConnectionManager;
use redis::{AsyncCommands, Script};

use crate::{OpenError, StoreConfig, corrupt, ms};

const BACKEND: &str = "redis";

/// The value of a closed session's key.
const CLOSED: &str = "closed";

/// The value of an expired session's key (kept as a marker until the key's own expiry).
const EXPIRED: &str = "expired";

/// Looks a session up (KEYS: its key; ARGV: now ms, marker ms). Its value is `<expiry ms>|<record>`: past the expiry
/// it is `expired`; live, its expiry moves to now + its TTL (read from the record) and the key lives a marker time
/// longer, and the record is returned; `closed`, or nil when absent.
const TOUCH: &str = r"
local v = redis.call('GET', KEYS[1])
if not v then return false end
if v == 'closed' then return v end
local bar = string.find(v, '|', 1, true)
if not bar then return false end
local now = tonumber(ARGV[1])
if tonumber(string.sub(v, 1, bar - 1)) <= now then return 'expired' end
local record = string.sub(v, bar + 1)
local ok, rec = pcall(cjson.decode, record)
if not ok or not rec.ttl_secs then return record end
local ttl = math.floor(rec.ttl_secs * 1000)
redis.call('SET', KEYS[1], string.format('%d|', now + ttl) .. record, 'PX', ttl + tonumber(ARGV[2]))
return record
";

/// Claims a task (KEYS: record, lease; ARGV: record, owner, lease ms, result ttl ms) by the rule of
/// `SharedTask::claimable`: a failed task may be claimed again, a completed one never, a running one only once its
/// lease key has expired.
const CLAIM: &str = r"
local v = redis.call('GET', KEYS[1])
if v then
  local ok, t = pcall(cjson.decode, v)
  if ok then
    if t.status == 'completed' then return 0 end
    if t.status == 'running' and redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
";

/// Extends a lease its owner still holds (KEYS: lease; ARGV: owner, lease ms).
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
";

/// Records how a task ended unless another owner claimed it since (KEYS: record, lease; ARGV: record, owner, ttl).
const FINISH: &str = r"
local v = redis.call('GET', KEYS[1])
if v then
  local ok, t = pcall(cjson.decode, v)
  if ok and t.owner ~= ARGV[2] then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
redis.call('DEL', KEYS[2])
return 1
";

/// Replaces a running task's record with its failure once its lease key is gone (KEYS: record, lease; ARGV: the
/// record as read, the failed record): the compare-and-set of a lapsed lease.
const LAPSE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
  return 1
end
return 0
";

/// Counts a fresh replay entry against its principal's share (KEYS: the share's sorted set; ARGV: entry, expiry ms,
/// the most entries, now ms): prunes entries past their expiry, refuses (0) when full, else adds (1).
const SHARE: &str = r"
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[4])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return 1
";

/// Shared state in Redis.
#[derive(Clone)]
pub struct RedisStore {
    cfg: StoreConfig,
    /// `ldp:<namespace>:`, braces removed from the namespace so that only the session id is a hash tag.
    prefix: String,
    conn: ConnectionManager,
    scripts: std::sync::Arc<Scripts>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

struct Scripts {
    touch: Script,
    claim: Script,
    renew: Script,
    finish: Script,
    lapse: Script,
    share: Script,
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable { backend: BACKEND, reason: e.to_string() }
}

/// How long one Redis command may take, and one connection attempt, inside the runtime's own timeout.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

impl RedisStore {
    /// Connects to `url` (`redis://HOST:PORT[/DB]`). The connection is made lazily and remade after failures, so a
    /// Redis that is down at start or later only makes calls fail (typed, retryable) until it is back.
    pub async fn open(url: &str, cfg: StoreConfig) -> Result<Self, OpenError> {
        let fail = |e: redis::RedisError| OpenError::Redis { url: url.to_owned(), reason: e.to_string() };
        let client = redis::Client::open(url).map_err(fail)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_response_timeout(Some(COMMAND_TIMEOUT))
            .set_connection_timeout(Some(COMMAND_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_secs(1));
        let conn = client.get_connection_manager_lazy(config).map_err(fail)?;
        let namespace: String = cfg.namespace.chars().filter(|c| !matches!(c, '{' | '}')).collect();
        let scripts = Scripts {
            touch: Script::new(TOUCH),
            claim: Script::new(CLAIM),
            renew: Script::new(RENEW),
            finish: Script::new(FINISH),
            lapse: Script::new(LAPSE),
            share: Script::new(SHARE),
        };
        Ok(Self { prefix: format!("ldp:{namespace}:"), cfg, conn, scripts: std::sync::Arc::new(scripts) })
    }

    fn session_key(&self, session_id: &str) -> String {
        format!("{}{{{session_id}}}:session", self.prefix)
    }

    fn task_keys(&self, key: &TaskKey) -> (String, String) {
        let base = format!("{}{{{}}}", self.prefix, key.session_id);
        (format!("{base}:task:{}", key.task_id), format!("{base}:lease:{}", key.task_id))
    }

    fn conn(&self) -> ConnectionManager {
        self.conn.clone()
    }
}

fn decode<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt(BACKEND, e))
}

fn encode<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| corrupt(BACKEND, e))
}

#[async_trait]
impl Store for RedisStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn claim_message(&self, claim: &ReplayClaim) -> Result<ReplayVerdict, StoreError> {
        let mut conn = self.conn();
        let key = format!("{}replay:{{{}}}", self.prefix, claim.key);
        let fresh: bool = redis::cmd("SET")
            .arg(&key)
            .arg(1)
            .arg("NX")
            .arg("PXAT")
            .arg(claim.expires_at_ms)
            .query_async::<Option<String>>(&mut conn)
            .await
            .map_err(unavailable)?
            .is_some();
        if !fresh {
            return Ok(ReplayVerdict::Seen);
        }
        let Some(max) = claim.max_per_principal else { return Ok(ReplayVerdict::Fresh) };
        let share = format!("{}replay-share:{{{}}}", self.prefix, claim.principal);
        let added: i64 = self
            .scripts
            .share
            .key(&share)
            .arg(&claim.key)
            .arg(claim.expires_at_ms)
            .arg(max)
            .arg(crate::now_ms())
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        if added == 0 {
            // Not counted, so not kept: the message is refused (retryably) and may come again.
            let _: i64 = conn.del(&key).await.map_err(unavailable)?;
            return Ok(ReplayVerdict::Full);
        }
        Ok(ReplayVerdict::Fresh)
    }

    async fn create_session(&self, session: &SharedSession) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let ttl = ms(Duration::from_secs(session.ttl_secs)).max(1);
        let value = format!("{}|{}", crate::now_ms().saturating_add(ttl), encode(session)?);
        let set: Option<String> = redis::cmd("SET")
            .arg(self.session_key(&session.session_id))
            .arg(value)
            .arg("NX")
            .arg("PX")
            .arg(ttl.saturating_add(ms(self.cfg.closed_ttl)))
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(set.is_some())
    }

    async fn touch_session(&self, session_id: &str) -> Result<SessionLookup, StoreError> {
        let mut conn = self.conn();
        let v: Option<String> = self
            .scripts
            .touch
            .key(self.session_key(session_id))
            .arg(crate::now_ms())
            .arg(ms(self.cfg.closed_ttl).max(1))
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        match v.as_deref() {
            None => Ok(SessionLookup::Unknown),
            Some(CLOSED) => Ok(SessionLookup::Closed),
            Some(EXPIRED) => Ok(SessionLookup::Expired),
            Some(text) => Ok(SessionLookup::Live(decode(text)?)),
        }
    }

    async fn close_session(&self, session_id: &str) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let ttl = u64::try_from(ms(self.cfg.closed_ttl).max(1)).unwrap_or(1);
        let _: () = conn.pset_ex(self.session_key(session_id), CLOSED, ttl).await.map_err(unavailable)?;
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
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(if claimed == 1 { TaskClaim::Claimed } else { TaskClaim::Taken })
    }

    async fn renew_leases(&self, owner: &str, keys: &[TaskKey], lease: Duration) -> Result<(), StoreError> {
        let mut conn = self.conn();
        for key in keys {
            let (_, lease_key) = self.task_keys(key);
            let _: i64 = self
                .scripts
                .renew
                .key(&lease_key)
                .arg(owner)
                .arg(ms(lease).max(1))
                .invoke_async(&mut conn)
                .await
                .map_err(unavailable)?;
        }
        Ok(())
    }

    async fn finish_task(&self, key: &TaskKey, task: &SharedTask) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let (record, lease_key) = self.task_keys(key);
        let _: i64 = self
            .scripts
            .finish
            .key(&record)
            .key(&lease_key)
            .arg(encode(task)?)
            .arg(&task.owner)
            .arg(ms(self.cfg.result_ttl).max(1))
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn task(&self, key: &TaskKey) -> Result<Option<SharedTask>, StoreError> {
        let mut conn = self.conn();
        let (record, lease_key) = self.task_keys(key);
        let (text, leased): (Option<String>, bool) =
            redis::pipe().atomic().get(&record).exists(&lease_key).query_async(&mut conn).await.map_err(unavailable)?;
        let Some(text) = text else { return Ok(None) };
        let task: SharedTask = decode(&text)?;
        if task.status != SharedTaskStatus::Running || leased {
            return Ok(Some(task));
        }
        let failed = task.lease_expired();
        let swapped: i64 = self
            .scripts
            .lapse
            .key(&record)
            .key(&lease_key)
            .arg(&text)
            .arg(encode(&failed)?)
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        if swapped == 1 {
            return Ok(Some(failed));
        }
        // Changed meanwhile (finished, or claimed again): read what it is now.
        let now: Option<String> = conn.get(&record).await.map_err(unavailable)?;
        now.as_deref().map(decode).transpose()
    }
}
