//! The store interface under the runtime (feature `runtime`): what a [`crate::runtime::DelegateRuntime`] needs from
//! a shared store so that replicas of one delegate serve the same sessions (issue 17). The records are the
//! machine's (`crate::shared`); backends (memory, SQLite, Redis) live in the `ldp-store` crate.
//!
//! Every operation is one atomic step in the store, and the steps around one message are one operation
//! ([`Store::admit`]). The runtime puts a timeout on each call
//! ([`StoreOptions::timeout`]); a failure or timeout becomes a typed, retryable `STORE_UNAVAILABLE` refusal on the
//! wire ([`StoreError::to_ldp`]), never a 500 or a hang.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ldp_types::{LdpError, codes};

use crate::TaskKey;
use crate::shared::{Admission, Admitted, SessionLookup, SharedSession, SharedTask, TaskClaim, TaskFinish};

/// Why a store call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not be reached or refused the operation.
    #[error("the {backend} store is unavailable: {reason}")]
    Unavailable {
        /// The backend (`memory`, `sqlite`, `redis`).
        backend: &'static str,
        /// What went wrong, as the backend reports it.
        reason: String,
    },
    /// The store did not answer within the runtime's timeout.
    #[error("the {backend} store did not answer within {after:?}")]
    Timeout {
        /// The backend.
        backend: &'static str,
        /// The timeout.
        after: Duration,
    },
    /// A record in the store could not be read (written by another version, or damaged).
    #[error("the {backend} store holds a record that cannot be read: {reason}")]
    Corrupt {
        /// The backend.
        backend: &'static str,
        /// What could not be read.
        reason: String,
    },
}

impl StoreError {
    /// The wire error: `STORE_UNAVAILABLE`, category `runtime`; retryable unless a record is unreadable (sending
    /// the message again would meet the same record). Its message says which of the three it is and nothing of the
    /// backend (its name, address or error text are the operator's: the runtime logs this error whole).
    pub fn to_ldp(&self) -> LdpError {
        let (message, retryable) = match self {
            Self::Unavailable { .. } => ("the delegate's state store is unavailable; try again", true),
            Self::Timeout { .. } => ("the delegate's state store did not answer in time; try again", true),
            Self::Corrupt { .. } => ("the delegate's state store holds a record this replica cannot read", false),
        };
        LdpError::runtime(codes::STORE_UNAVAILABLE, message).with_retryable(retryable)
    }
}

/// How the runtime uses its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreOptions {
    /// The longest any store call may take; beyond it the message is refused `STORE_UNAVAILABLE` (retryable).
    pub timeout: Duration,
    /// How long a running task's claim holds without renewal; the runtime renews it every third of this while the
    /// delegate works. A task whose replica died is failed `TASK_LEASE_EXPIRED` once its lease has passed.
    pub lease: Duration,
    /// The longest task output the store keeps, in bytes of its JSON text (1 MiB by default). A completed task's
    /// larger output is still answered to its submitter, but the store keeps the task completed without it
    /// ([`SharedTask::bounded`](crate::shared::SharedTask::bounded)): status queries on other replicas, or after a
    /// restart, are answered `RESULT_NOT_KEPT`. What one task can make a store hold for the result TTL stays
    /// bounded, whatever its delegate returns.
    pub max_result_bytes: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self { timeout: Duration::from_secs(2), lease: Duration::from_secs(30), max_result_bytes: 1 << 20 }
    }
}

impl StoreOptions {
    /// Options with this timeout and lease.
    pub fn new(timeout: Duration, lease: Duration) -> Self {
        Self { timeout, lease, ..Self::default() }
    }

    /// These options keeping task outputs of at most `bytes` ([`StoreOptions::max_result_bytes`]).
    pub fn with_max_result_bytes(mut self, bytes: usize) -> Self {
        self.max_result_bytes = bytes;
        self
    }
}

/// The tasks a lease renewal found no longer running under their owner, with their records
/// ([`Store::renew_leases`]): cancelled through another replica, or failed or taken over after a lapsed lease.
pub type LostTasks = Vec<(TaskKey, SharedTask)>;

