//! The in-memory store: one process's tables behind a mutex, for replicas in one process (tests) and as the
//! reference the other backends follow. Expiries are on this machine's wall clock.
//!
//! Its task records are bounded ([`StoreConfig::memory_max_bytes`]): each is counted as it is written, replaced or
//! removed, and past seven eighths of the bound the oldest ended tasks' records go before their TTL, taken in
//! expiry order from the queue the sweep uses, so that a peer submitting tasks as fast as it may shortens how long
//! results are kept rather than growing the process.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use ldp_session::shared::rules::{self, Keeping, SessionRow, StoreRecords};
use ldp_session::shared::{
    Admission, Admitted, ReplayClaim, ReplayVerdict, SessionLookup, SessionUsage, SharedSession, SharedTask,
    SharedTaskStatus, TaskClaim, TaskCost, TaskFinish, TaskStep,
};
use ldp_session::store::{LostTasks, Store, StoreError};
use ldp_session::{TaskKey, replay_room};

use crate::{MIN_BOUND_BYTES, StoreConfig, drop_marks, now_ms};

/// Shared state in this process's memory.
#[derive(Debug)]
pub struct MemoryStore {
    cfg: StoreConfig,
    room: Room,
    tables: Mutex<Tables>,
}

const BACKEND: &str = "memory";

#[derive(Debug, Default)]
struct Tables {
    /// Message key -> (principal, counted against the window's bounds; expiry). Entries claimed without bounds
    /// (unsigned traffic's dedupe) count against nothing, as in the other backends.
    replay: HashMap<String, (Option<String>, i64)>,
    /// Counted entries per principal.
    per_principal: HashMap<String, usize>,
    /// Counted entries in all.
    counted: usize,
    /// Session id -> (record, `None` once closed; when it expires, or when a closed marker goes; its usage). An
    /// expired session is kept as a marker for the closed-marker time after its expiry.
    sessions: HashMap<String, (Option<SharedSession>, i64, SessionUsage)>,
    /// Task -> (record, expiry of the record).
    tasks: HashMap<TaskKey, (SharedTask, i64)>,
    /// What the task records are taken to hold ([`record_bytes`]), kept as they are written and removed.
    task_bytes: u64,
    /// Replay entries and tasks in expiry order, so that the sweep takes what has expired instead of reading every
    /// entry the tables hold (an hour of results by default).
    expiries: Expiries,
    /// Operations since the last sweep of the sessions.
    since_sweep: usize,
}

/// What each table holds in expiry order: a min-heap of (expiry, key), pushed at every write that sets an expiry.
/// An entry rewritten since (a task's result after its claim) or removed since is left in place and skipped when it
/// comes up, its expiry no longer being the table's: so each heap holds at most one item per write within the TTL.
#[derive(Debug, Default)]
struct Expiries {
    replay: BinaryHeap<Reverse<(i64, String)>>,
    tasks: BinaryHeap<Reverse<(i64, TaskKey)>>,
}

/// Sessions are swept every this many operations (each lookup also ignores expired entries). A session's expiry moves
/// with every message it carries, so sessions are not queued by expiry: their sweep reads them all, which the
/// responder's session limits bound.
const SWEEP_EVERY: usize = 1024;

/// The most records one call drops to make room, so that no caller waits on a long run of drops: a store that must
/// drop more to get under its mark does so over the next writes.
const ROOM_RECORDS_PER_CALL: usize = 4096;

/// What a record is counted as besides its strings: the record's own fields, its key, the map's entry and its place
/// in the expiry queue.
const RECORD_ALLOWANCE: usize = 256;

/// What a provenance is counted as besides its two free-form names, and each entry of its lists besides.
const PROVENANCE_ALLOWANCE: usize = 512;
const PROVENANCE_ENTRY_ALLOWANCE: usize = 256;

