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
use ldp_session::shared::{
    Admission, Admitted, ReplayClaim, ReplayVerdict, SessionLookup, SessionUsage, SharedSession, SharedTask,
    SharedTaskStatus, TaskAnswer, TaskClaim, TaskFinish, TaskStep,
};
use ldp_session::store::{Store, StoreError};
use redis::aio::ConnectionManager;
use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{AsyncCommands, Script};

use crate::{OpenError, StoreConfig, corrupt, ms};

mod room;
pub use room::RoomPass;

const BACKEND: &str = "redis";

/// The value of a closed session's key.
const CLOSED: &str = "closed";

/// The value of an expired session's key (kept as a marker until the key's own expiry).
const EXPIRED: &str = "expired";

/// What the admission script answers for a session's value it cannot read.
const CORRUPT: &str = "corrupt";

/// One message's admission, every step in one script (KEYS: the replay entry, then, for a message in a session, the
/// session, the task record, the task lease and the session's usage, all in the session's slot; ARGV: now ms, marker
/// ms, the replay entry's expiry ms or '', the task step ('', claim, read, cancel), the claim's record, owner, lease
/// ms, result TTL ms, task limit or '', '1' to answer the session's usage or '', the claiming message's key or '',
/// '1' when the claim stands in for the replay entry or ''). Replies `{verdict}` or `{'fresh', session}` or `{'fresh', session, task...}`:
///
/// - the replay entry: `SET NX PXAT` (present: `seen`, and nothing else runs); when the claim stands in for it (an
///   unsigned TASK_SUBMIT's dedupe entry), only looked up, as an entry and in the task's record (`message_key`
///   until `message_until_ms`), and written wherever no claim is made (the session not live, the limit reached,
///   the task taken);
/// - the session, whose value is `<expiry ms>|<TTL ms>|<record>` (so the script need not decode the record; a
///   value of the older `<expiry ms>|<record>` form has its TTL read from the record): past the expiry it is
///   `expired`; live, the record is the reply, and when its expiry is short of now + its TTL, the expiry is written
///   ahead to now + its TTL + a tenth of the TTL (at most a second) and the key lives a marker time longer, so a busy
///   session's value is rewritten about once a second rather than by every message (as the SQLite store does: the
///   session lives that much longer at most, never shorter); `closed`, or nil when absent, or `corrupt` for a value
///   of neither form (answered `Corrupt`, not retryable, as the other backends answer a record they cannot read,
///   rather than a script error answered `Unavailable`, whose retry would meet the replay entry already written);
///   not live: nothing else runs;
/// - claim: `2` at the task limit, counted in the usage hash (`t`); else by the rule of `SharedTask::claimable` (a
///   failed task may be claimed again, a completed one never, a running one only once its lease key has expired,
///   and an id with no record but a live lease key not at all):
///   `1` claimed (counted under a limit), `0` taken; then, when asked, the usage before the claim (tasks, tokens,
///   cost; the hash is read only under a limit or when asked);
/// - read and cancel: the record and whether its lease key exists (the caller fails a lapsed lease, or cancels a
///   live one, with a compare-and-set: `LAPSE`, `CANCEL`).
const ADMIT: &str = r"
local now = tonumber(ARGV[1])
local deferred = ARGV[12] == '1'
if ARGV[3] ~= '' then
  if deferred then
    if redis.call('EXISTS', KEYS[1]) == 1 then return {'seen'} end
    local held = redis.call('GET', KEYS[3])
    if held then
      local ok, t = pcall(cjson.decode, held)
      if ok and type(t) == 'table' and t.message_key == ARGV[11] and (tonumber(t.message_until_ms) or 0) > now then
        return {'seen'}
      end
    end
  elseif not redis.call('SET', KEYS[1], 1, 'NX', 'PXAT', ARGV[3]) then
    return {'seen'}
  end
end
local function unclaimed()
  if deferred then redis.call('SET', KEYS[1], 1, 'PXAT', ARGV[3]) end