/// A store shared by the replicas of one delegate. Each method is one atomic operation in the store, and the runtime
/// makes at most two per TASK_SUBMIT ([`Store::admit`] before the machine, [`Store::finish_task`] before the
/// answer): round trips, not the work inside them, are what a store costs.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The backend's name, for errors and logs.
    fn backend(&self) -> &'static str;

    /// Settles what the store must before the machine sees a message, as one atomic operation, steps in the order
    /// [`Admission`] gives, each only when the one before let the message through:
    ///
    /// - the replay entry, inserted if absent (kept until its `expires_at_ms`) and counted against its principal's
    ///   share and the window's total: `Fresh` when inserted, `Seen` when present, `Full` / `TableFull` (nothing
    ///   inserted) when the share / the total is at its bound; when the claim step stands in for it
    ///   ([`crate::shared::TaskStep::Claim`]'s `dedupe`), only looked up, as an entry or in the task's record
    ///   ([`SharedTask::holds_message`]), and written where no claim is made, where the record it goes into would
    ///   expire first, and over a record whose own message's entry is still live (written as an entry then);
    /// - the session, looked up with its TTL restarted when live (closed and expired sessions are kept as markers
    ///   for the backend's marker time);
    /// - the task step, while the session is live: a claim by [`SharedTask::claimable`] (the lease starts), a read
    ///   (a running task whose lease has passed failed first with [`SharedTask::lease_expired`]), or a cancel (a
    ///   running task with a live lease becomes [`SharedTask::cancelled`] and loses its lease).
    async fn admit(&self, admission: &Admission) -> Result<Admitted, StoreError>;

    /// Records a newly established session, expiring after its TTL without a message (then looked up as
    /// `Expired` for a while, the backend's marker time); `false` (and nothing written) when the store holds the id
    /// already (live, closed or expired).
    async fn create_session(&self, session: &SharedSession) -> Result<bool, StoreError>;

    /// Ends a session everywhere: its record is replaced by a closed marker.
    async fn close_session(&self, session_id: &str) -> Result<(), StoreError>;

    /// Claims a task for `task.owner` with a lease, if its id is free by [`SharedTask::claimable`] (the runtime
    /// claims in [`Store::admit`]; this is for a task admitted without that step).
    async fn claim_task(&self, key: &TaskKey, task: &SharedTask, lease: Duration) -> Result<TaskClaim, StoreError>;

    /// Takes back `owner`'s claim of a task the machine then refused (it never ran): the record goes if it is still
    /// `owner`'s and running. `dedupe`, the message's dedupe entry the claim stood in for
    /// ([`crate::shared::TaskStep::Claim`]'s), is written in the same atomic step, so that the refused message
    /// stays a replay for every replica with no moment between.
    async fn release_task(
        &self,
        key: &TaskKey,
        owner: &str,
        dedupe: Option<&crate::shared::ReplayClaim>,
    ) -> Result<(), StoreError>;

    /// Extends the leases of `owner`'s running tasks, and returns those of `keys` that are no longer running
    /// under `owner` in the store, with their records (cancelled through another replica, or failed or taken over
    /// after a lapsed lease): the owner stops them.
    async fn renew_leases(&self, owner: &str, keys: &[TaskKey], lease: Duration) -> Result<LostTasks, StoreError>;

    /// Records how a task ended (its result or failure) and releases its lease, kept for status queries from any
    /// replica; only while the task is running under `task.owner` (a task cancelled elsewhere, failed after a lapsed
    /// lease or claimed by another keeps that record, and is returned in the same atomic step).
    async fn finish_task(&self, key: &TaskKey, task: &SharedTask) -> Result<TaskFinish, StoreError>;

    /// A task's record. A running task whose lease has passed is failed first, in the same atomic step, with
    /// [`SharedTask::lease_expired`].
    async fn task(&self, key: &TaskKey) -> Result<Option<SharedTask>, StoreError>;

    /// Which of `session_ids` the store holds as ended, each with how: [`SessionLookup::Closed`] (closed through some
    /// replica) or [`SessionLookup::Expired`] (its TTL ran out with no message to any replica); live and unknown
    /// sessions are left out, and no TTL is restarted. The runtime asks it for the sessions of the tasks it runs, at
    /// each lease renewal, so that a close received by another replica stops them here too.
    async fn ended_sessions(&self, session_ids: &[String]) -> Result<Vec<(String, SessionLookup)>, StoreError>;

    /// Ends this process's use of the store: what was called before is finished, then the backend's own threads
    /// and connections are closed, so that its files are settled when this returns (a directory holding them can be
    /// removed at once). Calls after it fail with [`StoreError::Unavailable`]; a second close does nothing. The
    /// default, for a backend with nothing of its own to end, does nothing.
    async fn close(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// The period of the outage logs of the runtime's store calls and of the SQLite store's checkpoints and sweeps: while
/// failures go on, one line per this.
pub const OUTAGE_LINE_EVERY: Duration = Duration::from_secs(10);

/// Logs a failure that repeats as one outage, not as one line per failure. While a store is down or its disk is full,
/// every message a peer sends fails the same way, so a line per failure would let any peer fill the operator's logs
/// (and the full disk they may share) at its request rate. Here the first failure is logged at once; later ones at
/// most once per period (given to [`OutageLog::new`]; [`OUTAGE_LINE_EVERY`] for the runtime and the SQLite store),
/// each line with how many failures went unlogged before it; and when a call succeeds again after a logged failure,
/// one line says so, with how many failures the outage had and how long it lasted. So an outage costs about two lines
/// per period, whatever the traffic, and its count is never lost.
///
/// ```
/// use std::time::{Duration, Instant};
/// use ldp_session::store::{OutageLine, OutageLog};
///
/// let log = OutageLog::new("the store", Duration::from_secs(10));
/// let start = Instant::now();
/// assert_eq!(log.failure(start), Some(OutageLine::Failing { unlogged: 0 }));
/// assert_eq!(log.failure(start + Duration::from_secs(1)), None); // counted, not logged
/// assert_eq!(log.failure(start + Duration::from_secs(10)), Some(OutageLine::Failing { unlogged: 1 }));
/// let ended = log.success(start + Duration::from_secs(12));
/// assert_eq!(ended, Some(OutageLine::Recovered { failures: 3, lasted: Duration::from_secs(12) }));
/// assert_eq!(log.success(start + Duration::from_secs(13)), None);
/// ```
#[derive(Debug)]
pub struct OutageLog {
    what: &'static str,
    every: Duration,
    /// Whether a failure came since the last success: the check every success makes, without the lock.
    failing: AtomicBool,
    state: Mutex<Outage>,
}

/// What an [`OutageLog`] has seen.
#[derive(Debug, Default)]
struct Outage {
    /// When the current run of failures began (`None`: the last call succeeded).
    since: Option<Instant>,
    /// Failures in the current run.
    failures: u64,
    /// Whether a failure of the current run was logged: only then is its end.
    announced: bool,
    /// When a failure was last logged, in this run or an earlier one.
    last_line: Option<Instant>,
    /// Failures since that line that were not logged.
    unlogged: u64,
}

/// A line an [`OutageLog`] decided to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutageLine {
    /// A failure, logged: `unlogged` failures came since the previous such line without a line of their own.
    Failing {
        /// Failures since the previous logged one that were counted, not logged.
        unlogged: u64,
    },
    /// A success after a logged failure: the outage is over.
    Recovered {
        /// The failures of the outage, logged or not.
        failures: u64,
        /// From its first failure to this success.
        lasted: Duration,
    },
}

