//! The store's rules, written once: what an admission, a claim, a lapsed lease, a cancel, a task's end, a release, a
//! lease renewal and a session's TTL restart do to the shared records, as pure functions over them.
//!
//! A backend supplies only atomic primitives over its records ([`StoreRecords`]: read a session's row or a task's
//! record, insert a replay entry if absent, write a record back) and runs one of the operations here inside its own
//! atomic step: a mutex held (memory), one SQL transaction (SQLite), or an optimistic compare-and-set (Redis: the
//! operation runs on the records as read, and one script writes its decisions only if none of them changed, else it
//! runs again). It owns nothing of the protocol. A rule change is one edit here.
//!
//! Every function takes `now` in milliseconds since the Unix epoch on the store's clock and does no IO.

use std::time::Duration;

use super::{
    Admission, Admitted, ReplayClaim, ReplayVerdict, SessionLookup, SessionUsage, SharedSession, SharedTask,
    SharedTaskStatus, TaskAnswer, TaskClaim, TaskCost, TaskFinish, TaskStep,
};
use crate::TaskKey;

/// How long the store keeps what it keeps, in milliseconds: the backend's configuration as the rules need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Keeping {
    /// How long a closed session's marker is kept, and an expired session's after its expiry.
    pub marker_ms: i64,
    /// How long a task's record is kept after its last write.
    pub result_ttl_ms: i64,
}

impl Keeping {
    /// Markers kept `marker`, task records `result_ttl` after their last write.
    pub fn new(marker: Duration, result_ttl: Duration) -> Self {
        Self { marker_ms: ms(marker), result_ttl_ms: ms(result_ttl) }
    }
}

/// A duration in milliseconds, saturating.
fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A session's row as a backend holds it, expired or not.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SessionRow {
    /// The record; `None` once the session was closed (the row is then its closed marker).
    pub record: Option<SharedSession>,
    /// When the session expires without a message (a closed marker: when it goes).
    pub expires_ms: i64,
    /// What the session has used across replicas.
    pub usage: SessionUsage,
}

impl SessionRow {
    /// A row.
    pub fn new(record: Option<SharedSession>, expires_ms: i64, usage: SessionUsage) -> Self {
        Self { record, expires_ms, usage }
    }
}

/// The atomic primitives a backend offers over its records, each run inside the one atomic step (lock, transaction)
/// in which an operation of this module runs. None of them decides anything of the protocol.
pub trait StoreRecords {
    /// The backend's failure.
    type Error;

    /// Inserts a replay entry if its key is absent, counted against its principal's share and the window's total
    /// when it has bounds (judged by [`crate::replay_room`]): the verdict.
    fn claim_replay(&mut self, claim: &ReplayClaim) -> Result<ReplayVerdict, Self::Error>;
    /// Whether an unsigned message's dedupe entry is held as an entry (unexpired), writing nothing.
    fn dedupe_held(&mut self, entry: &ReplayClaim) -> Result<bool, Self::Error>;
    /// Writes an unsigned message's dedupe entry (no bounds), kept until its expiry.
    fn write_dedupe(&mut self, entry: &ReplayClaim) -> Result<(), Self::Error>;
    /// A session's row, live or not; `None` when the backend holds none (or only one past every use).
    fn session(&mut self, id: &str) -> Result<Option<SessionRow>, Self::Error>;
    /// Writes a new session's row, expiring at `expires_ms`, with no usage.
    fn insert_session(&mut self, session: &SharedSession, expires_ms: i64) -> Result<(), Self::Error>;
    /// Replaces a session's row by its closed marker (no usage), kept until `until_ms`.
    fn close_session(&mut self, id: &str, until_ms: i64) -> Result<(), Self::Error>;
    /// What a live session has used, `row` being its row as [`Self::session`] gave it. The rules read it only where
    /// an answer depends on it (a claim under a task limit, or the usage asked for); a backend that keeps the usage
    /// apart from the row, and must know which reads an answer depends on, overrides it.
    fn usage(&mut self, id: &str, row: &SessionRow) -> Result<SessionUsage, Self::Error> {
        let _ = id;
        Ok(row.usage)
    }
    /// Moves a live session's expiry to `until_ms`.
    fn renew_session(&mut self, id: &str, until_ms: i64) -> Result<(), Self::Error>;
    /// Adds `delta` to a session's count of admitted tasks (never below 0).
    fn count_tasks(&mut self, id: &str, delta: i64) -> Result<(), Self::Error>;
    /// Adds a task's cost to a live session's usage.
    fn add_cost(&mut self, id: &str, cost: TaskCost) -> Result<(), Self::Error>;
    /// A task's record, unless it has expired.
    fn task(&mut self, key: &TaskKey) -> Result<Option<SharedTask>, Self::Error>;
    /// Writes a task's record (its message key as given), kept until `expires_ms`.
    fn put_task(&mut self, key: &TaskKey, task: &SharedTask, expires_ms: i64) -> Result<(), Self::Error>;
    /// Writes a task's record only when the backend holds none for its key, expired or not: whether it did. A
    /// backend with a cheaper insert than a read and a write overrides it; a `false` is followed by [`Self::task`].
    fn put_new_task(&mut self, key: &TaskKey, task: &SharedTask, expires_ms: i64) -> Result<bool, Self::Error> {
        let _ = (key, task, expires_ms);
        Ok(false)
    }
    /// Writes the record of a task's end, kept until `expires_ms`: the end as its owner gave it, with the message key
    /// of the record it replaces ([`ended`]). A backend that encoded the end before its atomic step (off the one
    /// thread that writes) overrides it to write that text.
    fn put_end(&mut self, key: &TaskKey, record: &SharedTask, expires_ms: i64) -> Result<(), Self::Error> {
        self.put_task(key, record, expires_ms)
    }
    /// Removes a task's record.
    fn remove_task(&mut self, key: &TaskKey) -> Result<(), Self::Error>;
}