end
if #KEYS < 2 then return {'fresh'} end
local v = redis.call('GET', KEYS[2])
if not v then unclaimed() return {'fresh', false} end
if v == 'closed' then unclaimed() return {'fresh', v} end
local bar = string.find(v, '|', 1, true)
local stored = bar and tonumber(string.sub(v, 1, bar - 1))
if not stored then unclaimed() return {'fresh', 'corrupt'} end
if stored <= now then unclaimed() return {'fresh', 'expired'} end
local bar2 = string.find(v, '|', bar + 1, true)
local ttl = bar2 and tonumber(string.sub(v, bar + 1, bar2 - 1))
local record
if ttl then
  record = string.sub(v, bar2 + 1)
else
  record = string.sub(v, bar + 1)
  local ok, rec = pcall(cjson.decode, record)
  if ok and type(rec) == 'table' and tonumber(rec.ttl_secs) then ttl = math.floor(tonumber(rec.ttl_secs) * 1000) end
end
if ttl and stored < now + ttl then
  local ahead = math.min(math.floor(ttl / 10), 1000)
  local expiry = now + ttl + ahead
  redis.call('SET', KEYS[2], string.format('%d|%d|', expiry, ttl) .. record, 'PX', expiry - now + tonumber(ARGV[2]))
  redis.call('PEXPIRE', KEYS[5], expiry - now + tonumber(ARGV[2]))
end
local step = ARGV[4]
if step == 'claim' then
  local u = {false, false, false}
  if ARGV[9] ~= '' or ARGV[10] ~= '' then u = redis.call('HMGET', KEYS[5], 't', 'k', 'c') end
  local tasks = tonumber(u[1] or '0') or 0
  local function answer(code)
    if code == '0' or code == '2' then unclaimed() end
    if ARGV[10] == '' then return {'fresh', record, code} end
    return {'fresh', record, code, tostring(tasks), u[2] or '0', u[3] or '0'}
  end
  if ARGV[9] ~= '' and tasks >= tonumber(ARGV[9]) then return answer('2') end
  local t = redis.call('GET', KEYS[3])
  if t then
    local ok2, task = pcall(cjson.decode, t)
    if ok2 then
      if task.status == 'completed' then return answer('0') end
      if task.status == 'running' and redis.call('EXISTS', KEYS[4]) == 1 then return answer('0') end
    end
  elseif redis.call('EXISTS', KEYS[4]) == 1 then
    return answer('0')
  end
  if deferred then
    -- The dedupe entries records stand for must outlive them: the one of a record replaced (a failed task submitted
    -- again), and the new one's when it lasts longer than the record will. Both keys are KEYS[1] with its message
    -- key swapped (same slot).
    if t then
      local decoded, old = pcall(cjson.decode, t)
      if decoded and type(old) == 'table' and type(old.message_key) == 'string' and old.message_key ~= ARGV[11]
        and (tonumber(old.message_until_ms) or 0) > now then
        local base = string.sub(KEYS[1], 1, #KEYS[1] - #ARGV[11])
        redis.call('SET', base .. old.message_key, 1, 'PXAT', string.format('%d', old.message_until_ms))
      end
    end
    if tonumber(ARGV[3]) > now + tonumber(ARGV[8]) then unclaimed() end
  end
  redis.call('SET', KEYS[3], ARGV[5], 'PX', ARGV[8])
  redis.call('SET', KEYS[4], ARGV[6], 'PX', ARGV[7])
  if ARGV[9] ~= '' then
    redis.call('HINCRBY', KEYS[5], 't', 1)
    redis.call('PEXPIRE', KEYS[5], redis.call('PTTL', KEYS[2]))
  end
  return answer('1')
end
if step == 'read' or step == 'cancel' then
  local t = redis.call('GET', KEYS[3])
  if not t then return {'fresh', record, false} end
  return {'fresh', record, t, tostring(redis.call('EXISTS', KEYS[4]))}
end
return {'fresh', record}
";

/// Counts a signed message's replay entry against its principal's share and the window's total, both sorted sets
/// scored by expiry in one slot (KEYS: share, total; ARGV: entry, expiry ms, the most per principal or '', the most in
/// total or '', now ms): prunes entries past their expiry; `1` counted, or counted already under any principal (a
/// replay, which the admission then refuses `seen`, as the other backends do, without counting it against the
/// replaying principal's share), `0` the share is full (or as large as the room the window has left: the rule of
/// `ldp_session::replay_room`, which the other backends call), `2` the total is.
const ACCOUNT: &str = r"
local now = ARGV[5]
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 1 end
local held = redis.call('ZCARD', KEYS[1])
if ARGV[3] ~= '' and held >= tonumber(ARGV[3]) then return 0 end
if ARGV[4] ~= '' then
  local max = tonumber(ARGV[4])
  local total = redis.call('ZCARD', KEYS[2])
  if total >= max then return 2 end
  if held >= max - total then return 0 end
end
for i = 1, 2 do
  redis.call('ZADD', KEYS[i], ARGV[2], ARGV[1])
  local last = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[i], last[2])
