//! The responder machine: serves a delegate's side of every session.
//!
//! Calling order: feed each inbound message to [`Responder::handle`] (or `handle_envelope`), act on the returned
//! [`Outcome`], report task progress and completion with [`Responder::progress`], [`Responder::complete_task`] and
//! [`Responder::fail_task`], drain [`Responder::poll_event`] and [`Responder::poll_aborted`] (tasks whose work must
//! stop), and call [`Responder::handle_timeout`] when [`Responder::poll_timeout`] says so (it reaps expired sessions
//! and returns their memory). Every call that depends on time takes the monotonic `now`.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ldp_types::{
    Body, CapabilityManifest, DelegationContract, Envelope, EvidenceRef, LdpError, LineageEntry, Manifest, PayloadMode,
    Provenance, RawJson, Score, SessionAccept, SessionClose, SessionReject, TaskFailed, TaskResult, TaskSubmit,
    TaskUpdate, UsageReceipt, VerificationStatus, codes, negotiate, validate_payload,
};
use serde_json::Value;

use crate::clock::{IdSource, WallClock};
use crate::config::{DeclaredDomains, FallbackStyle, ResponderConfig};
use crate::error::{Misuse, Refusal, SessionError};
use crate::held::{HeldAnswer, HeldLimits, HeldStats, HeldStore};
use crate::security::{Received, ReplayGuard, SecurityConfig, sign_outbound, verify_inbound};
use crate::{SessionState, TaskKey};

/// What the transport learned about the peer, independent of what the peer's messages claim.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerContext {
    /// The authenticated identity, when the transport authenticated the peer (bearer token, mTLS).
    pub authenticated: Option<AuthenticatedPeer>,
    /// The connection the message arrived on (WebSocket), for suspend and resume.
    pub connection: Option<u64>,
    /// A non-secret label of the credential that authenticated the peer (e.g. a digest of its bearer token, the
    /// fingerprint of its client certificate), set by the transport's authentication layer. Two credentials have
    /// two labels even when they map to the same trust domain: sessions and quotas are bound to it (see
    /// [`PeerContext::principal`]). Never the credential itself.
    pub principal: Option<Arc<str>>,
}

impl PeerContext {
    /// The principal sessions, session caps and replay quotas are bound to when the peer is authenticated: the
    /// transport's credential label, or else the authenticated delegate id and trust domain. `None` for an
    /// unauthenticated peer, which the machine knows only by the `from` it declares.
    pub fn principal(&self) -> Option<Cow<'_, str>> {
        if let Some(label) = &self.principal {
            return Some(Cow::Borrowed(label));
        }
        self.authenticated.as_ref().map(|a| {
            Cow::Owned(format!("domain:{}/delegate:{}", a.trust_domain, a.delegate_id.as_deref().unwrap_or("")))
        })
    }
}

/// An identity established by the transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthenticatedPeer {
    /// The delegate id the credential belongs to, if the credential names one.
    pub delegate_id: Option<String>,
    /// The trust domain the credential belongs to.
    pub trust_domain: String,
}

/// A task the delegate must run.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRequest {
    /// Session and task id.
    pub key: TaskKey,
    /// The declared skill.
    pub skill: String,
    /// The input, valid for `payload_mode`, as received ([`RawJson::parse`] reads it).
    pub input: RawJson,
    /// The mode the input is in.
    pub payload_mode: PayloadMode,
    /// The delegation contract, if any.
    pub contract: Option<DelegationContract>,
    /// The initiator's id.
    pub peer: String,
    /// The session's earlier tasks, oldest first (RFC 5.3 session context), as they stood when this task was
    /// accepted; bounded by [`Limits::context_turns`](crate::Limits::context_turns) and
    /// [`Limits::context_bytes`](crate::Limits::context_bytes).
    pub history: History,
}

/// One earlier task of a session: what was asked and what was answered.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Turn {
    /// The task.
    pub task_id: String,
    /// Its skill.
    pub skill: String,
    /// Its input, as received (in the mode it ran in).
    pub input: RawJson,
    /// Its output; `None` for a task that failed or was cancelled.
    pub output: Option<RawJson>,
}

impl Turn {
    /// A turn (for tests of delegates; the responder records the real ones).
    pub fn new(
        task_id: impl Into<String>,
        skill: impl Into<String>,
        input: impl Into<RawJson>,
        output: Option<RawJson>,
    ) -> Self {
        Self { task_id: task_id.into(), skill: skill.into(), input: input.into(), output }
    }

    /// The bytes this turn is counted for against `context_bytes` (its provenance is counted by the caller).
    fn size(&self) -> usize {
        TURN_OVERHEAD
            + self.task_id.len()
            + self.skill.len()
            + self.input.json().len()
            + self.output.as_ref().map_or(0, |o| o.json().len())
    }
}

/// What a turn costs besides its strings (the allocations and their headers), so that many empty turns still count.
const TURN_OVERHEAD: usize = 64;

/// A session's earlier turns, oldest first: a snapshot shared with the responder, so handing it to each task costs
/// no copy of the inputs and outputs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct History(Arc<[Arc<Turn>]>);

impl History {
    /// A history of these turns, oldest first (for tests of delegates).
    pub fn from_turns(turns: impl IntoIterator<Item = Turn>) -> Self {
        Self(turns.into_iter().map(Arc::new).collect())
    }

    /// The turns, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Turn> + ExactSizeIterator {
        self.0.iter().map(|t| &**t)
    }

    /// How many turns.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none (the session's first task, or context turned off).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The latest turn.
    pub fn last(&self) -> Option<&Turn> {
        self.0.last().map(|t| &**t)
    }
}

impl<'a> IntoIterator for &'a History {
    type Item = &'a Turn;
    type IntoIter = std::iter::Map<std::slice::Iter<'a, Arc<Turn>>, fn(&'a Arc<Turn>) -> &'a Turn>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|t| &**t)
    }
}

/// A finished task kept as session context, with its result's provenance when it completed (for status queries).
#[derive(Debug)]
struct Kept {
    turn: Arc<Turn>,
    provenance: Option<Box<Provenance>>,
    bytes: usize,
}

/// A session's context: its latest turns within the configured count and bytes.
#[derive(Debug, Default)]
struct Context {
    kept: VecDeque<Kept>,
    bytes: usize,
    /// The snapshot handed to tasks, rebuilt after the context changed (once, however many tasks follow).
    snapshot: Option<History>,
}

impl Context {
    fn push(&mut self, turn: Turn, provenance: Option<Box<Provenance>>, max_turns: usize, max_bytes: usize) {
        if max_turns == 0 {
            return;
        }
        // Provenance is small and delegate-made; count its variable parts roughly.
        let bytes =
            turn.size() + provenance.as_ref().map_or(0, |p| 256 + p.lineage.len() * 128 + p.evidence.len() * 128);
        self.snapshot = None;
        if bytes > max_bytes {
            self.kept.clear();
            self.bytes = 0;
            return;
        }
        while self.kept.len() >= max_turns || self.bytes + bytes > max_bytes {
            let Some(old) = self.kept.pop_front() else { break };
            self.bytes -= old.bytes;
        }
        self.bytes += bytes;
        self.kept.push_back(Kept { turn: Arc::new(turn), provenance, bytes });
    }

    fn snapshot(&mut self) -> History {
        self.snapshot.get_or_insert_with(|| History(self.kept.iter().map(|k| k.turn.clone()).collect())).clone()
    }

    fn result(&self, task_id: &str) -> Option<(&RawJson, &Provenance)> {
        self.kept.iter().rev().find(|k| k.turn.task_id == task_id).and_then(|k| {
            let output = k.turn.output.as_ref()?;
            Some((output, k.provenance.as_deref()?))
        })
    }
}

/// What a delegate produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskOutput {
    /// The output.
    pub output: RawJson,
    /// Self-reported confidence.
    pub confidence: Option<Score>,
    /// Tokens used.
    pub tokens_used: Option<u64>,
    /// Cost in USD.
    pub cost_usd: Option<f64>,
    /// How the output was verified.
    pub verification_status: VerificationStatus,
    /// Evidence references.
    pub evidence: Vec<EvidenceRef>,
    /// Provenance of results obtained by re-delegating; they become lineage entries.
    pub delegated: Vec<Provenance>,
    /// Prompt (input) tokens, for the usage receipt ([`ResponderConfig::receipt_key`](crate::ResponderConfig)).
    pub tokens_in: Option<u64>,
    /// Completion (output) tokens, for the usage receipt.
    pub tokens_out: Option<u64>,
    /// The model that produced the output as its provider named it: the provenance's `model_version` and the usage
    /// receipt's `model` (the card's `model_version` when unset).
    pub model: Option<String>,
}

impl TaskOutput {
    /// An unverified output with no usage figures; `output` may be a `serde_json::Value`, a [`RawJson`] or a `&str`.
    pub fn new(output: impl Into<RawJson>) -> Self {
        Self { output: output.into(), ..Self::default() }
    }
}

