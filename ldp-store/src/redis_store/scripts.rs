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
/// window's counts live in a slot of their own, and counting must be atomic with the room check. Two tests hold it to
/// `replay_room`: `tests/backends_agree.rs` (bounded replay entries) and this file's own, window by window.
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

#[cfg(all(test, feature = "test-redis"))]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::ACCOUNT;
    use crate::test_redis::RedisServer;
    use ldp_session::replay_room;
    use ldp_session::shared::ReplayVerdict;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    /// A window as ACCOUNT finds it: the principal's live entries, other principals' live entries, entries past their
    /// expiry in both sets, the bounds, and whether the message's own entry is already counted.
    #[derive(Debug, Clone)]
    struct Window {
        held: usize,
        others: usize,
        lapsed: usize,
        max_per_principal: Option<usize>,
        max_total: Option<usize>,
        seen: bool,
    }

    fn window() -> impl Strategy<Value = Window> {
        (
            0..6_usize,
            0..6_usize,
            0..3_usize,
            proptest::option::of(0..8_usize),
            proptest::option::of(0..12_usize),
            any::<bool>(),
        )
            .prop_map(|(held, others, lapsed, max_per_principal, max_total, seen)| Window {
                held,
                others,
                lapsed,
                max_per_principal,
                max_total,
                seen: seen && held + others > 0,
            })
    }

    /// The script restates `replay_room` (it must count atomically with the check): on a real Redis, its verdict is
    /// the function's on every window, lapsed entries are not counted, an entry counted already is a replay for the
    /// admission to refuse (`1`, nothing added), and a fresh entry is added to both sets.
    #[test]
    fn account_judges_every_window_as_replay_room_does() {
        let server = RedisServer::start().unwrap();
        // TestRunner::run takes a `Fn`: the connection is borrowed anew by each case.
        let conn = std::cell::RefCell::new(redis::Client::open(server.url()).unwrap().get_connection().unwrap());
        let script = redis::Script::new(ACCOUNT);
        let mut runner = TestRunner::new(Config { cases: 300, ..Config::default() });
        let outcome = runner.run(&window(), |w| {
            let conn = &mut *conn.borrow_mut();
            let (share, total) = ("t:share", "t:total");
            // Real time: the script sets each set to expire (PEXPIREAT) with its last entry.
            let now = crate::now_ms();
            let _: () = redis::cmd("FLUSHALL").query(conn).unwrap();
            for i in 0..w.held {
                let _: () = redis::pipe()
                    .zadd(share, format!("mine-{i}"), now + 60_000)
                    .zadd(total, format!("mine-{i}"), now + 60_000)
                    .query(conn)
                    .unwrap();
            }
            for i in 0..w.others {
                let _: () =
                    redis::cmd("ZADD").arg(total).arg(now + 60_000).arg(format!("other-{i}")).query(conn).unwrap();
            }
            for i in 0..w.lapsed {
                let _: () = redis::pipe()
                    .zadd(share, format!("old-{i}"), now - 1)
                    .zadd(total, format!("old-{i}"), now - 1)
                    .query(conn)
                    .unwrap();
            }
            let entry = match (w.seen, w.held) {
                (true, 0) => "other-0".to_owned(),
                (true, _) => "mine-0".to_owned(),
                (false, _) => "fresh".to_owned(),
            };
            let bound = |n: Option<usize>| n.map(|n| n.to_string()).unwrap_or_default();
            let counted: i64 = script
                .key(share)
                .key(total)
                .arg(&entry)
                .arg(now + 60_000)
                .arg(bound(w.max_per_principal))
                .arg(bound(w.max_total))
                .arg(now)
                .invoke(conn)
                .unwrap();
            let expected = if w.seen {
                1
            } else {
                match replay_room(w.held, w.held + w.others, w.max_per_principal, w.max_total) {
                    ReplayVerdict::Fresh => 1,
                    ReplayVerdict::Full => 0,
                    ReplayVerdict::TableFull => 2,
                    other => panic!("replay_room never judges {other:?}"),
                }
            };
            prop_assert_eq!(counted, expected, "{:?}", w);
            let added = usize::from(!w.seen && counted == 1);
            let cards: (usize, usize) = redis::pipe().zcard(share).zcard(total).query(conn).unwrap();
            prop_assert_eq!(cards, (w.held + added, w.held + w.others + added), "lapsed entries pruned: {:?}", w);
            Ok(())
        });
        if let Err(e) = outcome {
            panic!("{e}");
        }
    }
}