end
return 1
";

/// Claims a task outside an admission (KEYS: record, lease; ARGV: record, owner, lease ms, result ttl ms), by the
/// same rule as `ADMIT`.
const CLAIM: &str = r"
local v = redis.call('GET', KEYS[1])
if v then
  local ok, t = pcall(cjson.decode, v)
  if ok then
    if t.status == 'completed' then return 0 end
    if t.status == 'running' and redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
  end
elseif redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
";

/// Takes back a claim of a task that never ran (KEYS: record, lease, the session's usage, the dedupe entry the claim
/// stood in for or a placeholder; ARGV: owner, the entry's expiry ms or ''): deleted while it is the owner's and
/// running, and no longer counted against the session's task limit; the entry written first.
const RELEASE: &str = r"
if ARGV[2] ~= '' then redis.call('SET', KEYS[4], 1, 'PXAT', ARGV[2]) end
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local ok, t = pcall(cjson.decode, v)
if ok and t.owner == ARGV[1] and t.status == 'running' then
  redis.call('DEL', KEYS[1], KEYS[2])
  if (tonumber(redis.call('HGET', KEYS[3], 't') or '0') or 0) > 0 then redis.call('HINCRBY', KEYS[3], 't', -1) end
  return 1
end
return 0
";

/// Extends a lease while the task is running under its owner (KEYS: record, lease; ARGV: owner, lease ms, result TTL
/// ms), and the record's life to a result TTL from now, so that a task running longer than the TTL keeps its record
/// (and its id); otherwise replies the record (cancelled through another replica, failed or taken over after a
/// lapse), nil when gone.
const RENEW: &str = r"
local v = redis.call('GET', KEYS[1])
if not v then return false end
local ok, t = pcall(cjson.decode, v)
if ok and t.owner == ARGV[1] and t.status == 'running' then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return false
end
return v
";

/// A task's record and whether its lease key exists, read at one instant (KEYS: record, lease). A script rather than
/// `MULTI`: a full Redis (`maxmemory`) refuses every command queued in a transaction, reads too, and a status query
/// must still be answered then.
const READ: &str = r"
return {redis.call('GET', KEYS[1]), redis.call('EXISTS', KEYS[2])}
";

/// Marks a session closed and deletes its usage (KEYS: session, usage; ARGV: the closed marker, its TTL ms). The
/// delete goes first: Redis refuses a script's first write when it is full (`maxmemory`), and a close must still end
/// the session everywhere then.
const CLOSE: &str = r"
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
";

