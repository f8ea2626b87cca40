//! State that replicas of one delegate share through a store (issue 17), as plain data.
//!
//! The responder machine stays sans-IO: it hands its driver the records to commit ([`SharedSession`] after a
//! SESSION_PROPOSE is accepted, [`SharedTask`] when a task ends, the [`ReplayClaim`] of every inbound message) and
//! takes back what the driver read from the store ([`SessionLookup`], a [`SharedTask`] for a status query). The
//! driver (`runtime::DelegateRuntime` with a `store::Store`, feature `runtime`) does the IO, each store call under a
//! timeout, and runs the atomic operations before the machine acts:
//!
//! - the replay claim (insert the message's key if absent, with its expiry) before the machine sees the message, so
//!   a message accepted by one replica is refused by every other;
//! - the session lookup (live, with its TTL restarted; closed; unknown) before an in-session message, so a session
//!   proposed on one replica continues on another and a close anywhere ends it everywhere;
//! - the task claim (insert the task key if absent or failed) after the machine admits a TASK_SUBMIT and before the
//!   delegate runs, so a TASK_SUBMIT resent to another replica is `DUPLICATE_TASK` and never runs twice.
//!
//! Backends live above this crate (`ldp-store`); the records serialize with serde so that any of them can keep them.

use std::sync::Arc;

use ldp_types::{LdpError, PayloadMode, Provenance, codes};
use serde::{Deserialize, Serialize};

/// A session as any replica needs it to continue it: who may use it and what was negotiated. Per-replica state
/// (running tasks, context turns, usage) is not shared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SharedSession {
    /// The session id.
    pub session_id: String,
    /// The initiator's declared `from`.
    pub peer: String,
    /// The authenticated principal that opened it, if any: only it may use the session.
    pub owner: Option<String>,
    /// The source it counts against in the per-source session limits (its credential, signing key or address; see
    /// [`crate::PeerContext::source`]), so that every replica that adopts it counts it against the same one. Records
    /// written without it count against their owner, else their declared peer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<String>,
    /// The authenticated delegate id of the peer, if the credential names one.
    pub peer_delegate: Option<String>,
    /// The initiator's trust domain as established.
    pub peer_domain: String,
    /// The negotiated payload mode.
    pub mode: PayloadMode,
    /// The negotiated fallback chain.
    pub fallback: Vec<PayloadMode>,
    /// The session's TTL in seconds: the store expires the record after this long without a message.
    pub ttl_secs: u64,
}

/// What the store knows of a session.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum SessionLookup {
    /// Live (its TTL restarted by the lookup).
    Live(SharedSession),
    /// Closed by some replica.
    Closed,
    /// Its TTL ran out with no message to any replica (the store keeps the marker for a while).
    Expired,
    /// Not in the store: never established, or ended long ago.
    Unknown,
}

/// Where a task stands in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SharedTaskStatus {
    /// Claimed by a replica, which renews its lease while the delegate works.
    Running,
    /// Ended with a result.
    Completed,
    /// Ended with a failure (a failed task id may be submitted again).
    Failed,
}

/// A task's record in the store: who runs it, until when its lease holds, and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SharedTask {
    /// Where it stands.
    pub status: SharedTaskStatus,
    /// The replica that claimed it.
    pub owner: String,
    /// The payload mode it ran in.
    pub mode: PayloadMode,
    /// When its lease ends, in milliseconds since the Unix epoch on the store's clock (while running).
    #[serde(default)]
    pub lease_until_ms: i64,
    /// The output (JSON text) of a completed task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The provenance of a completed task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Arc<Provenance>>,
    /// The error of a failed task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Box<LdpError>>,
    /// What the task spent (a completed task's reported tokens and cost): added to its session's
    /// [`SessionUsage`] when the store records the task's end, so that a session's budget holds across replicas.
    #[serde(default, skip_serializing_if = "TaskCost::is_zero")]
    pub cost: TaskCost,
    /// The dedupe key of the unsigned TASK_SUBMIT that claimed the task ([`TaskStep::Claim`]'s `dedupe`), lowercase
    /// hex: such a message has no dedupe entry of its own once its claim is made. The store keeps the key with the
    /// record for the record's life (an end written over the record keeps it), and takes it as the message's
    /// dedupe entry until [`SharedTask::message_until_ms`]: the same message resent to any replica in that time is
    /// refused as a replay, as with the entry ([`SharedTask::holds_message`]). Where the record would not last that
    /// long (a result TTL shorter than the dedupe window, a claim replacing a failed task's record), the store
    /// writes the entry too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_key: Option<String>,
    /// Until when [`SharedTask::message_key`] stands for the message's dedupe entry (the entry's own expiry), in
    /// milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "is_zero_ms")]
    pub message_until_ms: i64,
}

