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
use ldp_session::shared::{
    Admission, Admitted, ReplayClaim, ReplayVerdict, SessionLookup, SessionUsage, SharedSession, SharedTask,
    SharedTaskStatus, TaskAnswer, TaskClaim, TaskFinish, TaskStep,
};
use ldp_session::store::{Store, StoreError};
use ldp_session::{TaskKey, replay_room};

use crate::{MIN_BOUND_BYTES, StoreConfig, drop_marks, ms, now_ms, outlived, outliving};

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

    /// Rewrites a task's record in place (its expiry unchanged), keeping the count of what the records hold.
    fn rewrite_task(&mut self, key: &TaskKey, rewrite: impl FnOnce(&SharedTask) -> SharedTask) -> Option<SharedTask> {
        let (task, _) = self.tasks.get_mut(key)?;
        let before = record_bytes(key, task);
        *task = rewrite(task);
        self.task_bytes = self.task_bytes.saturating_sub(before).saturating_add(record_bytes(key, task));
        Some(task.clone())
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

    /// Whether an unsigned message's dedupe entry is held: as an entry, or by the record of the task it claimed.
    fn holds_message(&self, key: &TaskKey, entry: &ReplayClaim, now: i64) -> bool {
        // Expired entries went in this operation's sweep: one still here is live.
        self.replay.contains_key(&entry.key)
            || self.tasks.get(key).is_some_and(|(held, expires)| *expires > now && held.holds_message(entry, now))
    }

    /// The session step of an admission: the lookup, restarting a live session's TTL.
    fn touch_session(&mut self, session_id: &str, now: i64, marker: i64) -> SessionLookup {
        let Some((record, expires, _)) = self.sessions.get_mut(session_id) else { return SessionLookup::Unknown };
        match record {
            Some(_) if *expires <= now && expires.saturating_add(marker) > now => SessionLookup::Expired,
            Some(s) if *expires > now => {
                *expires = now.saturating_add(ms(Duration::from_secs(s.ttl_secs)));
                SessionLookup::Live(s.clone())
            }
            None if *expires > now => SessionLookup::Closed,
            _ => SessionLookup::Unknown,
        }
    }

    /// A live session's usage (nothing for any other).
    fn usage(&self, session_id: &str, now: i64) -> SessionUsage {
        match self.sessions.get(session_id) {
            Some((Some(_), expires, usage)) if *expires > now => *usage,
            _ => SessionUsage::default(),
        }
    }

    /// The claim step of an admission: refused at the session's task limit, counted under one.
    fn claim_counted(
        &mut self,
        key: &TaskKey,
        task: &SharedTask,
        lease: Duration,
        max_tasks: Option<u64>,
        now: i64,
        keep: i64,
    ) -> (TaskClaim, SessionUsage) {
        let usage = self.usage(&key.session_id, now);
        if max_tasks.is_some_and(|max| usage.tasks >= max) {
            return (TaskClaim::LimitReached, usage);
        }
        let claim = self.claim_task(key, task, lease, now, keep);
        if claim == TaskClaim::Claimed
            && max_tasks.is_some()
            && let Some((_, _, held)) = self.sessions.get_mut(&key.session_id)
        {
            held.tasks = held.tasks.saturating_add(1);
        }
        (claim, usage)
    }

    fn claim_task(&mut self, key: &TaskKey, task: &SharedTask, lease: Duration, now: i64, keep: i64) -> TaskClaim {
        if let Some((held, expires)) = self.tasks.get(key)
            && *expires > now
            && !held.claimable(held.lease_until_ms > now)
        {
            return TaskClaim::Taken;
        }
        // The dedupe entries records stand for must outlive them: the one of the record replaced, and the new
        // one's when it lasts longer than the record will.
        let replaced =
            self.tasks.get(key).and_then(|(held, expires)| (*expires > now).then(|| outlived(held, task, now)));
        for (message, until) in replaced.into_iter().flatten().chain(outliving(task, now.saturating_add(keep))) {
            self.claim_message(&ReplayClaim::new("", message, until));
        }
        let mut task = task.clone();
        task.lease_until_ms = now.saturating_add(ms(lease));
        self.put_task(key, task, now.saturating_add(keep));
        TaskClaim::Claimed
    }

    /// A live task record, a lapsed lease failed first.
    fn read_task(&mut self, key: &TaskKey, now: i64) -> Option<SharedTask> {
        let (task, expires) = self.tasks.get(key)?;
        if *expires <= now {
            return None;
        }
        if task.status == SharedTaskStatus::Running && task.lease_until_ms <= now {
            return self.rewrite_task(key, SharedTask::lease_expired);
        }
        Some(task.clone())
    }

    fn cancel_task(&mut self, key: &TaskKey, now: i64) -> Option<SharedTask> {
        let (task, expires) = self.tasks.get(key)?;
        if *expires <= now || task.status != SharedTaskStatus::Running || task.lease_until_ms <= now {
            return None;
        }
        self.rewrite_task(key, SharedTask::cancelled)
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn admit(&self, admission: &Admission) -> Result<Admitted, StoreError> {
        let now = now_ms();
        let marker = ms(self.cfg.closed_ttl);
        let mut t = self.tables();
        t.sweep(now, marker);
        // A claim the records have no room for refuses the message before any of it is written.
        if let Some(TaskStep::Claim { key, task, .. }) = &admission.task {
            t.room_for(self.room, record_bytes(key, task), now)?;
        }
        // A claim standing in for the message's dedupe entry: checked first, written only if no claim is made.
        let dedupe = match &admission.task {
            Some(TaskStep::Claim { key, dedupe: Some(entry), .. }) => Some((key, entry)),
            _ => None,
        };
        let replay = match (&admission.replay, dedupe) {
            (Some(claim), _) => t.claim_message(claim),
            (None, Some((key, entry))) if t.holds_message(key, entry, now) => ReplayVerdict::Seen,
            (None, _) => ReplayVerdict::Fresh,
        };
        let dedupe = dedupe.map(|(_, entry)| entry);
        let mut admitted = Admitted::replay_only(replay);
        let Some(session_id) = admission.session_id.as_deref().filter(|_| replay == ReplayVerdict::Fresh) else {
            return Ok(admitted);
        };
        let session = t.touch_session(session_id, now, marker);
        let live = matches!(session, SessionLookup::Live(_));
        admitted.session = Some(session);
        if !live {
            if let Some(entry) = dedupe {
                t.claim_message(entry);
            }
            return Ok(admitted);
        }
        let keep = ms(self.cfg.result_ttl);
        admitted.task = admission.task.as_ref().map(|step| match step {
            TaskStep::Claim { key, task, lease, max_tasks, usage: read, dedupe } => {
                let (claim, usage) = t.claim_counted(key, task, *lease, *max_tasks, now, keep);
                if let (Some(entry), TaskClaim::Taken | TaskClaim::LimitReached) = (dedupe, &claim) {
                    t.claim_message(entry);
                }
                admitted.usage = read.then_some(usage);
                TaskAnswer::Claim(claim)
            }
            TaskStep::Read(key) => TaskAnswer::Read(t.read_task(key, now)),
            TaskStep::Cancel(key) => TaskAnswer::Cancel(t.cancel_task(key, now)),
            // A step this backend does not know is not taken.
            _ => TaskAnswer::Read(None),
        });
        Ok(admitted)
    }

    async fn create_session(&self, session: &SharedSession) -> Result<bool, StoreError> {
        let now = now_ms();
        let mut t = self.tables();
        t.sweep(now, ms(self.cfg.closed_ttl));
        let marker = ms(self.cfg.closed_ttl);
        let held = |(record, expires, _): &(Option<SharedSession>, i64, SessionUsage)| match record {
            Some(_) => expires.saturating_add(marker) > now,
            None => *expires > now,
        };
        if t.sessions.get(&session.session_id).is_some_and(held) {
            return Ok(false);
        }
        let expires = now.saturating_add(ms(Duration::from_secs(session.ttl_secs)));
        t.sessions.insert(session.session_id.clone(), (Some(session.clone()), expires, SessionUsage::default()));
        Ok(true)
    }

    async fn close_session(&self, session_id: &str) -> Result<(), StoreError> {
        let now = now_ms();
        let mut t = self.tables();
        let closed = (None, now.saturating_add(ms(self.cfg.closed_ttl)), SessionUsage::default());
        t.sessions.insert(session_id.to_owned(), closed);
        Ok(())
    }

    async fn claim_task(&self, key: &TaskKey, task: &SharedTask, lease: Duration) -> Result<TaskClaim, StoreError> {
        let now = now_ms();
        let mut t = self.tables();
        t.sweep(now, ms(self.cfg.closed_ttl));
        t.room_for(self.room, record_bytes(key, task), now)?;
        Ok(t.claim_task(key, task, lease, now, ms(self.cfg.result_ttl)))
    }

    async fn release_task(&self, key: &TaskKey, owner: &str, dedupe: Option<&ReplayClaim>) -> Result<(), StoreError> {
        let mut t = self.tables();
        if let Some(entry) = dedupe {
            t.sweep(now_ms(), ms(self.cfg.closed_ttl));
            t.claim_message(entry);
        }
        if t.tasks.get(key).is_some_and(|(task, _)| task.owner == owner && task.status == SharedTaskStatus::Running) {
            t.remove_task(key);
            // Its claim counted against the session's task limit (when it has one): it never ran.
            if let Some((_, _, usage)) = t.sessions.get_mut(&key.session_id) {
                usage.tasks = usage.tasks.saturating_sub(1);
            }
        }
        Ok(())
    }

    async fn renew_leases(
        &self,
        owner: &str,
        keys: &[TaskKey],
        lease: Duration,
    ) -> Result<Vec<(TaskKey, SharedTask)>, StoreError> {
        let now = now_ms();
        let until = now.saturating_add(ms(lease));
        // A running task's record lives a result TTL past its last renewal, as in the other backends: a task that
        // runs longer than the TTL must not lose its record (and its id be claimed again) while its owner renews.
        let keep = now.saturating_add(ms(self.cfg.result_ttl));
        let mut t = self.tables();
        let mut lost = Vec::new();
        for key in keys {
            match t.tasks.get_mut(key) {
                Some((task, expires)) if task.owner == owner && task.status == SharedTaskStatus::Running => {
                    task.lease_until_ms = until;
                    if *expires < keep {
                        *expires = keep;
                        t.expiries.tasks.push(Reverse((keep, key.clone())));
                    }
                }
                Some((task, expires)) if *expires > now => lost.push((key.clone(), task.clone())),
                _ => {}
            }
        }
        Ok(lost)
    }

    async fn finish_task(&self, key: &TaskKey, task: &SharedTask) -> Result<TaskFinish, StoreError> {
        let now = now_ms();
        let mut t = self.tables();
        // Absent (expired, or never claimed: a task admitted before the store was attached) is recorded too.
        if let Some((held, expires)) = t.tasks.get(key)
            && *expires > now
            && (held.owner != task.owner || held.status != SharedTaskStatus::Running)
        {
            return Ok(TaskFinish::Refused(Box::new(held.clone())));
        }
        t.sweep_queued(now);
        // The claiming message's key stays with the record for its life (`SharedTask::message_key`).
        let (mut ended, cost) = (task.clone(), task.cost);
        (ended.message_key, ended.message_until_ms) =
            t.tasks.get(key).map_or((None, 0), |(held, _)| (held.message_key.clone(), held.message_until_ms));
        t.put_task(key, ended, now.saturating_add(ms(self.cfg.result_ttl)));
        // A result is always recorded; older ones make room for it.
        t.make_room(self.room, now);
        if !cost.is_zero()
            && let Some((Some(_), expires, usage)) = t.sessions.get_mut(&key.session_id)
            && *expires > now
        {
            *usage = usage.plus(cost);
        }
        Ok(TaskFinish::Recorded)
    }

    async fn task(&self, key: &TaskKey) -> Result<Option<SharedTask>, StoreError> {
        let now = now_ms();
        Ok(self.tables().read_task(key, now))
    }

    async fn ended_sessions(&self, session_ids: &[String]) -> Result<Vec<(String, SessionLookup)>, StoreError> {
        let now = now_ms();
        let marker = ms(self.cfg.closed_ttl);
        let t = self.tables();
        let ended = session_ids.iter().filter_map(|id| {
            let how = match t.sessions.get(id)? {
                (None, expires, _) if *expires > now => SessionLookup::Closed,
                (Some(_), expires, _) if *expires <= now && expires.saturating_add(marker) > now => {
                    SessionLookup::Expired
                }
                _ => return None,
            };
            Some((id.clone(), how))
        });
        Ok(ended.collect())
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
                                t.claim_task(&key(&k.to_string()), &task, Duration::from_millis(200), now, 1_000);
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
                            t.read_task(&key(&k.to_string()), now);
                        }
                        Op::Cancel(k) => {
                            t.cancel_task(&key(&k.to_string()), now);
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
