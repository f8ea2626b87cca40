//! The Lua scripts: each store operation that must be atomic, as one script run in the session's slot.
//!
//! A script cannot call the store's rules (`ldp_session::shared::rules`), so the rules' decisions over one task's
//! record come to it as tables the rules computed ([`Tables`]): the script only tells which state the record is in
//! ([`STATE`]) and looks the answer up.

use ldp_session::shared::rules;
use ldp_session::shared::{SharedTask, SharedTaskStatus};
use ldp_types::PayloadMode;

/// The Lua every script starts with: `state_of(record)`, the state of a task's record as the tables index it (0 no
/// record, 1 running, 2 completed, 3 failed, 4 unreadable) with the record decoded, and `allowed(table, index)`.
pub(super) const STATE: &str = r"
local function state_of(v)
  if not v then return 0, nil end
  local ok, t = pcall(cjson.decode, v)
  if not ok or type(t) ~= 'table' then return 4, nil end
  return ({running = 1, completed = 2, failed = 3})[t.status] or 4, t
end
local function allowed(table, index)
  return string.sub(table, index + 1, index + 1) == '1'
end
";

/// The rules' decisions over one task's record, as `0`/`1` strings indexed `state * 2 + flag` (the states of
/// [`STATE`]), computed once from `ldp_session::shared::rules` and sent with each script call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tables {
    /// Whether a claim may take the task id, flag: its lease key exists ([`rules::claimable_record`]).
    pub(super) claim: String,
    /// Whether the caller may renew the task's lease or take its claim back, flag: the record is the caller's
    /// ([`rules::runs_under`]).
    pub(super) owner: String,
    /// Whether the caller's end of the task is recorded, flag: the record is the caller's ([`rules::ended`]).
    pub(super) end: String,
}

impl Tables {
    pub(super) fn new() -> Self {
        // A record in each state the scripts tell apart (`None`: no record, or one that does not decode).
        let held = |state: usize| {
            let status = [None, Some(SharedTaskStatus::Running), Some(SharedTaskStatus::Completed)]
                .into_iter()
                .chain([Some(SharedTaskStatus::Failed), None])
                .nth(state)
                .flatten();
            status.map(|status| {
                let mut task = SharedTask::running("owner", PayloadMode::Text);
                task.status = status;
                task
            })
        };
        let table = |decide: &dyn Fn(usize, Option<&SharedTask>, bool) -> bool| -> String {
            (0..5)
                .flat_map(|state| [false, true].map(|flag| (state, flag)))
                .map(|(state, flag)| if decide(state, held(state).as_ref(), flag) { '1' } else { '0' })
                .collect()
        };
        let caller = |flag: bool| if flag { "owner" } else { "another" };
        let end = |flag: bool| SharedTask::running(caller(flag), PayloadMode::Text);
        Self {
            claim: table(&|_, held, leased| rules::claimable_record(held, leased)),
            owner: table(&|_, held, mine| held.is_some_and(|task| rules::runs_under(task, caller(mine)))),
            // An unreadable record refuses an end (answered as corrupt), as no record of another's may be overwritten.
            end: table(&|state, held, mine| state != 4 && rules::ended(held, &end(mine)).is_ok()),
        }
    }
}

/// One message's admission, every step in one script (KEYS: the replay entry, then, for a message in a session, the
/// session, the task record, the task lease and the session's usage, all in the session's slot; ARGV: now ms, marker
/// ms, the replay entry's expiry ms or '', the task step ('', claim, read, cancel), the claim's record, owner, lease
/// ms, result TTL ms, task limit or '', '1' to answer the session's usage or '', the claiming message's key or '',
/// '1' when the claim stands in for the replay entry or '', the claim table, [`Tables::claim`]). Replies `{verdict}` or `{'fresh', session}` or `{'fresh', session, task...}`:
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
/// - claim: `2` at the task limit, counted in the usage hash (`t`); else by the claim table (the rules'
///   `claimable_record` for the record's state and whether its lease key exists):
///   `1` claimed (counted under a limit), `0` taken; then, when asked, the usage before the claim (tasks, tokens,
///   cost; the hash is read only under a limit or when asked);
/// - read and cancel: the record and whether its lease key exists (the caller fails a lapsed lease, or cancels a
///   live one, with a compare-and-set: `LAPSE`, `CANCEL`).
pub(super) const ADMIT: &str = r"
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
  if not allowed(ARGV[13], state_of(t) * 2 + redis.call('EXISTS', KEYS[4])) then return answer('0') end
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
pub(super) const ACCOUNT: &str = r"
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