fn is_zero_ms(ms: &i64) -> bool {
    *ms == 0
}

/// What one task spent, as its delegate reported it (its provenance's `tokens_used` and `cost_usd`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TaskCost {
    /// Tokens used.
    #[serde(default)]
    pub tokens: u64,
    /// Cost in US dollars.
    #[serde(default)]
    pub cost_usd: f64,
}

impl TaskCost {
    /// `tokens` and `cost_usd` spent.
    pub fn new(tokens: u64, cost_usd: f64) -> Self {
        Self { tokens, cost_usd }
    }

    /// Whether nothing was spent: the store then leaves the session's usage alone.
    pub fn is_zero(&self) -> bool {
        self.tokens == 0 && self.cost_usd == 0.0
    }

    /// A cost as a store may add it: a cost that is not a finite, non-negative number (a delegate's report, or a
    /// record from elsewhere) counts as nothing, so that it can neither undo spending nor poison the sum.
    pub fn sanitized(self) -> Self {
        let cost_usd = if self.cost_usd.is_finite() && self.cost_usd > 0.0 { self.cost_usd } else { 0.0 };
        Self { tokens: self.tokens, cost_usd }
    }
}

/// What a session has used across every replica that served it, kept by the store beside the session: the tasks
/// admitted (counted only when the machine has a task limit, [`TaskStep::Claim`]'s `max_tasks`, and refused past it
/// by the store itself), and the tokens and cost its completed tasks reported, which the machine takes in
/// ([`crate::Responder::merge_shared_usage`]) before it judges a TASK_SUBMIT against the session's budget. So N
/// replicas do not grant a session N times its task limit or budget.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct SessionUsage {
    /// Tasks admitted (claims counted under a task limit, less those taken back).
    pub tasks: u64,
    /// Tokens its completed tasks used.
    pub tokens: u64,
    /// What its completed tasks cost, in US dollars.
    pub cost_usd: f64,
}

impl SessionUsage {
    /// A session's usage.
    pub fn new(tasks: u64, tokens: u64, cost_usd: f64) -> Self {
        Self { tasks, tokens, cost_usd }
    }

    /// This usage with `cost` added (saturating).
    pub fn plus(self, cost: TaskCost) -> Self {
        let cost = cost.sanitized();
        Self {
            tasks: self.tasks,
            tokens: self.tokens.saturating_add(cost.tokens),
            cost_usd: self.cost_usd + cost.cost_usd,
        }
    }
}

impl SharedTask {
    /// A task claimed by `owner`, running in `mode` (the store sets the lease).
    pub fn running(owner: impl Into<String>, mode: PayloadMode) -> Self {
        Self {
            status: SharedTaskStatus::Running,
            owner: owner.into(),
            mode,
            lease_until_ms: 0,
            output: None,
            provenance: None,
            error: None,
            cost: TaskCost::default(),
            message_key: None,
            message_until_ms: 0,
        }
    }

    /// This record carrying the dedupe entry of the message that claims it, if any ([`SharedTask::message_key`]).
    pub fn with_message(mut self, entry: Option<&ReplayClaim>) -> Self {
        self.message_key = entry.map(|e| e.key.clone());
        self.message_until_ms = entry.map_or(0, |e| e.expires_at_ms);
        self
    }

    /// Whether this record stands for `entry`, an unsigned message's dedupe entry, at `now_ms`: the message claimed
    /// this task, and its entry would still be held. Every backend looks it up, with the entry itself, before
    /// anything of the admission is written.
    pub fn holds_message(&self, entry: &ReplayClaim, now_ms: i64) -> bool {
        self.message_until_ms > now_ms && self.message_key.as_deref() == Some(entry.key.as_str())
    }

    /// The record of a task that ended as the machine answered it (`env` is its TASK_RESULT or TASK_FAILED); `None`
    /// for any other message.
    pub fn ended(owner: impl Into<String>, env: &ldp_types::Envelope) -> Option<Self> {
        let mut task = Self::running(owner, env.payload_mode);
        match &env.body {
            ldp_types::Body::TaskResult(r) => {
                task.status = SharedTaskStatus::Completed;
                task.output = Some(r.output.json().to_owned());
                task.cost = TaskCost::new(r.provenance.tokens_used.unwrap_or(0), r.provenance.cost_usd.unwrap_or(0.0))
                    .sanitized();
                task.provenance = Some(r.provenance.clone());
            }
            ldp_types::Body::TaskFailed(f) => {
                task.status = SharedTaskStatus::Failed;
                task.error = Some(Box::new(f.error.clone()));
            }
            _ => return None,
        }
        Some(task)
    }