/// Whether a running task's lease holds at `now`.
pub fn lease_live(task: &SharedTask, now: i64) -> bool {
    task.lease_until_ms > now
}

/// Whether a new submission may claim a task id whose store holds `held` (`None`: no record), `lease_live` telling
/// whether a lease on it holds: by [`SharedTask::claimable`]; an id with no record but a live lease (a backend that
/// keeps leases apart from records) is not free.
pub fn claimable_record(held: Option<&SharedTask>, lease_live: bool) -> bool {
    held.map_or(!lease_live, |task| task.claimable(lease_live))
}

/// The record a read writes back: a running task whose lease has lapsed is failed [`SharedTask::lease_expired`].
pub fn lapsed(task: &SharedTask, lease_live: bool) -> Option<SharedTask> {
    (task.status == SharedTaskStatus::Running && !lease_live).then(|| task.lease_expired())
}

/// The record a TASK_CANCEL through the store writes: only a running task with a live lease is cancelled.
pub fn cancelled(task: &SharedTask, lease_live: bool) -> Option<SharedTask> {
    (task.status == SharedTaskStatus::Running && lease_live).then(|| task.cancelled())
}

/// Whether `task` is running under `owner`: only then may the owner renew its lease, record its end or take its claim
/// back.
pub fn runs_under(task: &SharedTask, owner: &str) -> bool {
    task.owner == owner && task.status == SharedTaskStatus::Running
}

/// The record a task's end writes, or the record held that refuses it: an end is recorded while the task runs under
/// its owner or has no record, and keeps the claiming message's dedupe key ([`SharedTask::message_key`]) of the
/// record it replaces, whatever the end carries.
pub fn ended(held: Option<&SharedTask>, end: &SharedTask) -> Result<SharedTask, SharedTask> {
    let mut record = end.clone();
    match held {
        Some(held) if !runs_under(held, &end.owner) => Err(held.clone()),
        Some(held) => {
            (record.message_key, record.message_until_ms) = (held.message_key.clone(), held.message_until_ms);
            Ok(record)
        }
        None => {
            (record.message_key, record.message_until_ms) = (None, 0);
            Ok(record)
        }
    }
}

/// The dedupe entry a replaced record stood for, when it is another message's and still live: written as an entry of
/// its own, so that the replaced record's message stays a replay.
pub fn outlived(held: &SharedTask, claim: &SharedTask, now: i64) -> Option<ReplayClaim> {
    let message =
        held.message_key.as_ref().filter(|m| claim.message_key.as_ref() != Some(*m) && held.message_until_ms > now)?;
    Some(ReplayClaim::new("", message.clone(), held.message_until_ms))
}

/// The dedupe entry a claim's record stands for, when the entry would outlive the record (`record_until`, a result
/// TTL shorter than the dedupe window): written as an entry of its own too.
pub fn outliving(claim: &SharedTask, record_until: i64) -> Option<ReplayClaim> {
    let message = claim.message_key.as_ref().filter(|_| claim.message_until_ms > record_until)?;
    Some(ReplayClaim::new("", message.clone(), claim.message_until_ms))
}