/// Records how a task ended and releases its lease, only while it is running under the owner or absent (KEYS: record,
/// lease, session, the session's usage; ARGV: record, owner, ttl, tokens spent or '' (nothing spent), cost spent, now
/// ms). What the task spent is added to the usage hash (`k`, `c`) while the session is live, the hash expiring with the
/// session's key. The dedupe entry of the message that claimed the task (`message_key`, `message_until_ms`) stays in
/// the record: put first in the new one, which the caller sends without it. The lease goes before the record is
/// written: Redis refuses a script's first write when it is full (`maxmemory`), and a delete first lets the result be
/// recorded even then, as the other backends always record one (room is then made from the oldest ended records,
/// `room.rs`). Answers `{1}` when recorded, `{0, record}` with the record it holds otherwise (decoded by the caller,
/// which reports one that is not JSON as corrupt).
const FINISH: &str = r"
local v = redis.call('GET', KEYS[1])
local record = ARGV[1]
if v then
  local ok, t = pcall(cjson.decode, v)
  if not ok or t.owner ~= ARGV[2] or t.status ~= 'running' then return {0, v} end
  if type(t.message_key) == 'string' then
    local until_ms = string.format('%d', tonumber(t.message_until_ms) or 0)
    record = '{\034message_key\034:' .. cjson.encode(t.message_key) .. ',\034message_until_ms\034:' .. until_ms
      .. ',' .. string.sub(record, 2)
  end
end
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[1], record, 'PX', ARGV[3])
if ARGV[4] ~= '' then
  local s = redis.call('GET', KEYS[3])
  local bar = s and string.find(s, '|', 1, true)
  if bar and (tonumber(string.sub(s, 1, bar - 1)) or 0) > tonumber(ARGV[6]) then
    local r = redis.pcall('HINCRBY', KEYS[4], 'k', ARGV[4])
    if type(r) == 'table' and r.err then redis.call('HSET', KEYS[4], 'k', '9223372036854775807') end
    redis.pcall('HINCRBYFLOAT', KEYS[4], 'c', ARGV[5])
    redis.call('PEXPIRE', KEYS[4], redis.call('PTTL', KEYS[3]))
  end
end
return {1}
";

/// Replaces a running task's record with its failure once its lease key is gone (KEYS: record, lease; ARGV: the
/// record as read, the failed record, result TTL ms): the compare-and-set of a lapsed lease. The failure is kept a
/// result TTL from now, as the other backends keep it.
const LAPSE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
";

/// Cancels a running task whose lease is live (KEYS: record, lease; ARGV: the record as read, the cancelled record,
/// result TTL ms): the record is replaced (kept a result TTL from now) and the lease dropped, so its owner finds it
/// at its next renewal.
const CANCEL: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  redis.call('DEL', KEYS[2])
  return 1
end
return 0
";

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

/// How long one Redis command may take, and one connection attempt, inside the runtime's own timeout.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// How the store reaches Redis: one server (or a primary behind a proxy), or a cluster, whose client sends each
/// command to the node owning its keys' slot (every script's keys share one slot, see the module's notes).
#[derive(Clone)]
enum Connection {
    Node(ConnectionManager),
    Cluster(std::sync::Arc<ClusterLink>),
    Sentinel(std::sync::Arc<SentinelLink>),
}

/// A cluster connection, made on first use and kept: a cluster that cannot be reached at start is no error, as a
/// single server that is down is not. Once made, the client follows the cluster's changes itself (slots moved,
/// nodes failed over).
struct ClusterLink {
    client: ClusterClient,
    conn: tokio::sync::Mutex<Option<ClusterConnection>>,
}

impl ClusterLink {
    async fn connection(&self) -> redis::RedisResult<ClusterConnection> {
        let mut held = self.conn.lock().await;
        if let Some(conn) = held.as_ref() {
            return Ok(conn.clone());
        }
        let made = tokio::time::timeout(COMMAND_TIMEOUT, self.client.get_async_connection())
            .await
            .map_err(|_| timed_out())??;
        *held = Some(made.clone());
        Ok(made)
    }
}

/// The error of a connection attempt that outlasted [`COMMAND_TIMEOUT`]: a timeout, retryable as the server's own are.
fn timed_out() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))
}

/// The primary that Redis Sentinels name for a service, connected to on first use and kept until a call finds it
/// gone (the connection failed) or demoted (`READONLY`: a failover made it a replica), or until the sentinels name
/// another (asked every [`SENTINEL_CHECK`] by a task of the store's, `SentinelLink::watch`): after a failover the old
/// primary may take writes for a while before the sentinels demote it, and a full resync then drops them. The next
/// call asks the sentinels again, and `redis` checks that the node they name says it is the primary (`ROLE`) before
/// it is used. Calls made while no primary can be reached fail (typed, retryable) without each asking the
/// sentinels: one asks at a time, and not again for [`SENTINEL_RETRY`] after a failed attempt.
struct SentinelLink {
    client: tokio::sync::Mutex<SentinelClient>,
    /// The connection and its generation (so that a failure drops only the connection it happened on).
    conn: tokio::sync::Mutex<SentinelConn>,
}