    /// This record as a store keeps it: unchanged, unless it is a completed task whose output is longer than
    /// `max_output_bytes`. That one stays completed (its id is not free again: the task ran, and its submitter was
    /// answered) without its output and provenance, with the error a status query is answered:
    /// `RESULT_NOT_KEPT`, not retryable.
    pub fn bounded(mut self, max_output_bytes: usize) -> Self {
        let len = self.output.as_ref().map_or(0, String::len);
        if self.status != SharedTaskStatus::Completed || len <= max_output_bytes {
            return self;
        }
        self.output = None;
        self.provenance = None;
        self.error = Some(Box::new(
            LdpError::runtime(
                codes::RESULT_NOT_KEPT,
                format!(
                    "the task completed and its submitter was answered, but its result ({len} bytes) is larger than \
                     the store keeps ({max_output_bytes} bytes)"
                ),
            )
            .with_retryable(false),
        ));
        self
    }

    /// The record of a task cancelled through the store (a TASK_CANCEL that reached another replica than the one
    /// running it): failed `CANCELLED`, not retryable, as a cancel on the owner answers.
    pub fn cancelled(&self) -> Self {
        let mut failed = self.clone();
        failed.status = SharedTaskStatus::Failed;
        failed.error = Some(Box::new(
            LdpError::runtime(codes::CANCELLED, "cancelled by the initiator (through another replica)")
                .with_retryable(false),
        ));
        failed
    }

    /// The failure a task whose owner stopped renewing its lease ends with: typed and retryable
    /// (`TASK_LEASE_EXPIRED`), so the initiator knows it may submit it again.
    pub fn lease_expired(&self) -> Self {
        let mut failed = self.clone();
        failed.status = SharedTaskStatus::Failed;
        failed.error = Some(Box::new(
            LdpError::runtime(
                codes::TASK_LEASE_EXPIRED,
                // The owner stays in the record, for operators; peers need not see the deployment's replica names.
                "the replica running the task stopped renewing its lease before it ended; it may be submitted again",
            )
            .with_retryable(true),
        ));
        failed
    }
}

/// The store's answer to a task claim.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TaskClaim {
    /// The caller owns the task now (it was absent, or failed).
    Claimed,
    /// Another submission holds it (running or completed).
    Taken,
    /// The session has admitted its task limit already, counted across replicas ([`TaskStep::Claim`]'s
    /// `max_tasks`): nothing was claimed.
    LimitReached,
}

/// The store's answer to a task's end ([`crate::store::Store::finish_task`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TaskFinish {
    /// Recorded: the task was running under the caller (or the store held nothing for it).
    Recorded,
    /// Not recorded: the store holds another record for the task (cancelled through another replica, failed after a
    /// lapsed lease, or claimed by another submission since), returned as it stood when the end was refused, so the
    /// caller can answer with it without a second read that could see a later change.
    Refused(Box<SharedTask>),
}

/// The store's answer to a replay claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplayVerdict {
    /// First sighting: recorded until its expiry.
    Fresh,
    /// Seen before by some replica.
    Seen,
    /// The principal's share of the window is full (refused retryably, never evicting).
    Full,
    /// The window as a whole holds its global bound ([`ReplayClaim::max_total`]; refused retryably, never
    /// evicting).
    TableFull,
}

/// The record of one inbound message in the shared replay window: the machine decides the key, the principal it
/// counts against, and how long it is kept ([`crate::Responder::replay_claim`]); the store inserts it if absent.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayClaim {
    /// The principal whose share it counts against.
    pub principal: String,
    /// The message's key (message id and nonce when signed; session and message id otherwise).
    pub key: String,
    /// When the entry may be forgotten, in milliseconds since the Unix epoch.
    pub expires_at_ms: i64,
    /// The most entries one principal may hold at once (`None`: no share, the entries leave with their window).
    pub max_per_principal: Option<usize>,
    /// The most entries the whole window may hold at once, across principals and replicas (`None`: no bound, the
    /// entries leave with their window).
    pub max_total: Option<usize>,
}

impl ReplayClaim {
    /// An entry for `key`, counted against `principal`, kept until `expires_at_ms`, with no bounds (set
    /// `max_per_principal` and `max_total` for signed traffic, as [`crate::Responder::replay_claim`] does).
    pub fn new(principal: impl Into<String>, key: impl Into<String>, expires_at_ms: i64) -> Self {
        Self { principal: principal.into(), key: key.into(), expires_at_ms, max_per_principal: None, max_total: None }
    }
}