/// What a session's row says at `now`.
pub fn session_lookup(row: Option<&SessionRow>, now: i64, keeping: Keeping) -> SessionLookup {
    match row {
        Some(SessionRow { record: Some(s), expires_ms, .. }) if *expires_ms > now => SessionLookup::Live(s.clone()),
        Some(SessionRow { record: Some(_), expires_ms, .. }) if expires_ms.saturating_add(keeping.marker_ms) > now => {
            SessionLookup::Expired
        }
        Some(SessionRow { record: None, expires_ms, .. }) if *expires_ms > now => SessionLookup::Closed,
        _ => SessionLookup::Unknown,
    }
}

/// The session TTL's write-ahead: when a message to a live session whose expiry is `stored_ms` comes at `now`, the new
/// expiry to write, if any. The TTL restarts, written ahead by a tenth of the TTL (at most a second), so that a busy
/// session's row is rewritten about once a second rather than by every message; the session lives that much longer
/// at most, never shorter.
pub fn session_renewal(stored_ms: i64, ttl_secs: u64, now: i64) -> Option<i64> {
    let ttl = ms(Duration::from_secs(ttl_secs));
    let due = now.saturating_add(ttl);
    (stored_ms < due).then(|| due.saturating_add((ttl / 10).min(1000)))
}

/// Whether a session that has used `usage` is at its task limit (`None`: no limit).
pub fn at_task_limit(usage: SessionUsage, max_tasks: Option<u64>) -> bool {
    max_tasks.is_some_and(|max| usage.tasks >= max)
}

/// [`crate::store::Store::admit`]'s rules, in their order: the replay entry (or, for a claim standing in for an
/// unsigned message's dedupe entry, the entry looked up as an entry and in the task's record), the session looked up
/// with its TTL restarted, the task step; the dedupe entry is written wherever no claim is made.
pub fn admit<R: StoreRecords>(
    records: &mut R,
    admission: &Admission,
    now: i64,
    keeping: Keeping,
) -> Result<Admitted, R::Error> {
    let dedupe = match &admission.task {
        Some(TaskStep::Claim { key, dedupe: Some(entry), .. }) if admission.replay.is_none() => Some((key, entry)),
        _ => None,
    };
    let replay = match (&admission.replay, dedupe) {
        (Some(claim), _) => records.claim_replay(claim)?,
        (None, Some((_, entry))) if records.dedupe_held(entry)? => ReplayVerdict::Seen,
        (None, _) => ReplayVerdict::Fresh,
    };
    let seen = Ok(Admitted::replay_only(ReplayVerdict::Seen));
    let mut admitted = Admitted::replay_only(replay);
    let Some(id) = admission.session_id.as_deref().filter(|_| replay == ReplayVerdict::Fresh) else {
        return Ok(admitted);
    };
    let row = records.session(id)?;
    let session = session_lookup(row.as_ref(), now, keeping);
    let Some(row) = row.filter(|_| matches!(session, SessionLookup::Live(_))) else {
        if let Some((key, entry)) = dedupe {
            // Not live: no claim. The message may still be one whose record holds it.
            if records.task(key)?.is_some_and(|held| held.holds_message(entry, now)) {
                return seen;
            }
            records.write_dedupe(entry)?;
        }
        admitted.session = Some(session);
        return Ok(admitted);
    };
    admitted.task = match &admission.task {
        Some(TaskStep::Claim { key, task, lease, max_tasks, usage: read, dedupe }) => {
            let usage = if *read || max_tasks.is_some() { records.usage(id, &row)? } else { SessionUsage::default() };
            admitted.usage = read.then_some(usage);
            let (max_tasks, dedupe) = (*max_tasks, dedupe.as_ref());
            let claim = Claim { key, task, lease: *lease, max_tasks, dedupe, usage, now, keeping };
            let Some(answer) = claim_step(records, claim)? else { return seen };
            Some(TaskAnswer::Claim(answer))
        }
        Some(TaskStep::Read(key)) => Some(TaskAnswer::Read(read(records, key, now, keeping)?)),
        Some(TaskStep::Cancel(key)) => Some(TaskAnswer::Cancel(cancel(records, key, now, keeping)?)),
        // A step these rules do not know is not taken.
        _ => None,
    };
    if let Some(until) = session_renewal(row.expires_ms, row.record.as_ref().map_or(0, |s| s.ttl_secs), now) {
        records.renew_session(id, until)?;
    }
    admitted.session = Some(session);
    Ok(admitted)
}