#[derive(Default)]
struct SentinelConn {
    /// The connection, its generation, and the address of the primary it goes to.
    current: Option<(u64, MultiplexedConnection, redis::ConnectionAddr)>,
    generation: u64,
    /// When the last attempt to find and reach the primary failed, and why.
    failed: Option<(std::time::Instant, redis::RedisError)>,
}

/// How long after a failed attempt to reach the primary calls fail at once rather than ask the sentinels again.
const SENTINEL_RETRY: Duration = Duration::from_millis(200);

/// How often the sentinels are asked which node is the primary while a connection is in use.
const SENTINEL_CHECK: Duration = Duration::from_secs(1);

impl SentinelLink {
    async fn connection(&self) -> redis::RedisResult<(u64, MultiplexedConnection)> {
        let mut held = self.conn.lock().await;
        if let Some((generation, conn, _)) = held.current.as_ref() {
            return Ok((*generation, conn.clone()));
        }
        if let Some((at, error)) = held.failed.as_ref()
            && at.elapsed() < SENTINEL_RETRY
        {
            return Err(error.clone());
        }
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(COMMAND_TIMEOUT))
            .set_response_timeout(Some(COMMAND_TIMEOUT));
        let made = tokio::time::timeout(COMMAND_TIMEOUT, async {
            let client = self.named().await?;
            let primary = client.get_connection_info().addr().clone();
            Ok((client.get_multiplexed_async_connection_with_config(&config).await?, primary))
        })
        .await
        .map_err(|_| timed_out())
        .and_then(|made| made);
        match made {
            Ok((conn, primary)) => {
                held.generation += 1;
                held.current = Some((held.generation, conn.clone(), primary));
                held.failed = None;
                Ok((held.generation, conn))
            }
            Err(e) => {
                held.failed = Some((std::time::Instant::now(), e.clone()));
                Err(e)
            }
        }
    }

    /// Starts the task that asks the sentinels every [`SENTINEL_CHECK`] which node is the primary, and drops the
    /// connection when they name another than the one it goes to. It ends when the store is dropped.
    fn watch(link: &std::sync::Arc<Self>) {
        let link = std::sync::Arc::downgrade(link);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(SENTINEL_CHECK);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(link) = link.upgrade() else { return };
                if link.conn.lock().await.current.is_none() {
                    continue;
                }
                // Sentinels that cannot say keep the connection as it is: calls judge it themselves.
                let Ok(Ok(named)) = tokio::time::timeout(COMMAND_TIMEOUT, link.named()).await else { continue };
                let named = named.get_connection_info().addr().clone();
                let mut held = link.conn.lock().await;
                if held.current.as_ref().is_some_and(|(_, _, primary)| *primary != named) {
                    tracing::warn!(primary = %named, "the Redis sentinels name another primary; reconnecting");
                    held.current = None;
                }
            }
        });
    }

    /// A client for the primary the sentinels name now (its `ROLE` checked by `redis`).
    async fn named(&self) -> redis::RedisResult<redis::Client> {
        self.client.lock().await.async_get_client().await
    }

    /// Drops the connection of `generation` when `outcome` says its node is no longer the primary to use.
    async fn judge<T>(&self, generation: u64, outcome: redis::RedisResult<T>) -> redis::RedisResult<T> {
        if let Err(e) = &outcome
            && (unreachable(e) || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly))
        {
            let mut held = self.conn.lock().await;
            if held.current.as_ref().is_some_and(|(g, _, _)| *g == generation) {
                held.current = None;
            }
        }
        outcome
    }
}

