//! Room in a full Redis: the oldest ended tasks' records go before their TTL, as the other backends' do at their
//! bounds ([`crate::drop_marks`]).
//!
//! Redis holds this store's keys under its own `maxmemory`; with `noeviction` (the only policy that keeps replay
//! entries, see `RedisStore::open`'s warning), a full Redis refuses writes and messages are refused
//! `STORE_UNAVAILABLE`. Task results are kept for the result TTL, so without this a peer submitting tasks as fast as
//! it may would fill Redis and every replica would refuse claims until the results expired.
//!
//! So, at most once a second after a write, the store reads `INFO memory` of each primary; past seven eighths of its
//! `maxmemory`, or at once when a write was refused for memory (`OOM`), it drops ended tasks' records there, oldest
//! first, until used memory is back at three quarters, at most [`RECORDS_PER_PASS`] records dropped and
//! [`SCAN_PER_PASS`] keys read per pass, one pass at a time per store, and a refusal starts one at most every
//! [`REFUSED_EVERY_MS`]. Which records are oldest is sampled, as Redis's own eviction samples: `SCAN` gathers up to
//! [`SAMPLE`] task keys, and since every ended record was given the result TTL when it ended, those with the least
//! time to live ended first; the oldest ended records of each sample, a quarter of it, go. A running task's record
//! is never dropped, nor any session, lease or replay entry. An unsigned message's dedupe entry kept in a dropped
//! record is written on its own, in the same script (after the delete, which Redis lets a script do even when full:
//! only a script's first write is refused for memory). No index of records by age is kept: its key would be one
//! slot of a cluster, and its upkeep a command more per task.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use ldp_session::store::StoreError;

use super::{Connection, RedisStore};
use crate::{drop_marks, now_ms};

/// Most records one pass drops, so that a pass holds Redis for short steps only.
const RECORDS_PER_PASS: usize = 4096;

/// Task keys gathered before the oldest quarter of them is dropped.
const SAMPLE: usize = 4096;

/// How often, at most, memory is read after writes, in milliseconds.
const LOOK_EVERY_MS: i64 = 1000;

/// How often, at most, a refusal for memory starts a pass, in milliseconds.
const REFUSED_EVERY_MS: i64 = 250;

/// Keys one `SCAN` call reads.
const SCAN_COUNT: usize = 1024;

/// Most keys one pass reads with `SCAN`: a Redis holding many more keys than this is sampled over several passes.
const SCAN_PER_PASS: usize = 16 * SAMPLE;

/// Whether `next` (ms since the epoch) has come, moving it `every` ahead if so (one caller wins).
fn due(next: &AtomicI64, every: i64) -> bool {
    let now = now_ms();
    let at = next.load(Ordering::Relaxed);
    now >= at && next.compare_exchange(at, now + every, Ordering::Relaxed, Ordering::Relaxed).is_ok()
}

/// Drops an ended task's record (KEYS: the record; ARGV: now ms, the replay entries' key prefix of the record's
/// session, so that the entry the script writes is in the record's slot, under the session's hash tag). A running
/// task's record, or one that is gone or unreadable, is kept. When the record keeps the dedupe entry of the unsigned
/// message that claimed the task (`message_key` until `message_until_ms`), that entry is written on its own after the
/// delete: a script's first write is the one Redis refuses when full, so the delete goes first and the entry is always
/// written. Replies the bytes the record held, 0 when kept.
pub(super) const DROP_ENDED: &str = r"
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local ok, t = pcall(cjson.decode, v)
if not ok or type(t) ~= 'table' or t.status == 'running' or (t.status ~= 'completed' and t.status ~= 'failed') then
  return 0
end
redis.call('DEL', KEYS[1])
local until_ms = tonumber(t.message_until_ms) or 0
if type(t.message_key) == 'string' and until_ms > tonumber(ARGV[1]) then
  redis.call('SET', ARGV[2] .. t.message_key, 1, 'PXAT', string.format('%d', until_ms))
end
return string.len(v)
";

/// When the store last looked at Redis's memory, and whether a pass is running.
#[derive(Debug, Default)]
pub(super) struct Room {
    /// One pass at a time per store.
    running: AtomicBool,
    /// When memory is next read after a write (ms since the epoch).
    next_look_ms: AtomicI64,
    /// When a refusal for memory may next start a pass (ms since the epoch).
    next_refused_ms: AtomicI64,
}