/// What `task`'s record under `key` is taken to hold in memory: its strings, which a peer's input and a delegate's
/// output make as long as they may (the result's JSON text above all), and fixed allowances for the rest. An
/// estimate, not an allocator's count: it moves with what the record holds, which is what the bound is for.
fn record_bytes(key: &TaskKey, task: &SharedTask) -> u64 {
    let len = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    let provenance = task.provenance.as_ref().map_or(0, |p| {
        let entries = p.evidence.len() + p.lineage.len() + p.contract_violations.len();
        PROVENANCE_ALLOWANCE
            + p.produced_by.len()
            + p.model_version.len()
            + entries.saturating_mul(PROVENANCE_ENTRY_ALLOWANCE)
    });
    let error = task.error.as_ref().map_or(0, |e| e.code.as_str().len() + e.message.len());
    let bytes = RECORD_ALLOWANCE
        + key.session_id.len()
        + key.task_id.len()
        + task.owner.len()
        + len(&task.output)
        + len(&task.message_key)
        + provenance
        + error;
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

/// The marks of the task records' bound: past `drop_above` bytes the oldest ended records go, down to `drop_to`.
#[derive(Debug, Clone, Copy)]
struct Room {
    max: u64,
    drop_above: u64,
    drop_to: u64,
}

impl Room {
    fn new(max_bytes: u64) -> Self {
        let max = max_bytes.max(MIN_BOUND_BYTES);
        let (drop_above, drop_to) = drop_marks(max);
        Self { max, drop_above, drop_to }
    }
}

impl Tables {
    /// Removes what has expired: the replay entries and tasks at every call (each a pop of its queue), the sessions
    /// every [`SWEEP_EVERY`] calls.
    fn sweep(&mut self, now: i64, marker: i64) {
        self.sweep_queued(now);
        self.since_sweep += 1;
        if self.since_sweep < SWEEP_EVERY {
            return;
        }
        self.since_sweep = 0;
        self.sessions.retain(|_, (record, expires, _)| match record {
            Some(_) => expires.saturating_add(marker) > now,
            None => *expires > now,
        });
    }

    /// Removes the replay entries and tasks that have expired, in expiry order.
    fn sweep_queued(&mut self, now: i64) {
        while let Some(Reverse((expires, _))) = self.expiries.replay.peek()
            && *expires <= now
        {
            let Some(Reverse((expires, key))) = self.expiries.replay.pop() else { break };
            if self.replay.get(&key).is_some_and(|(_, held)| *held == expires)
                && let Some((Some(principal), _)) = self.replay.remove(&key)
            {
                self.uncount(&principal);
            }
        }
        while let Some(Reverse((expires, _))) = self.expiries.tasks.peek()
            && *expires <= now
        {
            let Some(Reverse((expires, key))) = self.expiries.tasks.pop() else { break };
            if self.tasks.get(&key).is_some_and(|(_, held)| *held == expires) {
                self.remove_task(&key);
            }
        }
    }

    /// Drops the oldest ended tasks' records while the records hold more than `room.drop_above` bytes, down to
    /// `room.drop_to` or [`ROOM_RECORDS_PER_CALL`] records, taking them in expiry order (a record's expiry is its
    /// last write plus the result TTL). A running task's record is kept, unless its lease has lapsed (its owner is
    /// gone, and a status query would fail it); a dropped record's message dedupe entry, while it lasts, is written
    /// on its own first, so a resent unsigned message is still refused. Returns how many records it dropped.
    fn make_room(&mut self, room: Room, now: i64) -> usize {
        if self.task_bytes <= room.drop_above {
            return 0;
        }
        let mut running = Vec::new();
        let mut dropped = 0;
        while self.task_bytes > room.drop_to && dropped < ROOM_RECORDS_PER_CALL {
            let Some(Reverse((expires, key))) = self.expiries.tasks.pop() else { break };
            let Some((task, held)) = self.tasks.get(&key) else { continue };
            if *held != expires {
                // Rewritten since: its current expiry is queued too.
                continue;
            }
            // A running task's owner renews its lease every third of it, and each renewal moves the record's expiry
            // to the back of the queue: a running record comes up only behind the results older than its last
            // renewal, so few are passed over.
            if task.status == SharedTaskStatus::Running && task.lease_until_ms > now {
                running.push(Reverse((expires, key)));
                continue;
            }
            if let Some(message) = task.message_key.clone().filter(|_| task.message_until_ms > now) {
                let until = task.message_until_ms;
                self.claim_message(&ReplayClaim::new("", message, until));
            }
            self.remove_task(&key);
            dropped += 1;
        }
        self.expiries.tasks.extend(running);
        dropped
    }

    /// Whether a record of `bytes` more fits under the bound once old records are dropped; `Err` is the refusal.
    fn room_for(&mut self, room: Room, bytes: u64, now: i64) -> Result<(), StoreError> {
        self.make_room(room, now);
        if self.task_bytes.saturating_add(bytes) <= room.max {
            return Ok(());
        }
        Err(StoreError::Unavailable {
            backend: BACKEND,
            reason: format!(
                "the store is full: its task records hold {} bytes of the {} it keeps, all of running tasks",
                self.task_bytes, room.max
            ),
        })
    }

    /// Removes a task's record.
    fn remove_task(&mut self, key: &TaskKey) -> Option<(SharedTask, i64)> {
        let removed = self.tasks.remove(key)?;
        self.task_bytes = self.task_bytes.saturating_sub(record_bytes(key, &removed.0));
        Some(removed)
    }

    /// One counted replay entry of `principal` fewer.
    fn uncount(&mut self, principal: &str) {
        self.counted = self.counted.saturating_sub(1);
        if let Some(n) = self.per_principal.get_mut(principal) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_principal.remove(principal);
            }
        }
    }

    /// Writes a task's record with its expiry (queued for the sweep).
    fn put_task(&mut self, key: &TaskKey, task: SharedTask, expires: i64) {
        self.expiries.tasks.push(Reverse((expires, key.clone())));
        self.task_bytes = self.task_bytes.saturating_add(record_bytes(key, &task));
        if let Some((replaced, _)) = self.tasks.insert(key.clone(), (task, expires)) {
            self.task_bytes = self.task_bytes.saturating_sub(record_bytes(key, &replaced));
        }
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new(cfg: StoreConfig) -> Self {
        Self { room: Room::new(cfg.memory_max_bytes), cfg, tables: Mutex::new(Tables::default()) }
    }

    /// What the task records are taken to hold now, in bytes: the figure [`StoreConfig::memory_max_bytes`] bounds.
    pub fn task_record_bytes(&self) -> u64 {
        self.tables().task_bytes
    }

    fn tables(&self) -> MutexGuard<'_, Tables> {
        // Every mutation completes before anything can panic: the tables stay consistent.
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Tables {
    /// The replay step of an admission.
    fn claim_message(&mut self, claim: &ReplayClaim) -> ReplayVerdict {
        // Expired entries went in this operation's sweep: one still here is live.
        if self.replay.contains_key(&claim.key) {
            return ReplayVerdict::Seen;
        }
        let counted = claim.max_per_principal.is_some() || claim.max_total.is_some();
        let held = self.per_principal.get(&claim.principal).copied().unwrap_or(0);
        match replay_room(held, self.counted, claim.max_per_principal, claim.max_total) {
            ReplayVerdict::Fresh => {}
            refused => return refused,
        }
        self.expiries.replay.push(Reverse((claim.expires_at_ms, claim.key.clone())));
        self.replay.insert(claim.key.clone(), (counted.then(|| claim.principal.clone()), claim.expires_at_ms));
        if counted {
            self.counted += 1;
            *self.per_principal.entry(claim.principal.clone()).or_insert(0) += 1;
        }
        ReplayVerdict::Fresh
    }
}

/// The tables at one instant, as the store's rules see them ([`StoreRecords`]): the rules run on them under the
/// mutex, so each operation is one atomic step.
struct Records<'a> {
    tables: &'a mut Tables,
    now: i64,
}