impl redis::aio::ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Self::Node(conn) => conn.req_packed_command(cmd),
            Self::Cluster(link) => Box::pin(async move { link.connection().await?.req_packed_command(cmd).await }),
            Self::Sentinel(link) => Box::pin(async move {
                let (generation, mut conn) = link.connection().await?;
                link.judge(generation, conn.req_packed_command(cmd).await).await
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Self::Node(conn) => conn.req_packed_commands(pipeline, offset, count),
            Self::Cluster(link) => {
                Box::pin(async move { link.connection().await?.req_packed_commands(pipeline, offset, count).await })
            }
            Self::Sentinel(link) => Box::pin(async move {
                let (generation, mut conn) = link.connection().await?;
                link.judge(generation, conn.req_packed_commands(pipeline, offset, count).await).await
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Node(conn) => conn.get_db(),
            Self::Cluster(_) | Self::Sentinel(_) => 0,
        }
    }
}

/// The sentinel client for a `redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]` URL: the
/// sentinels at the hosts, the primary of `SERVICE` with the URL's user, password and database. Sentinels that want a
/// password of their own (`requirepass` in their configuration) get `?sentinel_password=...` (and
/// `sentinel_user=...`), percent-encoded; any other parameter is refused, so that a mistyped one is not ignored.
/// `rediss+sentinel://` speaks TLS to the sentinels and to the primary alike, both checked against the system's roots
/// or [`StoreConfig::redis_tls`]'s CA, and both shown its client certificate. `None` for any other URL.
fn sentinel_client(url: &str, cfg: &StoreConfig) -> Option<redis::RedisResult<SentinelClient>> {
    let parsed = crate::HostListUrl::parse(url)?;
    let node_scheme = parsed.node_scheme("sentinel")?;
    let invalid = |reason: String| {
        Some(Err(redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "invalid sentinel URL", reason))))
    };
    let mut path = parsed.path().trim_start_matches('/').split('/');
    let Some(service) = path.next().filter(|s| !s.is_empty()) else {
        return invalid("a sentinel URL names its service: redis+sentinel://HOST:PORT/SERVICE[/DB]".to_owned());
    };
    let db = match path.next().filter(|d| !d.is_empty()).map(str::parse::<u32>) {
        None => 0,
        Some(Ok(db)) => db,
        Some(Err(_)) => return invalid("the database after the service is a number: /SERVICE/DB".to_owned()),
    };
    if path.any(|rest| !rest.is_empty()) {
        return invalid("a sentinel URL's path is /SERVICE[/DB], nothing more".to_owned());
    }
    let (mut sentinel_user, mut sentinel_password) = (None, None);
    for (key, value) in url::form_urlencoded::parse(parsed.query().unwrap_or_default().as_bytes()) {
        match &*key {
            "sentinel_user" => sentinel_user = Some(value.into_owned()),
            "sentinel_password" => sentinel_password = Some(value.into_owned()),
            // The key only: a mistyped password parameter's value may be a password.
            other => {
                return invalid(format!(
                    "a sentinel URL takes sentinel_user and sentinel_password as parameters, not {other:?}"
                ));
            }
        }
    }
    // The credentials as `redis` reads them in a `redis://` URL (percent-decoded), for the primary only.
    let credentials = parsed.credentials.map(|c| format!("{c}@")).unwrap_or_default();
    let primary = match redis::IntoConnectionInfo::into_connection_info(format!("redis://{credentials}127.0.0.1")) {
        Ok(info) => info.redis_settings().clone(),
        Err(e) => return Some(Err(e)),
    };
    let mut sentinels = Vec::new();
    for host in parsed.hosts.split(',').filter(|h| !h.is_empty()) {
        match redis::IntoConnectionInfo::into_connection_info(format!("{node_scheme}{host}")) {
            Ok(info) => sentinels.push(info.addr().clone()),
            Err(e) => return Some(Err(e)),
        }
    }
    let built = SentinelClientBuilder::new(sentinels, service, SentinelServerType::Master).map(|builder| {
        let mut builder = builder.set_client_to_redis_db(i64::from(db));
        if let Some(user) = primary.username() {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = primary.password() {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(user) = &sentinel_user {
            builder = builder.set_client_to_sentinel_username(user);
        }
        if let Some(password) = &sentinel_password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if node_scheme == "rediss://" {
            // The sentinels' addresses are TLS ones already (from their `rediss://` form).
            builder = builder.set_client_to_redis_tls_mode(redis::TlsMode::Secure);
            if let Some(tls) = &cfg.redis_tls {
                builder = builder
                    .set_client_to_sentinel_certificates(tls_certificates(tls))
                    .set_client_to_redis_certificates(tls_certificates(tls));
            }
        }
        builder
    });
    Some(built.and_then(SentinelClientBuilder::build))
}

/// What `redis` presents and trusts over TLS, from [`StoreConfig::redis_tls`].
fn tls_certificates(tls: &crate::RedisTls) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: tls
            .client_pem
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig { client_cert: cert.clone(), client_key: key.clone() }),
        root_cert: tls.ca_pem.clone(),
    }
}

