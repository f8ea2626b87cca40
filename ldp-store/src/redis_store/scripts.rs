//! The Lua scripts: Redis's atomic primitives. None holds a rule of the store: the rules run in Rust
//! (`ldp_session::shared::rules`, see `records.rs`) and [`COMMIT`] writes what they decided only if every record
//! they read is still what they read.

/// The compare-and-set of one slot's records (KEYS: the records, all in one slot; ARGV: now ms, then one spec per key,
/// then the writes). A key's spec is its kind, `t` (a string, read with `GET`), `u` (a session's usage hash, read as
/// `<tasks>,<tokens>,<cost>` with `HMGET`, empty fields absent) or `w` (written only), then what the rules read:
/// `?` nothing, `-` no value, `=` followed by the value. When any key read holds something else, nothing is written and
/// the reply is `{'changed', value of each key...}` (nil for an absent or written-only key), read at one instant, for
/// the rules to run again on. Otherwise the writes are made in order and the reply is `{'ok', usage of each `u`
/// key...}` as it is after them. A write is an opcode and its arguments (key indexes are into KEYS):
///
/// - `set K VALUE PX`, `at K VALUE PXAT` (an absolute expiry), `del K`, `expire K PX`;
/// - `count U S DELTA`: `HINCRBY` of the usage hash's task count, never below 0, the hash then expiring with the
///   session's key `S`;
/// - `cost U S TOKENS COST`: what a task spent added to the usage hash (tokens saturating), which then expires with the
///   session's key, only while the session is live (its value's expiry, `<expiry ms>|...`, is past now): the
///   condition `StoreRecords::add_cost` states, checked here because a task's end reads no session.
///
/// A delete before a write lets the script write when Redis is full (`maxmemory`): Redis refuses a script's first
/// write for memory, not a later one, so a task's end (`del`, then `set`) and a close are recorded even then.
pub(super) const COMMIT: &str = r"
local now = tonumber(ARGV[1])
local function value(i)
  local kind = string.sub(ARGV[i + 1], 1, 1)
  if kind == 't' then return redis.call('GET', KEYS[i]) end
  if kind == 'u' then
    local u = redis.call('HMGET', KEYS[i], 't', 'k', 'c')
    return (u[1] or '') .. ',' .. (u[2] or '') .. ',' .. (u[3] or '')
  end
  return false
end
for i = 1, #KEYS do
  local spec = ARGV[i + 1]
  local want = string.sub(spec, 2, 2)
  local changed = false
  if want == '-' then changed = value(i) ~= false
  elseif want == '=' then changed = value(i) ~= string.sub(spec, 3) end
  if changed then
    local now_held = {'changed'}
    for j = 1, #KEYS do now_held[j + 1] = value(j) end
    return now_held
  end
end
local function follow(u, s)
  redis.call('PEXPIRE', KEYS[u], redis.call('PTTL', KEYS[s]))
end
local a = #KEYS + 2
while a <= #ARGV do
  local op, k = ARGV[a], KEYS[tonumber(ARGV[a + 1])]
  if op == 'set' then
    redis.call('SET', k, ARGV[a + 2], 'PX', ARGV[a + 3])
    a = a + 4
  elseif op == 'at' then
    redis.call('SET', k, ARGV[a + 2], 'PXAT', ARGV[a + 3])
    a = a + 4
  elseif op == 'del' then
    redis.call('DEL', k)
    a = a + 2
  elseif op == 'expire' then
    redis.call('PEXPIRE', k, ARGV[a + 2])
    a = a + 3
  elseif op == 'count' then
    local held = tonumber(redis.call('HGET', k, 't') or '0') or 0
    local delta = math.max(tonumber(ARGV[a + 3]), -held)
    if delta ~= 0 then redis.call('HINCRBY', k, 't', delta) end
    follow(tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]))
    a = a + 4
  elseif op == 'cost' then
    local s = redis.call('GET', KEYS[tonumber(ARGV[a + 2])])
    local bar = s and string.find(s, '|', 1, true)
    if bar and (tonumber(string.sub(s, 1, bar - 1)) or 0) > now then
      local r = redis.pcall('HINCRBY', k, 'k', ARGV[a + 3])
      if type(r) == 'table' and r.err then redis.call('HSET', k, 'k', '9223372036854775807') end
      redis.pcall('HINCRBYFLOAT', k, 'c', ARGV[a + 4])
      follow(tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]))
    end
    a = a + 5
  else
    return redis.error_reply('COMMIT: unknown write ' .. tostring(op))
  end
end
local after = {'ok'}
for i = 1, #KEYS do
  if string.sub(ARGV[i + 1], 1, 1) == 'u' then after[#after + 1] = value(i) end
end
return after
";

/// Counts a signed message's replay entry against its principal's share and the window's total, both sorted sets
/// scored by expiry in one slot (KEYS: share, total; ARGV: entry, expiry ms, the most per principal or '', the most in
/// total or '', now ms): prunes entries past their expiry; `1` counted, or counted already under any principal (a
/// replay, which the admission then refuses `seen`, as the other backends do, without counting it against the
/// replaying principal's share), `0` the share is full (or as large as the room the window has left: the rule of
/// `ldp_session::replay_room`, which the other backends call), `2` the total is. The one rule a script restates: the
/// window's counts live in a slot of their own, and counting must be atomic with the room check; the differential
/// test (`tests/backends_agree.rs`, bounded replay entries) holds it to `replay_room`.
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