impl StoreRecords for Records<'_> {
    type Error = StoreError;

    fn claim_replay(&mut self, claim: &ReplayClaim) -> Result<ReplayVerdict, StoreError> {
        Ok(self.tables.claim_message(claim))
    }

    fn dedupe_held(&mut self, entry: &ReplayClaim) -> Result<bool, StoreError> {
        // Expired entries went in this operation's sweep: one still here is live.
        Ok(self.tables.replay.contains_key(&entry.key))
    }

    fn write_dedupe(&mut self, entry: &ReplayClaim) -> Result<(), StoreError> {
        self.tables.claim_message(entry);
        Ok(())
    }

    fn session(&mut self, id: &str) -> Result<Option<SessionRow>, StoreError> {
        let row = self.tables.sessions.get(id);
        Ok(row.map(|(record, expires, usage)| SessionRow::new(record.clone(), *expires, *usage)))
    }

    fn insert_session(&mut self, session: &SharedSession, expires_ms: i64) -> Result<(), StoreError> {
        let row = (Some(session.clone()), expires_ms, SessionUsage::default());
        self.tables.sessions.insert(session.session_id.clone(), row);
        Ok(())
    }

    fn close_session(&mut self, id: &str, until_ms: i64) -> Result<(), StoreError> {
        self.tables.sessions.insert(id.to_owned(), (None, until_ms, SessionUsage::default()));
        Ok(())
    }

    fn renew_session(&mut self, id: &str, until_ms: i64) -> Result<(), StoreError> {
        if let Some((_, expires, _)) = self.tables.sessions.get_mut(id) {
            *expires = until_ms;
        }
        Ok(())
    }

    fn count_tasks(&mut self, id: &str, delta: i64) -> Result<(), StoreError> {
        if let Some((_, _, usage)) = self.tables.sessions.get_mut(id) {
            usage.tasks = usage.tasks.saturating_add_signed(delta);
        }
        Ok(())
    }

    fn add_cost(&mut self, id: &str, cost: TaskCost) -> Result<(), StoreError> {
        if let Some((Some(_), expires, usage)) = self.tables.sessions.get_mut(id)
            && *expires > self.now
        {
            *usage = usage.plus(cost);
        }
        Ok(())
    }

    fn task(&mut self, key: &TaskKey) -> Result<Option<SharedTask>, StoreError> {
        Ok(self.tables.tasks.get(key).filter(|(_, expires)| *expires > self.now).map(|(task, _)| task.clone()))
    }

    fn put_task(&mut self, key: &TaskKey, task: &SharedTask, expires_ms: i64) -> Result<(), StoreError> {
        self.tables.put_task(key, task.clone(), expires_ms);
        Ok(())
    }

    fn put_new_task(&mut self, key: &TaskKey, task: &SharedTask, expires_ms: i64) -> Result<bool, StoreError> {
        if self.tables.tasks.contains_key(key) {
            return Ok(false);
        }
        self.tables.put_task(key, task.clone(), expires_ms);
        Ok(true)
    }

    fn remove_task(&mut self, key: &TaskKey) -> Result<(), StoreError> {
        self.tables.remove_task(key);
        Ok(())
    }
}