/// The cluster client for a `redis+cluster://` or `rediss+cluster://` URL: each node of the list as a `redis://`
/// (`rediss://`) URL with the list's credentials. `None` for any other URL.
fn cluster_client(url: &str, cfg: &StoreConfig) -> Option<redis::RedisResult<ClusterClient>> {
    let cluster = crate::HostListUrl::parse(url)?;
    let node_scheme = cluster.node_scheme("cluster")?;
    let credentials = cluster.credentials.map(|c| format!("{c}@")).unwrap_or_default();
    let nodes: Vec<String> =
        cluster.hosts.split(',').filter(|h| !h.is_empty()).map(|h| format!("{node_scheme}{credentials}{h}")).collect();
    let mut builder =
        ClusterClient::builder(nodes).connection_timeout(COMMAND_TIMEOUT).response_timeout(COMMAND_TIMEOUT).retries(1);
    if let Some(tls) = cfg.redis_tls.as_ref().filter(|_| node_scheme == "rediss://") {
        builder = builder.certs(tls_certificates(tls));
    }
    Some(builder.build())
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
            admit: Script::new(ADMIT),
            account: Script::new(ACCOUNT),
            claim: Script::new(CLAIM),
            release: Script::new(RELEASE),
            renew: Script::new(RENEW),
            finish: Script::new(FINISH),
            lapse: Script::new(LAPSE),
            cancel: Script::new(CANCEL),
            drop_ended: Script::new(room::DROP_ENDED),
            read: Script::new(READ),
            close: Script::new(CLOSE),
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
                    .arg(if dedupe.is_some() { "1" } else { "" });
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
            TaskStep::Read(key) => Some(TaskAnswer::Read(match record {
                None => None,
                Some(text) => {
                    let task: SharedTask = decode(&text)?;
                    if task.status != SharedTaskStatus::Running || leased {
                        Some(task)
                    } else {
                        let failed = task.lease_expired();
                        if self.swap(&self.scripts.lapse, key, &text, &failed).await? {
                            Some(failed)
                        } else {
                            // Changed meanwhile (finished, or claimed again): read what it is now.
                            self.task(key).await?
                        }
                    }
                }
            })),
            TaskStep::Cancel(key) => {
                let cancelled = match record {
                    Some(text) if leased => {
                        let task: SharedTask = decode(&text)?;
                        let cancelled = task.cancelled();
                        let running = task.status == SharedTaskStatus::Running;
                        (running && self.swap(&self.scripts.cancel, key, &text, &cancelled).await?).then_some(cancelled)
                    }
                    _ => None,
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
        let Some(text) = text else { return Ok(None) };
        let task: SharedTask = decode(&text)?;
        if task.status != SharedTaskStatus::Running || leased {
            return Ok(Some(task));
        }
        let failed = task.lease_expired();
        if self.swap(&self.scripts.lapse, key, &text, &failed).await? {
            return Ok(Some(failed));
        }
        // Changed meanwhile (finished, or claimed again): read what it is now.
        let now: Option<String> = conn.get(&record).await.map_err(unavailable)?;
        now.as_deref().map(decode).transpose()
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