/// Where a command goes: the store's one connection, or one primary of a cluster.
#[derive(Debug, Clone)]
enum Node {
    Only,
    Primary { host: String, port: u16 },
}

/// What a pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RoomPass {
    /// Records dropped.
    pub dropped: usize,
    /// Primaries found past their high mark (or any, when the pass followed a refusal).
    pub full: usize,
}

impl RedisStore {
    /// After a write the store made: reads Redis's memory if a second has passed since it last did, and makes room
    /// in the background when it is past its high mark.
    pub(super) fn after_write(&self) {
        if due(&self.room.next_look_ms, LOOK_EVERY_MS) {
            self.spawn_pass(false);
        }
    }

    /// A write was refused for memory: room is made now, down to the low mark, whatever memory the last look saw;
    /// at most every [`REFUSED_EVERY_MS`], so that a Redis full of what may not be dropped (running tasks, sessions,
    /// replay entries) is not scanned over and over while it refuses.
    pub(super) fn after_refusal(&self) {
        if due(&self.room.next_refused_ms, REFUSED_EVERY_MS) {
            self.spawn_pass(true);
        }
    }

    fn spawn_pass(&self, refused: bool) {
        if self.room.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let store = self.clone();
        // Outside a runtime (a store used from plain threads) there is nothing to spawn on; a later write in one tries.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.room.running.store(false, Ordering::Release);
            return;
        };
        runtime.spawn(async move {
            if let Err(e) = store.make_room(refused).await {
                tracing::warn!(error = %e, "could not make room in Redis; writes are refused until results expire");
            }
            store.room.running.store(false, Ordering::Release);
        });
    }

    /// One pass over the primaries: those past seven eighths of their `maxmemory` (every one with a `maxmemory`
    /// when `refused`, as after a write Redis refused for memory) have their oldest ended tasks' records dropped until
    /// used memory is at three quarters, 4,096 at most. The store runs passes itself after writes; this runs one now
    /// (an operator's tool, a test). Fails `Unavailable` when Redis cannot be reached or refuses a command.
    pub async fn make_room(&self, refused: bool) -> Result<RoomPass, StoreError> {
        self.pass(refused).await.map_err(super::unavailable)
    }

    async fn pass(&self, refused: bool) -> redis::RedisResult<RoomPass> {
        let mut pass = RoomPass::default();
        for node in self.primaries().await? {
            let Some((used, max)) = self.memory(&node).await? else { continue };
            let (high, low) = drop_marks(max);
            if used <= high && !refused {
                continue;
            }
            pass.full += 1;
            let (mut cursor, mut scanned) = (0u64, 0usize);
            // Whether this cycle of the keyspace dropped anything: another cycle is worth it only then.
            let mut progress = false;
            loop {
                let mut sample = Vec::new();
                loop {
                    let scan = redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(self.task_pattern())
                        .arg("COUNT")
                        .arg(SCAN_COUNT)
                        .clone();
                    let (next, keys): (u64, Vec<String>) = self.on(&node, scan).await?;
                    // Each call reads about COUNT keys, matching or not.
                    scanned += SCAN_COUNT;
                    sample.extend(keys.into_iter().filter_map(|key| self.task_record(key)));
                    cursor = next;
                    if cursor == 0 || sample.len() >= SAMPLE {
                        break;
                    }
                }
                let dropped = self.drop_oldest_quarter(&node, sample).await?;
                pass.dropped += dropped;
                progress |= dropped > 0;
                let below = self.memory(&node).await?.is_none_or(|(used, _)| used <= low);
                if below || pass.dropped >= RECORDS_PER_PASS || scanned >= SCAN_PER_PASS {
                    break;
                }
                if cursor == 0 {
                    if !progress {
                        break;
                    }
                    progress = false;
                }
            }
        }
        Ok(pass)
    }

    /// Drops the oldest ended records of `sample`, found on `node`, by time left to live: a quarter of the sample (at
    /// least one), or as many as are ended.
    async fn drop_oldest_quarter(&self, node: &Node, sample: Vec<(String, String)>) -> redis::RedisResult<usize> {
        if sample.is_empty() {
            return Ok(0);
        }
        let mut ttls = redis::pipe();
        for (record, _) in &sample {
            ttls.pttl(record);
        }
        let left: Vec<i64> = match (node, &self.conn) {
            (Node::Primary { host, port }, Connection::Cluster(link)) => {
                let to = SingleNodeRoutingInfo::ByAddress { host: host.clone(), port: *port };
                let values = link.connection().await?.route_pipeline(ttls, 0, sample.len(), to).await?;
                values.into_iter().map(redis::from_redis_value).collect::<Result<_, _>>()?
            }
            _ => ttls.query_async(&mut self.conn()).await?,
        };
        let mut aged: Vec<(i64, &(String, String))> =
            left.into_iter().zip(&sample).filter(|(ttl, _)| *ttl >= 0).collect();
        aged.sort_unstable_by_key(|(ttl, _)| *ttl);
        // A running task's record may have less time left than ended ones (a claim is given the result TTL too, and
        // ends later): it is passed over, and the next oldest taken, until a quarter of the sample is dropped.
        let take = aged.len().div_ceil(4);
        let mut dropped = 0;
        for (_, (record, replay_prefix)) in aged {
            if dropped == take {
                break;
            }
            let freed: i64 = self
                .scripts
                .drop_ended
                .key(record)
                .arg(now_ms())
                .arg(replay_prefix)
                .invoke_async(&mut self.conn())
                .await?;
            if freed > 0 {
                dropped += 1;
            }
        }
        Ok(dropped)
    }

    /// The `SCAN` pattern of this store's task records (the prefix's glob characters escaped).
    fn task_pattern(&self) -> String {
        let mut pattern = String::with_capacity(self.prefix.len() + 12);
        for c in self.prefix.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        pattern.push_str("{*}:task:*");
        pattern
    }

    /// A key `SCAN` found, as a task record and the replay entries' key prefix of its session: `None` for any other
    /// key the pattern matched (a lease or replay key whose task id or digest holds `}:task:`). The hash tag ends at
    /// the first `}` (session ids' braces are escaped).
    fn task_record(&self, key: String) -> Option<(String, String)> {
        let rest = key.strip_prefix(self.prefix.as_str())?.strip_prefix('{')?;
        let close = rest.find('}')?;
        rest[close + 1..].strip_prefix(":task:")?;
        let replay_prefix = format!("{}{{{}}}:replay:", self.prefix, &rest[..close]);
        Some((key, replay_prefix))
    }

    /// Used memory and `maxmemory` of `node`, in bytes; `None` when it has no `maxmemory` (nothing to keep under) or
    /// does not say.
    async fn memory(&self, node: &Node) -> redis::RedisResult<Option<(u64, u64)>> {
        let info: String = self.on(node, redis::cmd("INFO").arg("memory").clone()).await?;
        let field = |name: &str| {
            info.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(':')?.trim().parse::<u64>().ok())
        };
        Ok(match (field("used_memory"), field("maxmemory")) {
            (Some(used), Some(max)) if max > 0 => Some((used, max)),
            _ => None,
        })
    }

    /// The primaries to look at: the one server, or each primary of a cluster (from `CLUSTER SLOTS`).
    async fn primaries(&self) -> redis::RedisResult<Vec<Node>> {
        let Connection::Cluster(link) = &self.conn else { return Ok(vec![Node::Only]) };
        let slots: Vec<redis::Value> =
            redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut link.connection().await?).await?;
        let mut nodes: Vec<(String, u16)> = Vec::new();
        for range in slots {
            let redis::Value::Array(range) = range else { continue };
            let Some(redis::Value::Array(primary)) = range.get(2) else { continue };
            let (Some(host), Some(port)) = (primary.first(), primary.get(1)) else { continue };
            let host: String = redis::from_redis_value_ref(host)?;
            let port: u16 = redis::from_redis_value_ref(port)?;
            if !nodes.contains(&(host.clone(), port)) {
                nodes.push((host, port));
            }
        }
        Ok(nodes.into_iter().map(|(host, port)| Node::Primary { host, port }).collect())
    }

    /// Runs `cmd` on `node`.
    async fn on<T: redis::FromRedisValue>(&self, node: &Node, cmd: redis::Cmd) -> redis::RedisResult<T> {
        match (node, &self.conn) {
            (Node::Primary { host, port }, Connection::Cluster(link)) => {
                let routing =
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host: host.clone(), port: *port });
                let value = link.connection().await?.route_command(cmd, routing).await?;
                Ok(redis::from_redis_value(value)?)
            }
            _ => cmd.query_async(&mut self.conn()).await,
        }
    }
}

/// Whether Redis refused a write for memory (`OOM`, with `maxmemory` reached under `noeviction`).
pub(super) fn out_of_memory(e: &redis::RedisError) -> bool {
    e.code() == Some("OOM")
}