impl OutageLog {
    /// A log of `what`'s outages (`"the store"`, `"the SQLite checkpoint"`: it names the recovery line), at most one
    /// failure line per `every`.
    pub fn new(what: &'static str, every: Duration) -> Self {
        Self { what, every, failing: AtomicBool::new(false), state: Mutex::new(Outage::default()) }
    }

    /// Counts a failure at `now`: the line to log, if this one is due one.
    pub fn failure(&self, now: Instant) -> Option<OutageLine> {
        let mut outage = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.failing.store(true, Ordering::Relaxed);
        outage.since.get_or_insert(now);
        outage.failures = outage.failures.saturating_add(1);
        let due = outage.last_line.is_none_or(|last| now.saturating_duration_since(last) >= self.every);
        if !due {
            outage.unlogged = outage.unlogged.saturating_add(1);
            return None;
        }
        let unlogged = std::mem::take(&mut outage.unlogged);
        (outage.last_line, outage.announced) = (Some(now), true);
        Some(OutageLine::Failing { unlogged })
    }

    /// Counts a success at `now`: the recovery line, if it ends an outage whose failure was logged. A success with no
    /// failure before it costs one atomic load.
    pub fn success(&self, now: Instant) -> Option<OutageLine> {
        if !self.failing.load(Ordering::Relaxed) {
            return None;
        }
        let mut outage = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.failing.store(false, Ordering::Relaxed);
        let since = outage.since.take()?;
        let failures = std::mem::take(&mut outage.failures);
        // A run none of whose failures was logged (a line had been logged less than `every` before) ends quietly:
        // its failures stay counted in `unlogged`, for the next failure line.
        std::mem::take(&mut outage.announced)
            .then(|| OutageLine::Recovered { failures, lasted: now.saturating_duration_since(since) })
    }