/// What to do with an inbound message that was accepted.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::exhaustive_enums)] // Closed on purpose: a driver must act on every outcome, so a new one breaks its build.
pub enum Outcome {
    /// Send this reply.
    Reply(Envelope),
    /// Run this task, then report with `complete_task` or `fail_task`.
    Execute(TaskRequest),
    /// Stop these running tasks and send the reply (TASK_CANCEL, SESSION_CLOSE). The same tasks are queued for
    /// [`Responder::poll_aborted`], with the definite answer for each one's submitter.
    Cancel {
        /// The reply to send.
        reply: Envelope,
        /// Tasks to abort.
        cancelled: Vec<TaskKey>,
    },
    /// Accepted; nothing to send (ATTESTATION).
    Accepted,
}

/// Whether a finished task's reply can go out now.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::exhaustive_enums)] // Closed on purpose: a reply is sent or held; a driver must handle both.
pub enum Delivery {
    /// Send it.
    Send(Envelope),
    /// The session is suspended; the reply is held (within [`Limits::held`](crate::Limits::held)) and returned by
    /// [`Responder::take_held`] after resume.
    Held,
}

/// A running task the machine ended on its own account (TASK_CANCEL, SESSION_CLOSE from either side, session
/// expiry): the driver must stop the delegate's work for `key` and answer whoever awaits its result with `reply`.
#[derive(Debug, Clone, PartialEq)]
pub struct Aborted {
    /// The task.
    pub key: TaskKey,
    /// The definite TASK_FAILED (`CANCELLED`, saying why) for the task's submitter, built and signed by the machine.
    pub reply: Envelope,
}

/// Something that happened, for the application to observe.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ResponderEvent {
    /// A session became active.
    SessionEstablished {
        /// The session.
        session_id: String,
        /// The initiator.
        peer: String,
        /// The initiator's trust domain as established.
        peer_domain: String,
        /// The negotiated mode.
        mode: PayloadMode,
    },
    /// A proposal was rejected.
    SessionRejected {
        /// The proposing peer.
        peer: String,
        /// Why.
        error: LdpError,
    },
    /// A session ended by SESSION_CLOSE.
    SessionClosed {
        /// The session.
        session_id: String,
        /// Its tasks that were still running and were aborted (also queued for [`Responder::poll_aborted`]).
        aborted: Vec<TaskKey>,
    },
    /// A session expired through inactivity and was reaped.
    SessionExpired {
        /// The session.
        session_id: String,
        /// Its tasks that were still running and were aborted (also queued for [`Responder::poll_aborted`]).
        aborted: Vec<TaskKey>,
    },
    /// A session was suspended (its connection dropped).
    SessionSuspended {
        /// The session.
        session_id: String,
    },
    /// A suspended session resumed.
    SessionResumed {
        /// The session.
        session_id: String,
    },
    /// The payload mode of a session fell back.
    ModeFellBack {
        /// The session.
        session_id: String,
        /// The failed mode.
        from: PayloadMode,
        /// The new mode.
        to: PayloadMode,
    },
    /// An ATTESTATION arrived in an active session.
    AttestationReceived {
        /// The session.
        session_id: String,
        /// The sender.
        from: String,
        /// The attestation.
        attestation: ldp_types::Attestation,
    },
}

/// How a task ended, as recorded in the session history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::exhaustive_enums)] // Closed by definition: the three ways a task ends (RFC 3.2: result, failure, cancel).
pub enum TaskStatus {
    /// It produced a TASK_RESULT.
    Completed,
    /// It produced a TASK_FAILED.
    Failed,
    /// It was cancelled.
    Cancelled,
}

/// One entry of a session's bounded history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryItem {
    /// The task.
    pub task_id: String,
    /// Its skill.
    pub skill: String,
    /// How it ended.
    pub status: TaskStatus,
}

#[derive(Debug)]
struct HistoryEntry {
    task_id: Box<str>,
    skill: Box<str>,
    status: TaskStatus,
}

#[derive(Debug)]
struct RunningTask {
    skill: Box<str>,
    mode: PayloadMode,
    contract_id: Option<Box<str>>,
    /// When the machine admitted it: the start of the wall time its usage receipt reports.
    admitted: Instant,
    /// When a `fail_closed` contract's deadline passes: the machine ends the task then (see `task_deadlines`).
    deadline: Option<Instant>,
    /// The contract's `check:` predicates and failure policy, when it has any: the responder checks its own output
    /// against them before answering (boxed: most tasks have none, and a running task should stay small).
    checks: Option<Box<(ldp_types::criteria::CheckableCriteria, ldp_types::FailurePolicy)>>,
    /// The input, for the session's context once the task ends (`None` when context is turned off).
    input: Option<RawJson>,
}

/// When a `fail_closed` contract's deadline falls on the machine's monotonic clock (`now` read at `wall_now`); a
/// deadline already past falls on `now`. `None` without a deadline or under `fail_open` (whose violation is recorded
/// in the provenance instead).
fn fail_closed_deadline(
    contract: Option<&ldp_types::DelegationContract>,
    now: Instant,
    wall_now: time::OffsetDateTime,
) -> Option<Instant> {
    let limits = contract?.limits().ok()?;
    if limits.failure_policy != ldp_types::FailurePolicy::FailClosed {
        return None;
    }
    let left = std::time::Duration::try_from(limits.deadline? - wall_now).unwrap_or_default();
    // A deadline beyond the monotonic clock's range never comes.
    now.checked_add(left)
}

/// A running task's contract deadline: (when, session id, task id).
type TaskDeadline = (Instant, Box<str>, Box<str>);

/// Per-session state. Kept small: an idle session is a few hundred bytes.
#[derive(Debug)]
struct ResponderSession {
    peer: Box<str>,
    /// The authenticated principal that opened the session ([`PeerContext::principal`]); only it may use it.
    owner: Option<Box<str>>,
    peer_delegate: Option<Box<str>>,
    peer_domain: Box<str>,
    state: SessionState,
    mode: PayloadMode,
    fallback: Box<[PayloadMode]>,
    ttl: Duration,
    last_activity: Instant,
    connection: Option<u64>,
    running: HashMap<Box<str>, RunningTask>,
    history: VecDeque<HistoryEntry>,
    /// Earlier tasks' inputs and outputs (RFC 5.3).
    context: Context,
    tasks_submitted: u64,
    tokens_used: u64,
    cost_usd: f64,
}

impl ResponderSession {
    /// Whether a message from `from`, authenticated as `delegate` by the credential `principal`, comes from the
    /// peer that opened the session.
    fn is_peer(&self, from: &str, delegate: Option<&str>, principal: Option<&str>) -> bool {
        *self.peer == *from
            && (self.peer_delegate.is_none() || self.peer_delegate.as_deref() == delegate)
            && self.owner.as_deref() == principal
    }

    fn deadline(&self) -> Instant {
        self.last_activity + self.ttl
    }