/// A claim as the rules take it.
#[derive(Debug, Clone, Copy)]
struct Claim<'a> {
    key: &'a TaskKey,
    task: &'a SharedTask,
    lease: Duration,
    max_tasks: Option<u64>,
    dedupe: Option<&'a ReplayClaim>,
    /// What the session has used (read only under a task limit).
    usage: SessionUsage,
    now: i64,
    keeping: Keeping,
}

/// A claim in a live session: `None` when the task's record holds the claiming message (a replay, nothing written).
fn claim_step<R: StoreRecords>(records: &mut R, claim: Claim<'_>) -> Result<Option<TaskClaim>, R::Error> {
    let answer = claim_record(records, claim)?;
    if let (Some(entry), Some(TaskClaim::Taken | TaskClaim::LimitReached)) = (claim.dedupe, &answer) {
        records.write_dedupe(entry)?;
    }
    Ok(answer)
}

fn claim_record<R: StoreRecords>(records: &mut R, claim: Claim<'_>) -> Result<Option<TaskClaim>, R::Error> {
    let Claim { usage, now, keeping, .. } = claim;
    let limited = at_task_limit(usage, claim.max_tasks);
    let expires = now.saturating_add(keeping.result_ttl_ms);
    let mut running = claim.task.clone();
    running.lease_until_ms = now.saturating_add(ms(claim.lease));
    // A task id new to the store (nearly every claim) is claimed by one insert where the backend has one.
    let inserted = !limited && records.put_new_task(claim.key, &running, expires)?;
    if !inserted {
        let held = records.task(claim.key)?;
        if let (Some(held), Some(entry)) = (&held, claim.dedupe)
            && held.holds_message(entry, now)
        {
            return Ok(None);
        }
        if limited {
            return Ok(Some(TaskClaim::LimitReached));
        }
        if !claimable_record(held.as_ref(), held.as_ref().is_some_and(|h| lease_live(h, now))) {
            return Ok(Some(TaskClaim::Taken));
        }
        // The dedupe entries records stand for must outlive them: the one of the record replaced.
        if let Some(entry) = held.as_ref().and_then(|held| outlived(held, claim.task, now)) {
            records.write_dedupe(&entry)?;
        }
        records.put_task(claim.key, &running, expires)?;
    }
    // And the new one's, when it lasts longer than the record will.
    if let Some(entry) = outliving(claim.task, expires) {
        records.write_dedupe(&entry)?;
    }
    if claim.max_tasks.is_some() {
        records.count_tasks(&claim.key.session_id, 1)?;
    }
    Ok(Some(TaskClaim::Claimed))
}

/// [`crate::store::Store::claim_task`]: a claim outside an admission (no task limit, no message).
pub fn claim<R: StoreRecords>(
    records: &mut R,
    key: &TaskKey,
    task: &SharedTask,
    lease: Duration,
    now: i64,
    keeping: Keeping,
) -> Result<TaskClaim, R::Error> {
    let claim = Claim { key, task, lease, max_tasks: None, dedupe: None, usage: SessionUsage::default(), now, keeping };
    // Without a message to hold, no record holds it.
    Ok(claim_record(records, claim)?.unwrap_or(TaskClaim::Taken))
}

/// [`crate::store::Store::task`] and an admission's read: a task's record, a lapsed lease failed first (kept a result
/// TTL from now).
pub fn read<R: StoreRecords>(
    records: &mut R,
    key: &TaskKey,
    now: i64,
    keeping: Keeping,
) -> Result<Option<SharedTask>, R::Error> {
    let found = rewrite(records, key, now, keeping, lapsed)?;
    Ok(found.map(|(task, failed)| failed.unwrap_or(task)))
}

/// An admission's cancel: a running task with a live lease becomes [`SharedTask::cancelled`] (kept a result TTL from
/// now), which its owner sees at its next renewal.
pub fn cancel<R: StoreRecords>(
    records: &mut R,
    key: &TaskKey,
    now: i64,
    keeping: Keeping,
) -> Result<Option<SharedTask>, R::Error> {
    Ok(rewrite(records, key, now, keeping, cancelled)?.and_then(|(_, cancelled)| cancelled))
}