/// What the store settles for one inbound message before the machine sees it, as **one** atomic operation
/// ([`crate::store::Store::admit`]): one round trip per message instead of one per step. The steps run in this
/// order and each runs only when the one before let the message through:
///
/// 1. `replay`: the message's replay entry, inserted if absent (not `Fresh`: nothing else happens);
/// 2. `session_id`: the session looked up, its TTL restarted when live (not live: nothing else happens);
/// 3. `task`: a step on one task of that session (a TASK_SUBMIT's claim, a status query's read, a TASK_CANCEL's
///    cancel).
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct Admission {
    /// The message's replay entry, if it has one ([`crate::Responder::replay_claim`]).
    pub replay: Option<ReplayClaim>,
    /// The session to look up ([`needs_session`]).
    pub session_id: Option<String>,
    /// A step on a task of that session, taken only while the session is live.
    pub task: Option<TaskStep>,
}

/// The task step of an [`Admission`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TaskStep {
    /// Claim the task for `task.owner` with a lease (a TASK_SUBMIT), by [`SharedTask::claimable`]. The machine has
    /// not admitted the task yet: a claim it then refuses is taken back ([`crate::store::Store::release_task`]).
    Claim {
        /// The task.
        key: crate::TaskKey,
        /// Its running record.
        task: SharedTask,
        /// How long the claim holds without renewal.
        lease: std::time::Duration,
        /// The machine's task limit per session (`None`: no limit, and nothing counted). With one, the store counts
        /// the session's claims ([`SessionUsage::tasks`]) and answers [`TaskClaim::LimitReached`] at the limit, so
        /// that the limit holds across replicas even for submissions that race.
        max_tasks: Option<u64>,
        /// Whether the machine judges the submission by the session's usage (it has a task limit or a budget): the
        /// store then answers it ([`Admitted::usage`]); without, it reads none (`None`), as a store need not.
        usage: bool,
        /// The message's dedupe entry when the claim stands in for it ([`crate::Responder::claim_dedupes`]: an
        /// unsigned TASK_SUBMIT, whose [`Admission::replay`] is then `None`; `task` carries it,
        /// [`SharedTask::with_message`]). The store looks it up first, as it would the replay entry: held as an
        /// entry, or by the task's record ([`SharedTask::holds_message`]), the message is refused
        /// [`ReplayVerdict::Seen`] and nothing else runs. It writes the entry only when no claim is made (the
        /// session is not live, the limit is reached, another submission holds the task): a claim made keeps it in
        /// the task's record instead, one write fewer per task.
        dedupe: Option<ReplayClaim>,
    },
    /// Read the task's record, a lapsed lease failed first (a status query).
    Read(crate::TaskKey),
    /// Cancel the task if it runs on some replica with a live lease (a TASK_CANCEL for a task this replica does not
    /// run): its record becomes [`SharedTask::cancelled`], which its owner sees at its next lease renewal.
    Cancel(crate::TaskKey),
}

/// The store's answer to an [`Admission`]. A step that did not run (an earlier one stopped the message) is `None`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Admitted {
    /// The replay verdict (`Fresh` when the message has no entry).
    pub replay: ReplayVerdict,
    /// The session as the store has it.
    pub session: Option<SessionLookup>,
    /// The task step's answer.
    pub task: Option<TaskAnswer>,
    /// With a claim step that asks for it ([`TaskStep::Claim`]'s `usage`): the session's usage as it stood before
    /// the claim, for the machine to judge the TASK_SUBMIT by ([`crate::Responder::merge_shared_usage`]).
    pub usage: Option<SessionUsage>,
}

impl Admitted {
    /// The answer when nothing was asked, or only a replay entry.
    pub fn replay_only(replay: ReplayVerdict) -> Self {
        Self { replay, session: None, task: None, usage: None }
    }
}

/// The answer to a [`TaskStep`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TaskAnswer {
    /// The claim's outcome.
    Claim(TaskClaim),
    /// The record read (`None`: not in the store).
    Read(Option<SharedTask>),
    /// The cancelled record, `None` when there was no running task with a live lease to cancel.
    Cancel(Option<SharedTask>),
}

/// Whether a message is one whose session a driver looks up in the store first: every message that names a
/// session but HELLO (a SESSION_PROPOSE too, so that an id live on another replica is not handed out twice).
pub fn needs_session(env: &ldp_types::Envelope) -> bool {
    !env.session_id.is_empty() && !matches!(env.body, ldp_types::Body::Hello(_))
}

impl SharedTask {
    /// Whether a new submission under this task's id may claim it: a failed task may be submitted again, a
    /// completed one may not, and a running one only once its owner's lease has lapsed (`lease_live` false: the
    /// owner died). Every backend claims by this rule, through [`rules::claimable_record`] (the Redis backend's
    /// scripts look it up in a table computed from it).
    pub fn claimable(&self, lease_live: bool) -> bool {
        match self.status {
            SharedTaskStatus::Failed => true,
            SharedTaskStatus::Completed => false,
            SharedTaskStatus::Running => !lease_live,
        }
    }
}

pub mod rules;