/// Claims a task outside an admission (KEYS: record, lease; ARGV: record, owner, lease ms, result ttl ms, the claim
/// table), by the same table as `ADMIT`.
pub(super) const CLAIM: &str = r"
local v = redis.call('GET', KEYS[1])
if not allowed(ARGV[5], state_of(v) * 2 + redis.call('EXISTS', KEYS[2])) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
";

/// Takes back a claim of a task that never ran (KEYS: record, lease, the session's usage, the dedupe entry the claim
/// stood in for or a placeholder; ARGV: owner, the entry's expiry ms or '', the owner table): deleted while it runs
/// under the owner, and no longer counted against the session's task limit; the entry written first.
pub(super) const RELEASE: &str = r"
if ARGV[2] ~= '' then redis.call('SET', KEYS[4], 1, 'PXAT', ARGV[2]) end
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local state, t = state_of(v)
if allowed(ARGV[3], state * 2 + (t and t.owner == ARGV[1] and 1 or 0)) then
  redis.call('DEL', KEYS[1], KEYS[2])
  if (tonumber(redis.call('HGET', KEYS[3], 't') or '0') or 0) > 0 then redis.call('HINCRBY', KEYS[3], 't', -1) end
  return 1
end
return 0
";

/// Extends a lease while the task is running under its owner (KEYS: record, lease; ARGV: owner, lease ms, result TTL
/// ms, the owner table), and the record's life to a result TTL from now, so that a task running longer than the TTL keeps its record
/// (and its id); otherwise replies the record (cancelled through another replica, failed or taken over after a
/// lapse), nil when gone.
pub(super) const RENEW: &str = r"
local v = redis.call('GET', KEYS[1])
if not v then return false end
local state, t = state_of(v)
if allowed(ARGV[4], state * 2 + (t and t.owner == ARGV[1] and 1 or 0)) then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return false
end
return v
";

/// A task's record and whether its lease key exists, read at one instant (KEYS: record, lease). A script rather than
/// `MULTI`: a full Redis (`maxmemory`) refuses every command queued in a transaction, reads too, and a status query
/// must still be answered then.
pub(super) const READ: &str = r"
return {redis.call('GET', KEYS[1]), redis.call('EXISTS', KEYS[2])}
";

/// Marks a session closed and deletes its usage (KEYS: session, usage; ARGV: the closed marker, its TTL ms). The
/// delete goes first: Redis refuses a script's first write when it is full (`maxmemory`), and a close must still end
/// the session everywhere then.
pub(super) const CLOSE: &str = r"
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
";

/// Records how a task ended and releases its lease, only while it is running under the owner or absent (KEYS: record,
/// lease, session, the session's usage; ARGV: record, owner, ttl, tokens spent or '' (nothing spent), cost spent, now
/// ms, the end table). What the task spent is added to the usage hash (`k`, `c`) while the session is live, the hash expiring with the
/// session's key. The dedupe entry of the message that claimed the task (`message_key`, `message_until_ms`) stays in
/// the record: put first in the new one, which the caller sends without it. The lease goes before the record is
/// written: Redis refuses a script's first write when it is full (`maxmemory`), and a delete first lets the result be
/// recorded even then, as the other backends always record one (room is then made from the oldest ended records,
/// `room.rs`). Answers `{1}` when recorded, `{0, record}` with the record it holds otherwise (decoded by the caller,
/// which reports one that is not JSON as corrupt).
pub(super) const FINISH: &str = r"
local v = redis.call('GET', KEYS[1])
local record = ARGV[1]
local state, t = state_of(v)
if not allowed(ARGV[7], state * 2 + (t and t.owner == ARGV[2] and 1 or 0)) then return {0, v} end
if t then
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
pub(super) const LAPSE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
";

/// Cancels a running task whose lease is live (KEYS: record, lease; ARGV: the record as read, the cancelled record,
/// result TTL ms): the record is replaced (kept a result TTL from now) and the lease dropped, so its owner finds it
/// at its next renewal.
pub(super) const CANCEL: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  redis.call('DEL', KEYS[2])
  return 1
end
return 0
";