/// A task's record and what `change` made of it (given whether its lease is live), written when it changed, kept a
/// result TTL from now.
fn rewrite<R: StoreRecords>(
    records: &mut R,
    key: &TaskKey,
    now: i64,
    keeping: Keeping,
    change: fn(&SharedTask, bool) -> Option<SharedTask>,
) -> Result<Option<(SharedTask, Option<SharedTask>)>, R::Error> {
    let Some(task) = records.task(key)? else { return Ok(None) };
    let changed = change(&task, lease_live(&task, now));
    if let Some(changed) = &changed {
        records.put_task(key, changed, now.saturating_add(keeping.result_ttl_ms))?;
    }
    Ok(Some((task, changed)))
}

/// [`crate::store::Store::finish_task`]: the end recorded by [`ended`] (kept a result TTL from now), and what the
/// task spent added to its live session's usage.
pub fn finish<R: StoreRecords>(
    records: &mut R,
    key: &TaskKey,
    end: &SharedTask,
    now: i64,
    keeping: Keeping,
) -> Result<TaskFinish, R::Error> {
    let held = records.task(key)?;
    let record = match ended(held.as_ref(), end) {
        Ok(record) => record,
        Err(held) => return Ok(TaskFinish::Refused(Box::new(held))),
    };
    records.put_end(key, &record, now.saturating_add(keeping.result_ttl_ms))?;
    let cost = end.cost.sanitized();
    if !cost.is_zero() {
        records.add_cost(&key.session_id, cost)?;
    }
    Ok(TaskFinish::Recorded)
}

/// [`crate::store::Store::release_task`]: the dedupe entry the claim stood in for written, then `owner`'s claim of a
/// task that never ran taken back, and no longer counted against its session's task limit.
pub fn release<R: StoreRecords>(
    records: &mut R,
    key: &TaskKey,
    owner: &str,
    dedupe: Option<&ReplayClaim>,
) -> Result<(), R::Error> {
    if let Some(entry) = dedupe {
        records.write_dedupe(entry)?;
    }
    if records.task(key)?.is_some_and(|held| runs_under(&held, owner)) {
        records.remove_task(key)?;
        records.count_tasks(&key.session_id, -1)?;
    }
    Ok(())
}

/// [`crate::store::Store::renew_leases`]: `owner`'s running tasks get a lease from now and a record kept a result TTL
/// from now (a task running longer than the TTL keeps its id); the others of `keys` the store holds are returned.
pub fn renew<R: StoreRecords>(
    records: &mut R,
    owner: &str,
    keys: &[TaskKey],
    lease: Duration,
    now: i64,
    keeping: Keeping,
) -> Result<Vec<(TaskKey, SharedTask)>, R::Error> {
    let mut lost = Vec::new();
    for key in keys {
        match records.task(key)? {
            Some(mut task) if runs_under(&task, owner) => {
                task.lease_until_ms = now.saturating_add(ms(lease));
                records.put_task(key, &task, now.saturating_add(keeping.result_ttl_ms))?;
            }
            Some(task) => lost.push((key.clone(), task)),
            None => {}
        }
    }
    Ok(lost)
}

/// [`crate::store::Store::create_session`]: written only when the store holds nothing of the id (not live, closed or
/// expired).
pub fn create_session<R: StoreRecords>(
    records: &mut R,
    session: &SharedSession,
    now: i64,
    keeping: Keeping,
) -> Result<bool, R::Error> {
    let row = records.session(&session.session_id)?;
    if session_lookup(row.as_ref(), now, keeping) != SessionLookup::Unknown {
        return Ok(false);
    }
    let expires = now.saturating_add(ms(Duration::from_secs(session.ttl_secs)));
    records.insert_session(session, expires)?;
    Ok(true)
}

/// [`crate::store::Store::close_session`]: the session's row replaced by a closed marker, kept the marker time.
pub fn close_session<R: StoreRecords>(records: &mut R, id: &str, now: i64, keeping: Keeping) -> Result<(), R::Error> {
    records.close_session(id, now.saturating_add(keeping.marker_ms))
}

/// [`crate::store::Store::ended_sessions`]: those of `ids` closed or expired, no TTL restarted.
pub fn ended_sessions<R: StoreRecords>(
    records: &mut R,
    ids: &[String],
    now: i64,
    keeping: Keeping,
) -> Result<Vec<(String, SessionLookup)>, R::Error> {
    let mut ended = Vec::new();
    for id in ids {
        let how = session_lookup(records.session(id)?.as_ref(), now, keeping);
        if matches!(how, SessionLookup::Closed | SessionLookup::Expired) {
            ended.push((id.clone(), how));
        }
    }
    Ok(ended)
}

#[cfg(test)]
mod tests;