impl MemoryStore {
    /// Runs `operation` of the store's rules on the tables, swept first, under the mutex.
    fn with_records<T>(
        &self,
        operation: impl FnOnce(&mut Records<'_>, i64, Keeping) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let now = now_ms();
        let keeping = Keeping::new(self.cfg.closed_ttl, self.cfg.result_ttl);
        let mut tables = self.tables();
        tables.sweep(now, keeping.marker_ms);
        operation(&mut Records { tables: &mut tables, now }, now, keeping)
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn admit(&self, admission: &Admission) -> Result<Admitted, StoreError> {
        self.with_records(|records, now, keeping| {
            // A claim the records have no room for refuses the message before any of it is written.
            if let Some(TaskStep::Claim { key, task, .. }) = &admission.task {
                records.tables.room_for(self.room, record_bytes(key, task), now)?;
            }
            rules::admit(records, admission, now, keeping)
        })
    }

    async fn create_session(&self, session: &SharedSession) -> Result<bool, StoreError> {
        self.with_records(|records, now, keeping| rules::create_session(records, session, now, keeping))
    }

    async fn close_session(&self, session_id: &str) -> Result<(), StoreError> {
        self.with_records(|records, now, keeping| rules::close_session(records, session_id, now, keeping))
    }

    async fn claim_task(&self, key: &TaskKey, task: &SharedTask, lease: Duration) -> Result<TaskClaim, StoreError> {
        self.with_records(|records, now, keeping| {
            records.tables.room_for(self.room, record_bytes(key, task), now)?;
            rules::claim(records, key, task, lease, now, keeping)
        })
    }

    async fn release_task(&self, key: &TaskKey, owner: &str, dedupe: Option<&ReplayClaim>) -> Result<(), StoreError> {
        self.with_records(|records, _, _| rules::release(records, key, owner, dedupe))
    }

    async fn renew_leases(&self, owner: &str, keys: &[TaskKey], lease: Duration) -> Result<LostTasks, StoreError> {
        self.with_records(|records, now, keeping| rules::renew(records, owner, keys, lease, now, keeping))
    }

    async fn finish_task(&self, key: &TaskKey, task: &SharedTask) -> Result<TaskFinish, StoreError> {
        self.with_records(|records, now, keeping| {
            let finished = rules::finish(records, key, task, now, keeping)?;
            // A result is always recorded; older ones make room for it.
            records.tables.make_room(self.room, now);
            Ok(finished)
        })
    }

    async fn task(&self, key: &TaskKey) -> Result<Option<SharedTask>, StoreError> {
        self.with_records(|records, now, keeping| rules::read(records, key, now, keeping))
    }

    async fn ended_sessions(&self, session_ids: &[String]) -> Result<Vec<(String, SessionLookup)>, StoreError> {
        self.with_records(|records, now, keeping| rules::ended_sessions(records, session_ids, now, keeping))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ldp_types::PayloadMode;

    fn key(task_id: &str) -> TaskKey {
        TaskKey { session_id: "s".into(), task_id: task_id.into() }
    }

    /// A task whose record was rewritten with a later expiry outlives the expiry it was first queued with, and goes at
    /// its own; a task removed and written again is kept by its new expiry, not taken by the old one.
    #[test]
    fn a_task_goes_at_its_latest_expiry() {
        let mut t = Tables::default();
        let task = SharedTask::running("a", PayloadMode::Text);
        t.put_task(&key("rewritten"), task.clone(), 100);
        t.put_task(&key("rewritten"), task.clone(), 300);
        t.put_task(&key("removed"), task.clone(), 100);
        t.remove_task(&key("removed"));
        t.put_task(&key("removed"), task.clone(), 400);
        t.put_task(&key("short"), task, 150);
        t.sweep_queued(200);
        let mut held: Vec<_> = t.tasks.keys().map(|k| k.task_id.as_str()).collect();
        held.sort_unstable();
        assert_eq!(held, ["removed", "rewritten"]);
        t.sweep_queued(300);
        assert_eq!(t.tasks.keys().map(|k| k.task_id.as_str()).collect::<Vec<_>>(), ["removed"]);
        t.sweep_queued(400);
        assert!(t.tasks.is_empty());
        assert!(t.expiries.tasks.is_empty(), "every queued expiry was taken once due");
    }

    /// The sweep takes only what has expired: live entries stay queued, untouched, however many there are.
    #[test]
    fn the_sweep_takes_only_expired_entries() {
        let mut t = Tables::default();
        let task = SharedTask::running("a", PayloadMode::Text);
        let counted = |k: &str, expires: i64| {
            let mut claim = ReplayClaim::new("p", k, expires);
            claim.max_total = Some(usize::MAX);
            claim
        };
        for i in 0..10_000 {
            t.put_task(&key(&format!("live-{i}")), task.clone(), 1_000 + i);
            assert_eq!(t.claim_message(&counted(&format!("live-{i}"), 1_000 + i)), ReplayVerdict::Fresh);
        }
        t.put_task(&key("old"), task, 10);
        assert_eq!(t.claim_message(&counted("old", 10)), ReplayVerdict::Fresh);
        t.sweep_queued(500);
        assert_eq!((t.tasks.len(), t.expiries.tasks.len()), (10_000, 10_000));
        assert_eq!((t.replay.len(), t.expiries.replay.len()), (10_000, 10_000));
        assert_eq!((t.per_principal.get("p"), t.counted), (Some(&10_000), 10_000));
    }

    /// An expired replay entry leaves its principal's share and the window's total at the next operation's sweep: a
    /// principal at its bound is refused until then, admitted after, and its expired key is fresh again.
    #[test]
    fn an_expired_replay_entry_frees_its_share() {
        let store = MemoryStore::new(StoreConfig::new("ldp:delegate:test"));
        let mut t = store.tables();
        let bounded = |k: &str, expires: i64| {
            let mut claim = ReplayClaim::new("p", k, expires);
            (claim.max_per_principal, claim.max_total) = (Some(2), Some(3));
            claim
        };
        assert_eq!(t.claim_message(&bounded("a", 100)), ReplayVerdict::Fresh);
        assert_eq!(t.claim_message(&bounded("b", 200)), ReplayVerdict::Fresh);
        assert_eq!(t.claim_message(&bounded("a", 300)), ReplayVerdict::Seen);
        assert_eq!(t.claim_message(&bounded("c", 300)), ReplayVerdict::Full);
        t.sweep(100, 0);
        assert_eq!(t.per_principal.get("p"), Some(&1));
        assert_eq!(t.claim_message(&bounded("c", 300)), ReplayVerdict::Fresh);
        assert_eq!(t.claim_message(&bounded("a", 300)), ReplayVerdict::Full, "a's entry went, p is at its bound");
        t.sweep(200, 0);
        assert_eq!(t.claim_message(&bounded("a", 300)), ReplayVerdict::Fresh);
        let mut other = ReplayClaim::new("q", "d", 300);
        other.max_total = Some(2);
        assert_eq!(t.claim_message(&other), ReplayVerdict::TableFull);
        t.sweep(300, 0);
        assert!(t.replay.is_empty() && t.per_principal.is_empty() && t.counted == 0);
    }

    /// What the records are counted as holding is always the sum over the records held, whatever writes, rewrites,
    /// removals, expiries and drops came before.
    mod record_bytes_count {
        use super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Op {
            Claim(u8, usize),
            Finish(u8, usize),
            Release(u8),
            Read(u8),
            Cancel(u8),
            Advance(i64),
            MakeRoom,
        }

        /// Records kept a second after their last write.
        fn keeping() -> Keeping {
            Keeping::new(Duration::ZERO, Duration::from_secs(1))
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                (0..6u8, 0..300usize).prop_map(|(k, len)| Op::Claim(k, len)),
                (0..6u8, 0..3000usize).prop_map(|(k, len)| Op::Finish(k, len)),
                (0..6u8).prop_map(Op::Release),
                (0..6u8).prop_map(Op::Read),
                (0..6u8).prop_map(Op::Cancel),
                (1..400i64).prop_map(Op::Advance),
                Just(Op::MakeRoom),
            ]
        }

        proptest! {
            #[test]
            fn is_the_sum_over_the_records_held(ops in proptest::collection::vec(op(), 1..80)) {
                let mut t = Tables::default();
                let room = Room { max: 6_000, drop_above: 4_000, drop_to: 3_000 };
                let mut now = 1_000;
                for op in ops {
                    match op {
                        Op::Claim(k, len) => {
                            let task = SharedTask::running("a", PayloadMode::Text)
                                .with_message(Some(&ReplayClaim::new("", "m".repeat(len), now + 500)));
                            if t.room_for(room, record_bytes(&key(&k.to_string()), &task), now).is_ok() {
                                let mut records = Records { tables: &mut t, now };
                                let lease = Duration::from_millis(200);
                                rules::claim(&mut records, &key(&k.to_string()), &task, lease, now, keeping()).unwrap();
                            }
                        }
                        Op::Finish(k, len) => {
                            let mut done = SharedTask::running("a", PayloadMode::Text);
                            done.status = SharedTaskStatus::Completed;
                            done.output = Some("x".repeat(len));
                            t.put_task(&key(&k.to_string()), done, now + 1_000);
                            t.make_room(room, now);
                        }
                        Op::Release(k) => {
                            t.remove_task(&key(&k.to_string()));
                        }
                        Op::Read(k) => {
                            rules::read(&mut Records { tables: &mut t, now }, &key(&k.to_string()), now, keeping())
                                .unwrap();
                        }
                        Op::Cancel(k) => {
                            rules::cancel(&mut Records { tables: &mut t, now }, &key(&k.to_string()), now, keeping())
                                .unwrap();
                        }
                        Op::Advance(by) => {
                            now += by;
                            t.sweep_queued(now);
                        }
                        Op::MakeRoom => {
                            t.make_room(room, now);
                        }
                    }
                    let sum: u64 = t.tasks.iter().map(|(k, (task, _))| record_bytes(k, task)).sum();
                    prop_assert_eq!(t.task_bytes, sum);
                    // Every record held is still queued by its current expiry, for the sweep and for the drops.
                    for (k, (_, expires)) in &t.tasks {
                        prop_assert!(t.expiries.tasks.iter().any(|Reverse((e, q))| e == expires && q == k));
                    }
                }
            }
        }
    }

    /// Past its mark, the oldest ended records go first, down to the lower mark; running ones stay whatever their age,
    /// unless their lease has lapsed.
    #[test]
    fn make_room_drops_the_oldest_ended_records_and_keeps_running_ones() {
        let mut t = Tables::default();
        let mut done = SharedTask::running("a", PayloadMode::Text);
        done.status = SharedTaskStatus::Completed;
        done.output = Some("x".repeat(1_000));
        let mut live = SharedTask::running("a", PayloadMode::Text);
        live.lease_until_ms = 1_000;
        t.put_task(&key("old-running"), live, 10);
        let mut lapsed = SharedTask::running("a", PayloadMode::Text);
        lapsed.lease_until_ms = 40;
        t.put_task(&key("lapsed"), lapsed, 20);
        for i in 0..10 {
            t.put_task(&key(&format!("done-{i}")), done.clone(), 100 + i);
        }
        let one = record_bytes(&key("done-0"), &done);
        let room = Room { max: 20 * one, drop_above: 8 * one, drop_to: 6 * one };
        assert_eq!(t.make_room(room, 50), 6, "the lapsed one, then down to the running one and five results");
        let mut held: Vec<_> = t.tasks.keys().map(|k| k.task_id.clone()).collect();
        held.sort_unstable();
        assert_eq!(held, ["done-5", "done-6", "done-7", "done-8", "done-9", "old-running"]);
        assert_eq!(t.make_room(room, 50), 0, "under the mark: nothing more");
    }

    /// Entries claimed without bounds (unsigned traffic's dedupe) are kept but count against no bound, as in the
    /// SQLite and Redis backends.
    #[test]
    fn unbounded_entries_count_against_no_bound() {
        let mut t = Tables::default();
        for k in ["a", "b", "c"] {
            assert_eq!(t.claim_message(&ReplayClaim::new("p", k, 100)), ReplayVerdict::Fresh);
        }
        assert_eq!(t.claim_message(&ReplayClaim::new("p", "a", 100)), ReplayVerdict::Seen);
        let mut bounded = ReplayClaim::new("p", "d", 100);
        (bounded.max_per_principal, bounded.max_total) = (Some(1), Some(1));
        assert_eq!(t.claim_message(&bounded), ReplayVerdict::Fresh);
        assert_eq!((t.per_principal.get("p"), t.counted), (Some(&1), 1));
        t.sweep_queued(100);
        assert!(t.replay.is_empty() && t.per_principal.is_empty() && t.counted == 0);
    }
}