    /// Records a task that left `running`, keeping at most `history_len` entries.
    fn record_history(&mut self, task_id: &str, skill: Box<str>, status: TaskStatus, history_len: usize) {
        if history_len > 0 {
            if self.history.len() >= history_len {
                self.history.pop_front();
            }
            self.history.push_back(HistoryEntry { task_id: task_id.into(), skill, status });
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Expired,
    Closed,
}

/// The responder machine. See the module docs for the calling order.
#[derive(Debug)]
pub struct Responder {
    cfg: ResponderConfig,
    wall: Arc<dyn WallClock>,
    ids: Box<dyn IdSource>,
    sessions: HashMap<Box<str>, ResponderSession>,
    expiry: BinaryHeap<Reverse<(Instant, Box<str>)>>,
    /// Deadlines of running tasks under `fail_closed` contracts, (when, session id, task id); an entry whose task
    /// has ended meanwhile is skipped when it comes due.
    task_deadlines: BinaryHeap<Reverse<TaskDeadline>>,
    ended: HashMap<Box<str>, Ended>,
    ended_order: VecDeque<Box<str>>,
    replay: ReplayGuard,
    /// Message ids seen recently, in unsigned mode.
    dedupe: Dedupe,
    /// Live sessions per principal ([`principal_key`]), for `max_sessions_per_principal`.
    sessions_per_principal: HashMap<Box<str>, usize>,
    running_total: usize,
    events: VecDeque<ResponderEvent>,
    /// Tasks ended by the machine whose delegate work the driver must stop ([`Responder::poll_aborted`]).
    aborted: VecDeque<Aborted>,
    /// Answers kept for suspended sessions' resume, bounded by [`Limits::held`](crate::Limits::held).
    held: HeldStore,
    /// When [`Responder::handle_timeout`] next drops held answers older than their TTL.
    held_sweep: Option<Instant>,
    manifest: Value,
}

fn session_error(code: &str, msg: impl Into<String>) -> LdpError {
    LdpError::session(code, msg)
}

impl Responder {
    /// A responder with the given clock and id source.
    pub fn new(cfg: ResponderConfig, wall: Arc<dyn WallClock>, ids: Box<dyn IdSource>) -> Self {
        let manifest = Manifest {
            skills: cfg.card.capabilities.iter().map(|c| c.name.clone()).collect(),
            supported_modes: cfg
                .card
                .supported_payload_modes
                .iter()
                .copied()
                .filter(|m| cfg.implemented_modes.contains(m))
                .collect(),
            max_concurrent_tasks: u32::try_from(cfg.limits.max_concurrent_tasks).ok(),
            capabilities: cfg.card.capabilities.clone(),
        }
        .to_value();
        Self {
            cfg,
            wall,
            ids,
            sessions: HashMap::new(),
            expiry: BinaryHeap::new(),
            task_deadlines: BinaryHeap::new(),
            ended: HashMap::new(),
            ended_order: VecDeque::new(),
            replay: ReplayGuard::default(),
            sessions_per_principal: HashMap::new(),
            dedupe: Dedupe::default(),
            running_total: 0,
            events: VecDeque::new(),
            aborted: VecDeque::new(),
            held: HeldStore::default(),
            held_sweep: None,
            manifest,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ResponderConfig {
        &self.cfg
    }

    /// Number of live (not yet reaped) sessions.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Number of tasks running across all sessions.
    pub fn running_tasks(&self) -> usize {
        self.running_total
    }

    /// Messages the replay window remembers now (0 when replay protection is off), and the most it may hold: the
    /// size an operator watches, since a full table refuses signed traffic with `CAPACITY_EXCEEDED`.
    pub fn replay_window(&self) -> (usize, usize) {
        (self.replay.len(), self.cfg.security.replay.map_or(0, |r| r.max_entries))
    }

    /// The state of a session, if it is live.
    pub fn session_state(&self, session_id: &str) -> Option<SessionState> {
        self.sessions.get(session_id).map(|s| s.state)
    }

    /// The current payload mode of a session.
    pub fn session_mode(&self, session_id: &str) -> Option<PayloadMode> {
        self.sessions.get(session_id).map(|s| s.mode)
    }

    /// Tokens and USD used by a session so far.
    pub fn session_usage(&self, session_id: &str) -> Option<(u64, f64)> {
        self.sessions.get(session_id).map(|s| (s.tokens_used, s.cost_usd))
    }

    /// A session's bounded history of finished tasks, oldest first.
    pub fn session_history(&self, session_id: &str) -> Vec<HistoryItem> {
        let Some(s) = self.sessions.get(session_id) else { return Vec::new() };
        s.history
            .iter()
            .map(|h| HistoryItem { task_id: h.task_id.to_string(), skill: h.skill.to_string(), status: h.status })
            .collect()
    }

    /// The initiator's trust domain as established for a session.
    pub fn session_peer_domain(&self, session_id: &str) -> Option<&str> {
        self.sessions.get(session_id).map(|s| &*s.peer_domain)
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<ResponderEvent> {
        self.events.pop_front()
    }

    /// When [`Responder::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let session = self.expiry.peek().map(|Reverse((t, _))| *t);
        let task = self.task_deadlines.peek().map(|Reverse((t, _, _))| *t);
        match (session, task) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next task the machine ended while it was running: its delegate's work must be stopped and `reply` sent
    /// to its submitter. Drivers drain this after every call into the machine (a message can end a session that
    /// expired meanwhile; TASK_CANCEL and SESSION_CLOSE end tasks; so does [`Responder::handle_timeout`]).
    pub fn poll_aborted(&mut self) -> Option<Aborted> {
        self.aborted.pop_front()
    }

    /// Reaps sessions whose TTL has run out. Returns the tasks of theirs that were still running (their work must be
    /// stopped); each is also queued, with its submitter's answer, for [`Responder::poll_aborted`].
    #[must_use = "the delegates' work of the returned tasks must be stopped (or drain `poll_aborted`)"]
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<TaskKey> {
        let mut aborted = Vec::new();
        while let Some(Reverse((deadline, _))) = self.expiry.peek() {
            if *deadline > now {
                break;
            }
            let Some(Reverse((_, id))) = self.expiry.pop() else { break };
            let Some(session) = self.sessions.get(&id) else { continue };
            let real = session.deadline();
            if real > now {
                // Activity moved the deadline; re-arm with the real one.
                self.expiry.push(Reverse((real, id)));
                continue;
            }
            aborted.extend(self.end_session(&id, Ended::Expired));
        }
        while let Some(Reverse((deadline, _, _))) = self.task_deadlines.peek() {
            if *deadline > now {
                break;
            }
            let Some(Reverse((deadline, session_id, task_id))) = self.task_deadlines.pop() else { break };
            aborted.extend(self.end_past_deadline(deadline, &session_id, &task_id));
        }
        if !self.held.is_empty() && self.held_sweep.is_none_or(|at| at <= now) {
            self.held.expire(now, &self.cfg.limits.held);
            // Swept at most once a second (or once per TTL, if shorter): an answer may outlive its TTL by that much.
            self.held_sweep = now.checked_add(self.cfg.limits.held.ttl.min(HELD_SWEEP));
        }
        // Without replay protection the table stays empty: no need to read the clock.
        if !self.replay.is_empty() {
            self.replay.prune(self.wall.now_utc());
        }
        aborted
    }

    /// Ends a task whose `fail_closed` contract's deadline passed while it ran (paper 7: the responder enforces the
    /// time budget, not only reports it): its work is aborted and its submitter told `CONTRACT_VIOLATED`.
    fn end_past_deadline(&mut self, deadline: Instant, session_id: &str, task_id: &str) -> Option<TaskKey> {
        let session = self.sessions.get_mut(session_id)?;
        if session.running.get(task_id)?.deadline != Some(deadline) {
            return None;
        }
        let task = session.running.remove(task_id)?;
        let peer = session.peer.to_string();
        let history_len = self.cfg.limits.history_len;
        session.record_history(task_id, task.skill, TaskStatus::Failed, history_len);
        self.running_total = self.running_total.saturating_sub(1);
        let contract = task.contract_id.as_deref().unwrap_or_default();
        let error = LdpError::policy(
            codes::CONTRACT_VIOLATED,
            format!("contract {contract}: DEADLINE_EXCEEDED, the deadline passed while the task ran (fail_closed)"),
        )
        .with_retryable(false);
        let key = TaskKey { session_id: session_id.to_owned(), task_id: task_id.to_owned() };
        let reply = self.envelope(session_id, &peer, TaskFailed::new(task_id.to_owned(), error), task.mode);
        self.aborted.push_back(Aborted { key: key.clone(), reply });
        Some(key)
    }

    fn end_session(&mut self, id: &str, how: Ended) -> Vec<TaskKey> {
        let Some(session) = self.sessions.remove(id) else { return Vec::new() };
        // Nobody can resume it any more.
        self.held.forget(id);
        let key = principal_key(session.owner.as_deref(), &session.peer);
        if let Some(n) = self.sessions_per_principal.get_mut(key.as_str()) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.sessions_per_principal.remove(key.as_str());
            }
        }
        self.running_total = self.running_total.saturating_sub(session.running.len());
        let mut running: Vec<(Box<str>, PayloadMode)> = session.running.into_iter().map(|(t, r)| (t, r.mode)).collect();
        // Hash order is not an order: keep aborts (and their ids drawn from the id source) deterministic.
        running.sort_unstable();
        let why = match how {
            Ended::Expired => "because the session expired",
            Ended::Closed => "because the session was closed",
        };
        let mut cancelled = Vec::with_capacity(running.len());
        for (task_id, mode) in running {
            let key = TaskKey { session_id: id.to_owned(), task_id: task_id.into() };
            self.abort(&session.peer, mode, key.clone(), why);
            cancelled.push(key);
        }
        if self.cfg.limits.tombstones > 0 {
            if self.ended_order.len() >= self.cfg.limits.tombstones
                && let Some(old) = self.ended_order.pop_front()
            {
                self.ended.remove(&old);
            }
            self.ended.insert(id.into(), how);
            self.ended_order.push_back(id.into());
        }
        self.events.push_back(match how {
            Ended::Expired => ResponderEvent::SessionExpired { session_id: id.to_owned(), aborted: cancelled.clone() },
            Ended::Closed => ResponderEvent::SessionClosed { session_id: id.to_owned(), aborted: cancelled.clone() },
        });
        cancelled
    }

    /// Queues the abort of a running task with the definite answer for its submitter.
    fn abort(&mut self, peer: &str, mode: PayloadMode, key: TaskKey, why: &str) {
        let error = LdpError::runtime(codes::CANCELLED, format!("cancelled {why}")).with_retryable(false);
        let reply = self.envelope(&key.session_id, peer, TaskFailed::new(key.task_id.clone(), error), mode);
        self.aborted.push_back(Aborted { key, reply });
    }

    /// Suspends every active session last used over `connection` (the connection dropped). Their TTL keeps
    /// running; results finished meanwhile are held (bounded) for [`Responder::take_held`].
    pub fn suspend_connection(&mut self, connection: u64) {
        for (id, s) in &mut self.sessions {
            if s.connection == Some(connection) && s.state == SessionState::Active {
                s.state = SessionState::Suspended;
                self.events.push_back(ResponderEvent::SessionSuspended { session_id: id.to_string() });
            }
        }
    }

    /// The answers held for `session_id` while it was away, each handed out exactly once, for the transport to
    /// write before anything else on the session's connection: first a TASK_FAILED `RESULT_NOT_KEPT` for every task
    /// whose answer was dropped over [`Limits::held`](crate::Limits::held), then the answers kept, oldest first.
    pub fn take_held(&mut self, session_id: &str) -> Vec<HeldAnswer> {
        let taken = self.held.take(session_id);
        let mut answers = Vec::with_capacity(taken.dropped.len() + taken.results.len());
        let why = "the server's limit on results held for a disconnected session was reached";
        for task_id in taken.dropped {
            let Some(env) = self.result_not_kept(session_id, &task_id, why) else { continue };
            match env.to_json() {
                Ok(json) => answers.push(HeldAnswer::new(task_id, json)),
                Err(e) => tracing::error!(error = %e, "cannot encode a RESULT_NOT_KEPT"),
            }
        }
        answers.extend(taken.results.into_iter().map(|(task_id, json)| HeldAnswer::new(task_id, json)));
        answers
    }

    /// Keeps a final answer to `task_id` that a transport could not deliver (its connection ended before the
    /// message was written), encoded as it would have been written, for the session's resume. Bounded with the
    /// machine's own held answers ([`Limits::held`](crate::Limits::held)); ignored when the session has ended.
    pub fn hold(&mut self, now: Instant, session_id: &str, task_id: &str, json: String) {
        if self.sessions.contains_key(session_id) {
            self.held.push(now, &self.cfg.limits.held, session_id, task_id, json);
        }
    }

    /// The connection that carries `session_id` now: the one its peer last used, while the session is active.
    /// `None` when it is suspended or gone (its answers are then held for the resume).
    pub fn connection_of(&self, session_id: &str) -> Option<u64> {
        self.sessions.get(session_id).filter(|s| s.state == SessionState::Active).and_then(|s| s.connection)
    }

    /// What the held-answers store holds now, and what it dropped.
    pub fn held_stats(&self) -> HeldStats {
        self.held.stats()
    }

    /// Replaces the bounds on held answers (a binding's configuration, e.g. the WebSocket server's); answers held
    /// already stay until the next answer or sweep enforces the new bounds.
    pub fn set_held_limits(&mut self, limits: HeldLimits) {
        self.cfg.limits.held = limits;
    }

    /// A TASK_FAILED with [`codes::RESULT_NOT_KEPT`] for `task_id`, addressed (and signed, when the session signs)
    /// like the result it replaces: for a binding that had to drop a result it held for the session's resume.
    /// `None` when the session is gone.
    pub fn result_not_kept(&mut self, session_id: &str, task_id: &str, why: &str) -> Option<Envelope> {
        let s = self.sessions.get(session_id)?;
        let (peer, mode) = (s.peer.to_string(), s.mode);
        let error =
            LdpError::runtime(codes::RESULT_NOT_KEPT, format!("the result of task {task_id:?} was not kept: {why}"))
                .with_retryable(false);
        Some(self.envelope(session_id, &peer, TaskFailed::new(task_id.to_owned(), error), mode))
    }

    /// Closes a session from the responder's side (RFC 3.2: SESSION_CLOSE goes either way): forgets it, and returns
    /// the SESSION_CLOSE to send to the initiator and the running tasks to abort.
    pub fn close_session(
        &mut self,
        session_id: &str,
        reason: Option<String>,
    ) -> Result<(Envelope, Vec<TaskKey>), SessionError> {
        let peer = self.peer_of(session_id)?;
        let cancelled = self.end_session(session_id, Ended::Closed);
        let env = self.envelope(session_id, &peer, SessionClose::new(reason), PayloadMode::Text);
        Ok((env, cancelled))
    }

    /// Handles one message as raw bytes from the transport.
    pub fn handle(&mut self, now: Instant, peer: &PeerContext, bytes: &[u8]) -> Result<Outcome, Refusal> {
        let env = decode(bytes)?;
        // The JCS algorithms verify the bytes as received (nulls and unknown members included).
        let received = if self.cfg.security.needs_raw_json() { Received::Bytes(bytes) } else { Received::Decoded };
        self.handle_received(now, peer, env, received)
    }

    /// Handles one decoded message. `raw` is the JSON as received, needed to verify JCS signatures.
    pub fn handle_envelope(
        &mut self,
        now: Instant,
        peer: &PeerContext,
        env: Envelope,
        raw: Option<&Value>,
    ) -> Result<Outcome, Refusal> {
        self.handle_received(now, peer, env, raw.into())
    }

    fn handle_received(
        &mut self,
        now: Instant,
        peer: &PeerContext,
        env: Envelope,
        raw: Received<'_>,
    ) -> Result<Outcome, Refusal> {
        self.handle_verified(now, peer, env, |security, env| verify_inbound(security, env, raw))
    }

    /// Handles a message that [`InboundCheck::check`] decoded and verified outside the machine (e.g. before taking
    /// the lock a runtime keeps around it). Every rule applies as in [`Responder::handle`], in the same order.
    pub fn handle_checked(&mut self, now: Instant, peer: &PeerContext, checked: Checked) -> Result<Outcome, Refusal> {
        let Checked { env, signature } = checked;
        self.handle_verified(now, peer, env, |_, _| signature)
    }

    /// The checks that can run without the machine's state, for use outside it: decoding and the signature policy
    /// (signature checks depend only on the configuration, which does not change).
    pub fn inbound_check(&self) -> InboundCheck {
        InboundCheck {
            security: Arc::new(self.cfg.security.clone()),
            max_identifier_len: self.cfg.limits.max_identifier_len,
        }
    }

    fn handle_verified(
        &mut self,
        now: Instant,
        peer: &PeerContext,
        env: Envelope,
        verify: impl FnOnce(&SecurityConfig, &Envelope) -> Result<(), LdpError>,
    ) -> Result<Outcome, Refusal> {
        // Before anything is stored or echoed (reaping is safe: it only frees).
        check_identifiers(&env, self.cfg.limits.max_identifier_len).map_err(|error| Refusal { error, reply: None })?;
        // Tasks of sessions reaped here are queued for `poll_aborted`, which the driver drains.
        let _reaped = self.handle_timeout(now);
        if let Body::Unknown(u) = &env.body {
            let error =
                LdpError::capability(codes::UNKNOWN_MESSAGE_TYPE, format!("unknown message type {:?}", u.type_name));
            return Err(self.refuse(&env, error));
        }
        if let Err(error) = verify(&self.cfg.security, &env) {
            return Err(self.refuse(&env, error));
        }
        if let Some(replay) = self.cfg.security.replay {
            let wall = self.wall.now_utc();
            let principal = principal_key(peer.principal().as_deref(), &env.from);
            if let Err(error) = self.replay.check_for(&replay, &env, &principal, wall) {
                return Err(self.refuse(&env, error));
            }
        } else {
            // Without replay protection the timestamp is still part of the envelope (RFC 3.1), and a message must
            // still act once: a duplicate SESSION_PROPOSE would otherwise open a second session.
            if ldp_types::time::parse_timestamp(&env.timestamp).is_err() {
                let error = LdpError::runtime(
                    codes::MALFORMED_MESSAGE,
                    format!("timestamp {:?} is not an RFC 3339 date-time", env.timestamp),
                )
                .with_retryable(false);
                return Err(self.refuse(&env, error));
            }
            let (window, entries) = (self.cfg.limits.unsigned_dedupe_window, self.cfg.limits.unsigned_dedupe_entries);
            if !self.dedupe.admit(now, window, entries, &env.session_id, &env.message_id) {
                let error = LdpError::security(
                    codes::REPLAY_DETECTED,
                    format!("message {} was already received in this session", env.message_id),
                );
                return Err(self.refuse(&env, error));
            }
        }
        if let Some(AuthenticatedPeer { delegate_id: Some(id), .. }) = &peer.authenticated
            && *id != env.from
        {
            let error = LdpError::identity(
                codes::UNAUTHENTICATED,
                format!("sender {:?} does not match the authenticated identity {id:?}", env.from),
            );
            return Err(self.refuse(&env, error));
        }
        match &env.body {
            Body::Hello(_) => Ok(Outcome::Reply(self.manifest_reply(&env))),
            Body::SessionPropose(_) => self.on_propose(now, peer, env),
            Body::TaskSubmit(_) => self.on_submit(now, peer, env),
            Body::TaskCancel(_) => self.on_cancel(now, peer, env),
            Body::TaskUpdate(_) => self.on_status_query(now, peer, env),
            Body::SessionClose(_) => self.on_close(now, peer, env),
            Body::Attestation(a) => {
                let attestation = a.clone();
                self.with_session(now, peer, &env)?;
                self.events.push_back(ResponderEvent::AttestationReceived {
                    session_id: env.session_id.clone(),
                    from: env.from.clone(),
                    attestation,
                });
                Ok(Outcome::Accepted)
            }
            Body::CapabilityManifest(_)
            | Body::SessionAccept(_)
            | Body::SessionReject(_)
            | Body::TaskResult(_)
            | Body::TaskFailed(_)
            | Body::Unknown(_) => {
                let error = session_error(
                    codes::INVALID_STATE,
                    format!("{} is sent by a responder, not to one", env.body.type_name()),
                )
                .with_retryable(false);
                Err(self.refuse(&env, error))
            }
        }
    }

    /// Builds, stamps and signs an outbound envelope.
    fn envelope(&mut self, session_id: &str, to: &str, body: impl Into<Body>, mode: PayloadMode) -> Envelope {
        let mut env = Envelope::new(
            self.ids.uuid(),
            ldp_types::time::format_timestamp(self.wall.now_utc()),
            session_id,
            self.cfg.card.delegate_id.as_str(),
            to,
            body,
        )
        .with_payload_mode(mode);
        // RFC 3.1's envelope has a `provenance` member; the reference transcript (ldp-session-flow.json, step 6)
        // fills it on TASK_RESULT with the body's record, and so does this responder (before signing, so the
        // algorithms that cover the envelope's provenance cover it; reference `hmac-sha256` covers neither copy).
        if let Body::TaskResult(r) = &env.body {
            env.provenance = Some(r.provenance.clone());
        }
        sign_outbound(&self.cfg.security, self.cfg.hmac_sha256_nonce, self.ids.as_mut(), &mut env);
        env
    }

    /// The in-protocol answer to a refused message.
    fn refuse(&mut self, env: &Envelope, error: LdpError) -> Refusal {
        let on_wire = reference_category(&error);
        let reply = match &env.body {
            Body::SessionPropose(_) => {
                self.events.push_back(ResponderEvent::SessionRejected { peer: env.from.clone(), error: error.clone() });
                let body = SessionReject::new(on_wire.message.clone(), Some(on_wire));
                self.envelope(&env.session_id, &env.from, body, PayloadMode::Text)
            }
            body => {
                let task_id = body.task_id().unwrap_or_default().to_owned();
                self.envelope(&env.session_id, &env.from, TaskFailed::new(task_id, on_wire), env.payload_mode)
            }
        };
        Refusal { error, reply: Some(reply) }
    }

    fn manifest_reply(&mut self, env: &Envelope) -> Envelope {
        let manifest = self.manifest.clone();
        self.envelope(&env.session_id, &env.from, CapabilityManifest::new(manifest), PayloadMode::Text)
    }

    fn initiator_domain(&self, peer: &PeerContext, declared: Option<&str>) -> Result<String, LdpError> {
        if let Some(auth) = &peer.authenticated {
            if let Some(d) = declared
                && d != auth.trust_domain
            {
                return Err(LdpError::policy(
                    codes::TRUST_VIOLATION,
                    format!("declared trust domain {d:?} contradicts the authenticated domain {:?}", auth.trust_domain),
                ));
            }
            return Ok(auth.trust_domain.clone());
        }
        let believed = declared.filter(|d| match &self.cfg.trust.declared_domains {
            DeclaredDomains::TakeAtWord => true,
            DeclaredDomains::Allow(list) => list.iter().any(|a| a == d),
            DeclaredDomains::Ignore => false,
        });
        match (believed, &self.cfg.trust.unidentified_domain) {
            (Some(d), _) => Ok(d.to_owned()),
            // A declaration the policy does not believe is no identification: the peer is unidentified.
            (None, Some(assumed)) => Ok(assumed.clone()),
            (None, _) => Err(LdpError::policy(
                codes::TRUST_VIOLATION,
                match declared {
                    Some(d) => format!("declared trust domain {d:?} is not accepted without authentication"),
                    None => "the initiator's trust domain is unknown (not authenticated)".to_owned(),
                },
            )),
        }
    }

    fn on_propose(&mut self, now: Instant, peer: &PeerContext, env: Envelope) -> Result<Outcome, Refusal> {
        let Body::SessionPropose(p) = &env.body else { return Err(self.refuse(&env, internal())) };
        let config = p.config.clone();
        let domain = match self.initiator_domain(peer, config.trust_domain.as_deref()) {
            Ok(d) => d,
            Err(e) => return Err(self.refuse(&env, e)),
        };
        if let Err(v) = self.cfg.card.trust_domain.check_session(&domain, config.required_trust_domain.as_deref()) {
            return Err(self.refuse(&env, LdpError::from(&v)));
        }
        if self.sessions.len() >= self.cfg.limits.max_sessions {
            let error = session_error(codes::CAPACITY_EXCEEDED, "too many sessions; retry later").with_retryable(true);
            return Err(self.refuse(&env, error));
        }
        let owner = peer.principal();
        let key = principal_key(owner.as_deref(), &env.from);
        let held = self.sessions_per_principal.get(key.as_str()).copied().unwrap_or(0);
        if held >= self.cfg.limits.max_sessions_per_principal {
            let error = session_error(
                codes::CAPACITY_EXCEEDED,
                format!("this peer holds {held} sessions, the most allowed; close one or retry later"),
            )
            .with_retryable(true);
            return Err(self.refuse(&env, error));
        }
        let negotiated =
            negotiate(&config.preferences(), &self.cfg.card.supported_payload_modes, &self.cfg.implemented_modes);
        let ttl_secs = match config.ttl_secs() {
            0 => ldp_types::SessionConfig::DEFAULT_TTL_SECS,
            n => n,
        };
        // A century bounds the TTL even when `max_ttl` does not, so that `last_activity + ttl` cannot overflow.
        let ttl = Duration::from_secs(ttl_secs).min(self.cfg.limits.max_ttl).min(MAX_TTL);
        // Keep the initiator's id when it is fresh and unused (the Rust SDK relies on it); assign one otherwise.
        let proposed = env.session_id.as_str();
        let session_id = if !proposed.is_empty()
            && proposed.len() <= 128
            && !self.sessions.contains_key(proposed)
            && !self.ended.contains_key(proposed)
        {
            proposed.to_owned()
        } else {
            self.ids.uuid()
        };
        let session = ResponderSession {
            peer: env.from.as_str().into(),
            owner: owner.map(Into::into),
            peer_delegate: peer.authenticated.as_ref().and_then(|a| a.delegate_id.as_deref()).map(Into::into),
            peer_domain: domain.as_str().into(),
            state: SessionState::Active,
            mode: negotiated.mode,
            fallback: negotiated.fallback_chain.clone().into_boxed_slice(),
            ttl,
            last_activity: now,
            connection: peer.connection,
            running: HashMap::new(),
            history: VecDeque::new(),
            context: Context::default(),
            tasks_submitted: 0,
            tokens_used: 0,
            cost_usd: 0.0,
        };
        self.expiry.push(Reverse((session.deadline(), session_id.as_str().into())));
        self.sessions.insert(session_id.as_str().into(), session);
        *self.sessions_per_principal.entry(key.into_boxed_str()).or_insert(0) += 1;
        self.events.push_back(ResponderEvent::SessionEstablished {
            session_id: session_id.clone(),
            peer: env.from.clone(),
            peer_domain: domain,
            mode: negotiated.mode,
        });
        let body = SessionAccept::new(session_id.clone(), negotiated.mode, Some(negotiated.fallback_chain));
        Ok(Outcome::Reply(self.envelope(&session_id, &env.from, body, PayloadMode::Text)))
    }

    /// Finds the message's session and checks that it is live and that the sender is its peer. A suspended session
    /// resumes on its peer's first message.
    fn with_session(&mut self, now: Instant, peer: &PeerContext, env: &Envelope) -> Result<(), Refusal> {
        let id = env.session_id.as_str();
        let authenticated = peer.authenticated.as_ref().and_then(|a| a.delegate_id.as_deref());
        // Another credential may not use the session, even under the same `from` and trust domain.
        let principal = peer.principal();
        // The common case, a live session, with one lookup.
        if let Some(session) = self.sessions.get_mut(id)
            && session.deadline() > now
        {
            let wrong_sender = !session.is_peer(&env.from, authenticated, principal.as_deref());
            if !wrong_sender {
                session.last_activity = now;
                if peer.connection.is_some() {
                    session.connection = peer.connection;
                }
                if session.state == SessionState::Suspended {
                    session.state = SessionState::Active;
                    self.events.push_back(ResponderEvent::SessionResumed { session_id: id.to_owned() });
                }
                return Ok(());
            }
        }
        let expired = self.sessions.get(id).is_some_and(|s| s.deadline() <= now);
        if expired {
            self.end_session(id, Ended::Expired);
        }
        let Some(session) = self.sessions.get_mut(id) else {
            let error = match self.ended.get(id) {
                Some(Ended::Expired) => {
                    session_error(codes::SESSION_EXPIRED, format!("session {id:?} expired; establish a new one"))
                }
                Some(Ended::Closed) => {
                    session_error(codes::SESSION_CLOSED, format!("session {id:?} is closed")).with_retryable(false)
                }
                None if id.is_empty() => {
                    session_error(codes::SESSION_NOT_FOUND, "no session: establish one with SESSION_PROPOSE first")
                }
                None => session_error(codes::SESSION_NOT_FOUND, format!("unknown session {id:?}")),
            };
            return Err(self.refuse(env, error));
        };
        let wrong_sender = !session.is_peer(&env.from, authenticated, principal.as_deref());
        if wrong_sender {
            let error =
                session_error(codes::NOT_SESSION_PEER, format!("{:?} is not the peer of session {id:?}", env.from))
                    .with_retryable(false);
            return Err(self.refuse(env, error));
        }
        session.last_activity = now;
        if peer.connection.is_some() {
            session.connection = peer.connection;
        }
        if session.state == SessionState::Suspended {
            session.state = SessionState::Active;
            self.events.push_back(ResponderEvent::SessionResumed { session_id: id.to_owned() });
        }
        Ok(())
    }

    fn on_submit(&mut self, now: Instant, peer: &PeerContext, env: Envelope) -> Result<Outcome, Refusal> {
        self.with_session(now, peer, &env)?;
        let Body::TaskSubmit(TaskSubmit { task_id, skill, input, contract, .. }) = &env.body else {
            return Err(self.refuse(&env, internal()));
        };
        let Some(session) = self.sessions.get(env.session_id.as_str()) else {
            return Err(self.refuse(&env, internal()));
        };
        let mut transparent_mode: Option<PayloadMode> = None;
        let error = if task_id.is_empty() {
            Some(LdpError::runtime(codes::MALFORMED_MESSAGE, "task_id must not be empty").with_retryable(false))
        } else if session.running.contains_key(task_id.as_str())
            // A failed task may be resubmitted under its id (payload fallback, retries); a finished one may not.
            || session.history.iter().any(|h| *h.task_id == **task_id && h.status != TaskStatus::Failed)
        {
            Some(session_error(codes::DUPLICATE_TASK, format!("task {task_id:?} already exists")).with_retryable(false))
        } else if self.cfg.card.capability(skill).is_none() {
            Some(LdpError::capability(
                codes::SKILL_NOT_FOUND,
                format!("skill {skill:?} is not declared by this delegate"),
            ))
        } else if env.payload_mode != session.mode && !session.fallback.contains(&env.payload_mode) {
            Some(LdpError::capability(
                codes::PAYLOAD_MODE_FAILED,
                format!("payload mode {} was not negotiated (session mode {})", env.payload_mode, session.mode),
            ))
        } else if self.running_total >= self.cfg.limits.max_concurrent_tasks {
            Some(LdpError::runtime(
                codes::CAPACITY_EXCEEDED,
                format!("all {} task slots are busy; retry later", self.cfg.limits.max_concurrent_tasks),
            ))
        } else if self.cfg.limits.max_tasks_per_session.is_some_and(|max| session.tasks_submitted >= max) {
            Some(LdpError::policy(codes::BUDGET_EXCEEDED, "the session's task limit is reached"))
        } else if self.cfg.limits.session_budget.max_tokens.is_some_and(|max| session.tokens_used >= max)
            || self.cfg.limits.session_budget.max_cost_usd.is_some_and(|max| session.cost_usd >= max)
        {
            Some(LdpError::policy(codes::BUDGET_EXCEEDED, "the session's budget is exhausted"))
        } else if let Err(e) = contract.as_ref().map(|c| c.limits()).transpose() {
            Some(LdpError::policy(codes::CONTRACT_VIOLATED, format!("contract cannot be honoured: {e}")))
        } else if let Err(e) = validate_payload(env.payload_mode, input) {
            // RFC 4.3: fallback is automatic and transparent. Under `Transparent`, run the task in the first lower
            // mode of the chain that accepts the input (clients such as the Python SDK send raw input in
            // semantic_frame mode); under `Explicit`, answer TASK_FAILED as the RFC's sequence diagram shows.
            transparent_mode = match self.cfg.fallback {
                FallbackStyle::Transparent => session
                    .fallback
                    .iter()
                    .copied()
                    .find(|m| m.number() < env.payload_mode.number() && validate_payload(*m, input).is_ok()),
                FallbackStyle::Explicit => None,
            };
            match transparent_mode {
                Some(_) => None,
                None => Some(LdpError::capability(
                    codes::PAYLOAD_MODE_FAILED,
                    format!("{} validation failed: {e}", env.payload_mode),
                )),
            }
        } else {
            None
        };
        if let Some(error) = error {
            if error.code == codes::PAYLOAD_MODE_FAILED {
                self.fall_back(&env.session_id, env.payload_mode);
            }
            return Err(self.refuse(&env, error));
        }
        if let Some(lower) = transparent_mode {
            self.fall_back_to(&env.session_id, env.payload_mode, lower);
        }
        let deadline = match &env.body {
            Body::TaskSubmit(submit) => fail_closed_deadline(submit.contract.as_deref(), now, self.wall.now_utc()),
            _ => None,
        };
        let Some(session) = self.sessions.get_mut(env.session_id.as_str()) else {
            return Err(self.refuse(&env, internal()));
        };
        // Accepted: take the task out of the message instead of copying it.
        let Envelope { session_id, from, payload_mode, body, .. } = env;
        let payload_mode = transparent_mode.unwrap_or(payload_mode);
        let Body::TaskSubmit(TaskSubmit { task_id, skill, input, contract, .. }) = body else {
            return Err(Refusal { error: internal(), reply: None });
        };
        session.tasks_submitted += 1;
        let history = session.context.snapshot();
        let keep_input = self.cfg.limits.context_turns > 0;
        session.running.insert(
            task_id.as_str().into(),
            RunningTask {
                skill: skill.as_str().into(),
                mode: payload_mode,
                contract_id: contract.as_ref().map(|c| c.contract_id.as_str().into()),
                admitted: now,
                deadline,
                // Parsed before admission (`limits()` refuses a contract whose predicates do not parse), so this
                // cannot fail here; a contract with only free-form entries keeps nothing.
                checks: contract.as_ref().and_then(|c| {
                    c.checkable_criteria()
                        .ok()
                        .filter(|criteria| !criteria.is_empty())
                        .map(|criteria| Box::new((criteria, c.policy.failure_policy)))
                }),
                input: keep_input.then(|| input.clone()),
            },
        );
        self.running_total += 1;
        if let Some(deadline) = deadline {
            self.task_deadlines.push(Reverse((deadline, session_id.as_str().into(), task_id.as_str().into())));
        }
        Ok(Outcome::Execute(TaskRequest {
            key: TaskKey { session_id, task_id },
            skill,
            input,
            payload_mode,
            contract: contract.map(|c| *c),
            peer: from,
            history,
        }))
    }

    /// Moves the session from `failed` to a chosen lower mode (transparent fallback).
    fn fall_back_to(&mut self, session_id: &str, failed: PayloadMode, to: PayloadMode) {
        let Some(s) = self.sessions.get_mut(session_id) else { return };
        if s.mode.number() > to.number() {
            s.mode = to;
        }
        self.events.push_back(ResponderEvent::ModeFellBack { session_id: session_id.to_owned(), from: failed, to });
    }

    /// RFC 4.3: a payload-mode failure moves the session down its fallback chain instead of ending it.
    fn fall_back(&mut self, session_id: &str, failed: PayloadMode) {
        let Some(s) = self.sessions.get_mut(session_id) else { return };
        if s.mode != failed {
            return;
        }
        if let Some(next) = s.fallback.iter().copied().find(|m| m.number() < failed.number()) {
            s.mode = next;
            self.events.push_back(ResponderEvent::ModeFellBack {
                session_id: session_id.to_owned(),
                from: failed,
                to: next,
            });
        }
    }

    fn on_cancel(&mut self, now: Instant, peer: &PeerContext, env: Envelope) -> Result<Outcome, Refusal> {
        self.with_session(now, peer, &env)?;
        let task_id = env.body.task_id().unwrap_or_default().to_owned();
        let key = TaskKey { session_id: env.session_id.clone(), task_id: task_id.clone() };
        let Some(mode) = self.end_task(&key, TaskStatus::Cancelled) else {
            let error =
                session_error(codes::TASK_NOT_FOUND, format!("task {task_id:?} is not running")).with_retryable(false);
            return Err(self.refuse(&env, error));
        };
        self.abort(&env.from, mode, key.clone(), "by the initiator");
        let error = LdpError::runtime(codes::CANCELLED, "cancelled by the initiator").with_retryable(false);
        let reply = self.envelope(&env.session_id, &env.from, TaskFailed::new(task_id, error), env.payload_mode);
        Ok(Outcome::Cancel { reply, cancelled: vec![key] })
    }

    /// TASK_UPDATE sent to a responder is answered as a status query (as the Rust reference SDK does).
    fn on_status_query(&mut self, now: Instant, peer: &PeerContext, env: Envelope) -> Result<Outcome, Refusal> {
        self.with_session(now, peer, &env)?;
        let task_id = env.body.task_id().unwrap_or_default();
        // A long task over HTTP outlives its request: once it has finished, the query fetches its result, for as long
        // as the session keeps it as context.
        let kept = self.sessions.get(env.session_id.as_str()).and_then(|s| {
            let (output, provenance) = s.context.result(task_id)?;
            Some((output.clone(), provenance.clone()))
        });
        if let Some((output, provenance)) = kept {
            let mode = provenance.payload_mode_used;
            let body = TaskResult::new(task_id.to_owned(), output, provenance);
            return Ok(Outcome::Reply(self.envelope(&env.session_id, &env.from, body, mode)));
        }
        let status = self.sessions.get(env.session_id.as_str()).and_then(|s| {
            if s.running.contains_key(task_id) {
                return Some("running");
            }
            s.history.iter().rev().find(|h| *h.task_id == *task_id).map(|h| match h.status {
                TaskStatus::Completed => "completed",
                TaskStatus::Failed => "failed",
                TaskStatus::Cancelled => "cancelled",
            })
        });
        let Some(status) = status else {
            let error =
                session_error(codes::TASK_NOT_FOUND, format!("task {task_id:?} is not known")).with_retryable(false);
            return Err(self.refuse(&env, error));
        };
        let body = TaskUpdate::new(task_id.to_owned(), None, Some(status.to_owned()));
        Ok(Outcome::Reply(self.envelope(&env.session_id, &env.from, body, env.payload_mode)))
    }

    fn on_close(&mut self, now: Instant, peer: &PeerContext, env: Envelope) -> Result<Outcome, Refusal> {
        self.with_session(now, peer, &env)?;
        let cancelled = self.end_session(&env.session_id, Ended::Closed);
        let reply = self.envelope(
            &env.session_id,
            &env.from,
            SessionClose::new(Some("acknowledged".into())),
            PayloadMode::Text,
        );
        Ok(Outcome::Cancel { reply, cancelled })
    }

    /// Removes a running task and records it in the history. Returns the mode it ran in, `None` if it was not
    /// running.
    fn end_task(&mut self, key: &TaskKey, status: TaskStatus) -> Option<PayloadMode> {
        let limits = &self.cfg.limits;
        let s = self.sessions.get_mut(key.session_id.as_str())?;
        let task = s.running.remove(key.task_id.as_str())?;
        self.running_total = self.running_total.saturating_sub(1);
        if let Some(input) = task.input {
            let turn = Turn { task_id: key.task_id.clone(), skill: task.skill.to_string(), input, output: None };
            s.context.push(turn, None, limits.context_turns, limits.context_bytes);
        }
        s.record_history(&key.task_id, task.skill, status, limits.history_len);
        Some(task.mode)
    }

    fn running(&self, key: &TaskKey) -> Result<&RunningTask, SessionError> {
        let s =
            self.sessions.get(key.session_id.as_str()).ok_or_else(|| Misuse::UnknownSession(key.session_id.clone()))?;
        s.running.get(key.task_id.as_str()).ok_or_else(|| Misuse::TaskEnded(key.task_id.clone()).into())
    }

    /// Sends a task's final answer, or holds it (bounded) while its session is suspended.
    fn deliver(&mut self, now: Instant, key: &TaskKey, env: Envelope) -> Delivery {
        let suspended = self.sessions.get(key.session_id.as_str()).is_some_and(|s| s.state == SessionState::Suspended);
        if !suspended {
            return Delivery::Send(env);
        }
        let limits = &self.cfg.limits.held;
        match env.to_json() {
            Ok(json) => self.held.push(now, limits, &key.session_id, &key.task_id, json),
            // Not kept, and reported as such on resume rather than lost silently.
            Err(_) => self.held.bury_one(now, limits, &key.session_id, &key.task_id),
        }
        Delivery::Held
    }

    /// A TASK_UPDATE for a running task. A task whose session's TTL has run out by `now` is not running: its
    /// session is reaped (and the task queued for [`Responder::poll_aborted`]) as [`Responder::handle`] would.
    pub fn progress(
        &mut self,
        now: Instant,
        key: &TaskKey,
        progress: Option<f64>,
        message: Option<String>,
    ) -> Result<Envelope, SessionError> {
        let progress = progress.map(|p| p.clamp(0.0, 1.0));
        self.update(now, key, TaskUpdate::new(key.task_id.clone(), progress, message))
    }

    /// A TASK_UPDATE carrying the next chunk of a running task's output (`partial_output`, docs/interop.md), with
    /// the expiry rule of [`Responder::progress`]. The chunk is the delegate's: text or JSON as its payload mode
    /// allows; it is not checked against the contract (the final output is).
    pub fn partial_output(&mut self, now: Instant, key: &TaskKey, chunk: RawJson) -> Result<Envelope, SessionError> {
        self.update(now, key, TaskUpdate::new(key.task_id.clone(), None, None).with_partial_output(chunk))
    }

    fn update(&mut self, now: Instant, key: &TaskKey, body: TaskUpdate) -> Result<Envelope, SessionError> {
        let _reaped = self.handle_timeout(now);
        let mode = self.running(key)?.mode;
        let peer = self.peer_of(&key.session_id)?;
        Ok(self.envelope(&key.session_id, &peer, body, mode))
    }

    fn peer_of(&self, session_id: &str) -> Result<String, SessionError> {
        self.sessions
            .get(session_id)
            .map(|s| s.peer.to_string())
            .ok_or_else(|| Misuse::UnknownSession(session_id.to_owned()).into())
    }

    /// Completes a task: builds the TASK_RESULT with full provenance (RFC 10.1.3), records usage against the
    /// session budget, and appends lineage entries for results obtained by re-delegating. A task whose session's TTL
    /// has run out by `now` cannot complete: the session is reaped first, as [`Responder::handle`] would, and the
    /// task is queued for [`Responder::poll_aborted`].
    pub fn complete_task(&mut self, now: Instant, key: &TaskKey, out: TaskOutput) -> Result<Delivery, SessionError> {
        let _reaped = self.handle_timeout(now);
        // One lookup of the session (and one of the task) for all the bookkeeping: this runs for every task.
        let history_len = self.cfg.limits.history_len;
        let s = self
            .sessions
            .get_mut(key.session_id.as_str())
            .ok_or_else(|| Misuse::UnknownSession(key.session_id.clone()))?;
        let task = s.running.remove(key.task_id.as_str()).ok_or_else(|| Misuse::TaskEnded(key.task_id.clone()))?;
        // The contract's machine-checkable predicates, checked by the responder on its own output (paper 7): under
        // `fail_closed` a violation is answered TASK_FAILED `CONTRACT_VIOLATED` naming each failed predicate, with the
        // output as `partial_output`; under `fail_open` the result goes out with the violations in its provenance.
        let violations =
            task.checks.as_deref().map(|(criteria, policy)| (ldp_types::check_output(criteria, &out.output), *policy));
        if let Some((violations, ldp_types::FailurePolicy::FailClosed)) = &violations
            && !violations.is_empty()
        {
            let details: Vec<String> = violations.iter().map(ToString::to_string).collect();
            let mut error = LdpError::policy(
                codes::CONTRACT_VIOLATED,
                format!(
                    "contract {} violated: {}",
                    task.contract_id.as_deref().unwrap_or_default(),
                    details.join("; ")
                ),
            );
            if let Ok(partial) = out.output.to_value() {
                error = error.with_partial_output(partial);
            }
            // Put the task back so that `fail_task` ends it through the one path that answers failures.
            s.running.insert(key.task_id.as_str().into(), task);
            return self.fail_task(now, key, error);
        }
        s.tokens_used = s.tokens_used.saturating_add(out.tokens_used.unwrap_or(0));
        s.cost_usd += out.cost_usd.unwrap_or(0.0);
        let skill = (task.input.is_some()).then(|| task.skill.to_string());
        s.record_history(&key.task_id, task.skill, TaskStatus::Completed, history_len);
        let peer = s.peer.to_string();
        self.running_total = self.running_total.saturating_sub(1);
        let mode = task.mode;
        let mut provenance =
            Provenance::new(self.cfg.card.delegate_id.as_str(), self.cfg.card.model_version.as_str(), mode);
        provenance.confidence = out.confidence;
        provenance.session_id = Some(key.session_id.clone());
        provenance.timestamp = Some(ldp_types::time::format_timestamp(self.wall.now_utc()));
        provenance.set_verification_status(out.verification_status);
        provenance.evidence = out.evidence;
        provenance.tokens_used = out.tokens_used;
        provenance.cost_usd = out.cost_usd;
        if let Some(model) = &out.model {
            // The model that actually answered (a provider's dated name), not only the one the card advertises.
            provenance.model_version.clone_from(model);
        }
        provenance.contract_id = task.contract_id.map(String::from);
        if let Some((violations, _)) = &violations {
            provenance.contract_satisfied = Some(violations.is_empty());
            provenance.contract_violations = violations.iter().map(|v| v.code().to_owned()).collect();
        }
        if let Some(signing_key) = &self.cfg.receipt_key {
            // Signed over what the provenance reports, so a client can check the figures against the key.
            let mut receipt = UsageReceipt::new(
                provenance.produced_by.as_str(),
                key.session_id.as_str(),
                key.task_id.as_str(),
                provenance.timestamp.clone().unwrap_or_default(),
            );
            receipt.model = Some(out.model.unwrap_or_else(|| provenance.model_version.clone()));
            receipt.tokens_in = out.tokens_in;
            receipt.tokens_out = out.tokens_out;
            receipt.tokens_total = provenance.tokens_used;
            receipt.cost_usd = provenance.cost_usd;
            receipt.wall_time_ms = u64::try_from(now.saturating_duration_since(task.admitted).as_millis()).ok();
            // Only an Ed25519 key is kept in the configuration ([`ResponderConfig::set_receipt_key`]), so signing
            // cannot fail; a result without a receipt is still a result.
            provenance.usage_receipt = receipt.sign(signing_key).ok().map(Box::new);
        }
        for sub in out.delegated {
            provenance.lineage.push(LineageEntry {
                delegate_id: sub.produced_by.clone(),
                model_version: sub.model_version.clone(),
                step: "delegated".to_owned(),
                timestamp: sub.timestamp.clone(),
                verification_status: sub.verification_status(),
            });
            provenance.lineage.extend(sub.lineage);
        }
        if let (Some(input), Some(skill)) = (task.input, skill)
            && let Some(s) = self.sessions.get_mut(key.session_id.as_str())
        {
            let turn = Turn { task_id: key.task_id.clone(), skill, input, output: Some(out.output.clone()) };
            let limits = &self.cfg.limits;
            s.context.push(turn, Some(Box::new(provenance.clone())), limits.context_turns, limits.context_bytes);
        }
        let env =
            self.envelope(&key.session_id, &peer, TaskResult::new(key.task_id.clone(), out.output, provenance), mode);
        Ok(self.deliver(now, key, env))
    }

    /// Fails a task with a typed error (with the expiry rule of [`Responder::complete_task`]).
    pub fn fail_task(&mut self, now: Instant, key: &TaskKey, error: LdpError) -> Result<Delivery, SessionError> {
        let _reaped = self.handle_timeout(now);
        let mode = self.running(key)?.mode;
        let peer = self.peer_of(&key.session_id)?;
        if error.code == codes::PAYLOAD_MODE_FAILED {
            self.fall_back(&key.session_id, mode);
        }
        self.end_task(key, TaskStatus::Failed);
        let env = self.envelope(&key.session_id, &peer, TaskFailed::new(key.task_id.clone(), error), mode);
        Ok(self.deliver(now, key, env))
    }
}

/// Recently seen `(session_id, message_id)` pairs, as digests, oldest first; bounded in time and count.
#[derive(Debug, Default)]
struct Dedupe {
    seen: HashSet<[u8; 16]>,
    order: VecDeque<(Instant, [u8; 16])>,
}

impl Dedupe {
    /// Records the message and says whether it is new. Entries older than `window` are forgotten, and the oldest
    /// when `max` are held: a flood can make the table forget, never refuse a new message.
    fn admit(&mut self, now: Instant, window: Duration, max: usize, session_id: &str, message_id: &str) -> bool {
        if max == 0 {
            return true;
        }
        while let Some((at, key)) = self.order.front() {
            if now.saturating_duration_since(*at) < window && self.order.len() < max {
                break;
            }
            self.seen.remove(key);
            self.order.pop_front();
        }
        let key = dedupe_key(session_id, message_id);
        if !self.seen.insert(key) {
            return false;
        }
        self.order.push_back((now, key));
        true
    }
}

/// A digest of the pair, length-prefixed so that no two pairs share an encoding.
fn dedupe_key(session_id: &str, message_id: &str) -> [u8; 16] {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update((session_id.len() as u64).to_be_bytes());
    h.update(session_id.as_bytes());
    h.update(message_id.as_bytes());
    let digest = h.finalize();
    let mut key = [0u8; 16];
    key.copy_from_slice(&digest[..16]);
    key
}

/// The key a session counts against in `max_sessions_per_principal`: the authenticated principal, else the
/// declared sender.
fn principal_key(owner: Option<&str>, from: &str) -> String {
    match owner {
        Some(p) => format!("auth:{p}"),
        None => format!("from:{from}"),
    }
}

/// Refuses a message with an identifier longer than `max` bytes: every one of them may be kept (in a session, the
/// replay table, an event), so a peer must not choose their size. Refused without a reply, which would echo them.
fn check_identifiers(env: &Envelope, max: usize) -> Result<(), LdpError> {
    let mut fields: [(&str, Option<&str>); 10] = [
        ("from", Some(&env.from)),
        ("to", Some(&env.to)),
        ("message_id", Some(&env.message_id)),
        ("session_id", Some(&env.session_id)),
        ("nonce", env.nonce.as_deref()),
        ("signature_algorithm", env.signature_algorithm.as_deref()),
        ("task_id", env.body.task_id()),
        ("skill", None),
        ("contract_id", None),
        ("trust_domain", None),
    ];
    match &env.body {
        Body::TaskSubmit(t) => {
            fields[7].1 = Some(&t.skill);
            fields[8].1 = t.contract.as_ref().map(|c| c.contract_id.as_str());
        }
        Body::SessionPropose(p) => {
            fields[8].1 = p.config.required_trust_domain.as_deref();
            fields[9].1 = p.config.trust_domain.as_deref();
        }
        _ => {}
    }
    match fields.iter().find(|(_, v)| v.is_some_and(|v| v.len() > max)) {
        None => Ok(()),
        Some((name, v)) => Err(LdpError::runtime(
            codes::MALFORMED_MESSAGE,
            format!("{name} is {} bytes long; at most {max} are accepted", v.map_or(0, str::len)),
        )
        .with_retryable(false)),
    }
}

/// Decodes a message as [`Responder::handle`] does: malformed input is refused without a reply.
fn decode(bytes: &[u8]) -> Result<Envelope, Refusal> {
    Envelope::from_slice(bytes).map_err(|e| Refusal { error: LdpError::from(&e), reply: None })
}

/// Decoding and signature verification of inbound messages, separated from the machine so that they can run
/// without exclusive access to it (see [`Responder::inbound_check`] and [`Responder::handle_checked`]).
#[derive(Debug, Clone)]
pub struct InboundCheck {
    security: Arc<SecurityConfig>,
    max_identifier_len: usize,
}

impl InboundCheck {
    /// Decodes `bytes` and checks the signature under the sender's policy. A message that does not decode is refused
    /// here exactly as [`Responder::handle`] refuses it; a signature failure is kept in the result, for the machine
    /// to answer in protocol (after its own earlier checks).
    pub fn check(&self, bytes: &[u8]) -> Result<Checked, Refusal> {
        let env = decode(bytes)?;
        check_identifiers(&env, self.max_identifier_len).map_err(|error| Refusal { error, reply: None })?;
        // The JCS algorithms verify the bytes as received (nulls and unknown members included).
        let received = if self.security.needs_raw_json() { Received::Bytes(bytes) } else { Received::Decoded };
        let signature = verify_inbound(&self.security, &env, received);
        Ok(Checked { env, signature })
    }
}

/// A decoded message and the verdict on its signature, for [`Responder::handle_checked`].
#[derive(Debug)]
pub struct Checked {
    env: Envelope,
    signature: Result<(), LdpError>,
}

impl Checked {
    /// The decoded message.
    pub fn envelope(&self) -> &Envelope {
        &self.env
    }
}

/// The error as a refusal sends it: a `security` failure (signature, replay, timestamp window) goes out with the
/// paper's `identity` category ("authentication or identity mismatch"), keeping its code, message, severity and
/// retryability, because the Python reference SDK accepts only the paper's seven categories and fails to read the
/// whole reply otherwise (docs/interop.md). The typed refusal and the responder's events keep `security`.
fn reference_category(error: &LdpError) -> LdpError {
    let mut on_wire = error.clone();
    if on_wire.category == ldp_types::ErrorCategory::Security {
        on_wire.category = ldp_types::ErrorCategory::Identity;
    }
    on_wire
}

/// How often, at most, [`Responder::handle_timeout`] sweeps held answers for their TTL.
const HELD_SWEEP: Duration = Duration::from_secs(1);

/// The longest TTL a session can have, whatever the configuration says.
const MAX_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

fn internal() -> LdpError {
    LdpError::runtime(codes::EXECUTION_FAILED, "internal state inconsistency")
}