    /// Counts a failure now and logs it (a warning, `context` as its message) if it is due a line.
    pub fn failed(&self, error: &dyn std::fmt::Display, context: &str) {
        if let Some(OutageLine::Failing { unlogged }) = self.failure(Instant::now()) {
            tracing::warn!(
                error = %error,
                unlogged_since_last_line = unlogged,
                "{context} (failures are logged at most once every {:?} while they go on)",
                self.every
            );
        }
    }

    /// Counts a success now, and logs the end of an outage it ends (a warning too, so that it shows wherever the
    /// failures did).
    pub fn succeeded(&self) {
        if let Some(OutageLine::Recovered { failures, lasted }) = self.success(Instant::now()) {
            let lasted_ms = u64::try_from(lasted.as_millis()).unwrap_or(u64::MAX);
            // At the failures' level: wherever they are seen, so is their end.
            tracing::warn!(failures, lasted_ms, "{} works again", self.what);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{OutageLine, OutageLog};

    const EVERY: Duration = Duration::from_secs(10);

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn a_steady_outage_logs_one_line_per_period_with_the_failures_between() {
        let log = OutageLog::new("the store", EVERY);
        let start = Instant::now();
        let mut lines = Vec::new();
        // 10,000 failures over 25 s, one every 2.5 ms: a peer's traffic against a store that is down.
        for i in 0..10_000u64 {
            if let Some(line) = log.failure(at(start, i * 5 / 2)) {
                lines.push(line);
            }
        }
        let unlogged: Vec<u64> = lines
            .iter()
            .map(|line| match line {
                OutageLine::Failing { unlogged } => *unlogged,
                other => panic!("{other:?}"),
            })
            .collect();
        // At 0, 10 and 20 s; every failure counted, logged or not.
        assert_eq!(unlogged.len(), 3);
        assert_eq!(unlogged[0], 0);
        // Each line counts the failures since the one before; the 1,999 after the last wait for the next.
        assert_eq!(unlogged.iter().sum::<u64>() + unlogged.len() as u64 + 1999, 10_000);
        let ended = log.success(at(start, 30_000)).unwrap();
        assert_eq!(ended, OutageLine::Recovered { failures: 10_000, lasted: Duration::from_secs(30) });
    }

    #[test]
    fn a_success_without_failures_logs_nothing() {
        let log = OutageLog::new("the store", EVERY);
        assert_eq!(log.success(Instant::now()), None);
    }

    #[test]
    fn failures_between_successes_cost_at_most_two_lines_a_period() {
        // One unreadable record asked for again and again among good traffic: failure, success, failure, ...
        let log = OutageLog::new("the store", EVERY);
        let start = Instant::now();
        let mut lines = 0;
        for i in 0..2_000u64 {
            lines += usize::from(log.failure(at(start, i * 10)).is_some());
            lines += usize::from(log.success(at(start, i * 10 + 5)).is_some());
        }
        // 20 s: two periods, a failure line and its recovery line in each.
        assert_eq!(lines, 4);
    }

    #[test]
    fn a_quiet_run_ends_without_a_line_and_is_counted_in_the_next() {
        let log = OutageLog::new("the store", EVERY);
        let start = Instant::now();
        assert_eq!(log.failure(start), Some(OutageLine::Failing { unlogged: 0 }));
        assert!(log.success(at(start, 1)).is_some());
        // Within the period: counted, and the run's end logs nothing.
        assert_eq!(log.failure(at(start, 2)), None);
        assert_eq!(log.failure(at(start, 3)), None);
        assert_eq!(log.success(at(start, 4)), None);
        // The next line carries them.
        assert_eq!(log.failure(at(start, 10_000)), Some(OutageLine::Failing { unlogged: 2 }));
        assert_eq!(
            log.success(at(start, 10_500)),
            Some(OutageLine::Recovered { failures: 1, lasted: Duration::from_millis(500) })
        );
    }
}
