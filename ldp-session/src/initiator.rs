//! The initiator machine: one peer, any number of sessions with it.
//!
//! Build outbound messages with [`Initiator::hello`], [`Initiator::propose`], [`Initiator::submit`],
//! [`Initiator::cancel`] and [`Initiator::close`]; feed every reply to [`Initiator::handle`]; drain
//! [`Initiator::poll_outbound`] (automatic resubmissions after a payload-mode fallback) and
//! [`Initiator::poll_event`]. A driver whose connection drops resumes through [`Initiator::handle_disconnect`],
//! [`Initiator::handle_reconnect`], [`Initiator::poll_transmit`] and [`Initiator::handle_resume_answer`]; deadlines
//! run through [`Initiator::poll_timeout`] and [`Initiator::handle_timeout`] (module `resume`).

mod resume;

use crate::keyed::PeerMap;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ldp_types::{
    Body, CapabilityManifest, ContractLimits, ContractOutcome, DelegationContract, Envelope, Hello, LdpError, Manifest,
    PayloadMode, Provenance, RawJson, SessionAccept, SessionClose, SessionConfig, SessionPropose, SessionReject,
    TaskCancel, TaskFailed, TaskResult, TaskSubmit, TaskUpdate, apply_contract, codes, validate_payload,
};
use serde_json::Value;

use crate::clock::{IdSource, WallClock};
use crate::config::InitiatorConfig;
use crate::error::{Misuse, PeerMisbehaved, SessionError};
use crate::responder::TaskRequest;
use crate::security::{Received, ReplayGuard, sign_outbound, verify_inbound};
use crate::{SessionState, TaskKey};

pub use resume::{DEFAULT_MAX_RESUMES, DEFAULT_RESUME_GRACE, Expired, ResumeVerdict, Transmit};

/// Something the initiator learned from its peer.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum InitiatorEvent {
    /// The peer's CAPABILITY_MANIFEST.
    Manifest(Manifest),
    /// A session became active.
    SessionEstablished {
        /// The authoritative session id (the responder's).
        session_id: String,
        /// The negotiated mode.
        mode: PayloadMode,
        /// The fallback chain.
        fallback_chain: Vec<PayloadMode>,
    },
    /// The proposal was rejected.
    SessionRejected {
        /// Why.
        error: LdpError,
    },
    /// Progress of a task.
    TaskProgress {
        /// The task.
        key: TaskKey,
        /// Progress in 0.0-1.0.
        progress: Option<f64>,
        /// Status message.
        message: Option<String>,
    },
    /// A task failed in its payload mode and was queued for resubmission in the next fallback mode.
    FellBack {
        /// The task.
        key: TaskKey,
        /// The failed mode.
        from: PayloadMode,
        /// The mode of the resubmission.
        to: PayloadMode,
    },
    /// A task completed; provenance records the contract check.
    TaskCompleted {
        /// The task.
        key: TaskKey,
        /// The output, as received.
        output: RawJson,
        /// Its provenance.
        provenance: Provenance,
    },
    /// A task failed (including a `fail_closed` contract violation).
    TaskFailed {
        /// The task.
        key: TaskKey,
        /// Why.
        error: LdpError,
    },
    /// The session was closed (by either side).
    SessionClosed {
        /// The session.
        session_id: String,
    },
    /// The peer sent an ATTESTATION.
    Attestation {
        /// The session.
        session_id: String,
        /// The attestation.
        attestation: ldp_types::Attestation,
    },
}

#[derive(Debug)]
struct InitiatorSession {
    state: SessionState,
    mode: PayloadMode,
    fallback: Vec<PayloadMode>,
}

#[derive(Debug)]
struct PendingTask {
    skill: String,
    input: RawJson,
    mode: PayloadMode,
    contract: Option<(DelegationContract, ContractLimits)>,
    resume: resume::ResumeState,
}

/// A request whose answer the initiator waits for under a deadline ([`Initiator::set_answer_timeout`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Awaited {
    Proposal(String),
    Task(TaskKey),
}

/// The initiator machine.
#[derive(Debug)]
pub struct Initiator {
    cfg: InitiatorConfig,
    wall: Arc<dyn WallClock>,
    ids: Box<dyn IdSource>,
    peer: String,
    manifest: Option<Manifest>,
    proposals: VecDeque<String>,
    sessions: PeerMap<String, InitiatorSession>,
    tasks: PeerMap<TaskKey, PendingTask>,
    replay: ReplayGuard,
    outbound: VecDeque<Envelope>,
    events: VecDeque<InitiatorEvent>,
    /// Status queries and resubmissions of a resume.
    transmit: VecDeque<Transmit>,
    resume_grace: Duration,
    /// Re-query interval of tasks reported running, for carriers without pushed answers.
    status_poll: Option<Duration>,
    /// Losses of one task's answer tolerated before it fails.
    max_resumes: u32,
    answer_timeout: Option<Duration>,
    /// When each request written under the answer timeout is due.
    deadlines: HashMap<Awaited, Instant>,
}

impl Initiator {
    /// An initiator talking to `peer` (its delegate id, or its URL until the identity card is known).
    pub fn new(
        cfg: InitiatorConfig,
        peer: impl Into<String>,
        wall: Arc<dyn WallClock>,
        ids: Box<dyn IdSource>,
    ) -> Self {
        Self {
            cfg,
            wall,
            ids,
            peer: peer.into(),
            manifest: None,
            proposals: VecDeque::new(),
            sessions: PeerMap::default(),
            tasks: PeerMap::default(),
            replay: ReplayGuard::default(),
            outbound: VecDeque::new(),
            events: VecDeque::new(),
            transmit: VecDeque::new(),
            resume_grace: DEFAULT_RESUME_GRACE,
            status_poll: None,
            max_resumes: resume::DEFAULT_MAX_RESUMES,
            answer_timeout: None,
            deadlines: HashMap::new(),
        }
    }

    /// Addresses later messages to `peer` (e.g. once the identity card has been fetched).
    pub fn set_peer(&mut self, peer: impl Into<String>) {
        self.peer = peer.into();
    }

    /// The peer's manifest, once received.
    pub fn manifest(&self) -> Option<&Manifest> {
        self.manifest.as_ref()
    }

    /// A session's state.
    pub fn session_state(&self, session_id: &str) -> Option<SessionState> {
        self.sessions.get(session_id).map(|s| s.state)
    }

    /// A session's current payload mode.
    pub fn session_mode(&self, session_id: &str) -> Option<PayloadMode> {
        self.sessions.get(session_id).map(|s| s.mode)
    }

    /// The number of tasks submitted and not yet ended (answered, failed, expired or given up).
    pub fn pending_tasks(&self) -> usize {
        self.tasks.len()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<InitiatorEvent> {
        self.events.pop_front()
    }

    /// The next message the machine wants sent on its own (a resubmission after fallback).
    pub fn poll_outbound(&mut self) -> Option<Envelope> {
        self.outbound.pop_front()
    }

    fn envelope(&mut self, session_id: &str, body: impl Into<Body>, mode: PayloadMode) -> Envelope {
        let mut env = Envelope::new(
            self.ids.uuid(),
            ldp_types::time::format_timestamp(self.wall.now_utc()),
            session_id,
            self.cfg.delegate_id.as_str(),
            self.peer.as_str(),
            body,
        )
        .with_payload_mode(mode);
        sign_outbound(&self.cfg.security, self.cfg.hmac_sha256_nonce, self.ids.as_mut(), &mut env);
        env
    }

    /// HELLO.
    pub fn hello(&mut self) -> Envelope {
        let body = Hello::new(self.cfg.delegate_id.clone(), self.cfg.supported_modes.clone());
        self.envelope("", body, PayloadMode::Text)
    }

    /// SESSION_PROPOSE. Preferences default to our supported modes; our declared domain is added for peers that
    /// read it. The proposal carries a fresh session id, which the responder may keep or replace.
    pub fn propose(&mut self, mut config: SessionConfig) -> Envelope {
        if config.preferred_payload_modes.is_none() && config.payload_mode.is_none() {
            config.preferred_payload_modes = Some(self.cfg.supported_modes.clone());
        }
        if config.trust_domain.is_none() {
            config.trust_domain = self.cfg.trust_domain.clone();
        }
        let proposed = self.ids.uuid();
        self.proposals.push_back(proposed.clone());
        // RFC 5.1: the session is PROPOSED until the answer arrives (ACTIVE on accept, FAILED on reject).
        self.sessions.insert(
            proposed.clone(),
            InitiatorSession { state: SessionState::Proposed, mode: PayloadMode::Text, fallback: Vec::new() },
        );
        self.envelope(&proposed, SessionPropose::new(config), PayloadMode::Text)
    }

    fn active(&self, session_id: &str) -> Result<&InitiatorSession, SessionError> {
        let s = self.sessions.get(session_id).ok_or_else(|| Misuse::UnknownSession(session_id.to_owned()))?;
        if s.state != SessionState::Active {
            return Err(Misuse::NotActive { session_id: session_id.to_owned(), state: s.state }.into());
        }
        Ok(s)
    }

    /// TASK_SUBMIT in the session's current mode.
    ///
    /// `parent` is the task this one is delegated from, if any: its contract's `max_delegation_depth` is enforced
    /// here (a depth of 0 forbids re-delegation) and passed on, reduced by one.
    pub fn submit(
        &mut self,
        session_id: &str,
        skill: &str,
        input: impl Into<RawJson>,
        contract: Option<DelegationContract>,
        parent: Option<&TaskRequest>,
    ) -> Result<Envelope, SessionError> {
        let input = input.into();
        let session = self.active(session_id)?;
        // RFC 4.3: an input the session's mode cannot carry goes out in the first fallback mode that can
        // (text carries anything), rather than failing.
        let candidates: Vec<PayloadMode> = std::iter::once(session.mode)
            .chain(session.fallback.iter().copied().filter(|m| m.number() < session.mode.number()))
            .collect();
        let contract = delegated_contract(contract, parent)?;
        let mut fitted = Err(ldp_types::Error::InvalidSemanticFrame("no mode can carry this input"));
        let mut mode = candidates.first().copied().unwrap_or(PayloadMode::Text);
        for candidate in candidates {
            fitted = fit_payload(&input, candidate);
            if fitted.is_ok() {
                mode = candidate;
                break;
            }
        }
        let input = fitted.map_err(Misuse::Payload)?;
        let limits = contract
            .as_ref()
            .map(|c| c.limits().map(|l| (c.clone(), l)))
            .transpose()
            .map_err(Misuse::InvalidContract)?;
        let task_id = self.ids.uuid();
        let key = TaskKey { session_id: session_id.to_owned(), task_id: task_id.clone() };
        let body = TaskSubmit::new(task_id, skill.to_owned(), input.clone(), contract);
        let env = self.envelope(session_id, body, mode);
        self.tasks.insert(
            key,
            PendingTask { skill: skill.to_owned(), input, mode, contract: limits, resume: Default::default() },
        );
        Ok(env)
    }

    /// TASK_CANCEL.
    pub fn cancel(&mut self, key: &TaskKey) -> Result<Envelope, SessionError> {
        let mode = self.tasks.get(key).map(|t| t.mode).ok_or_else(|| Misuse::UnknownTask(key.task_id.clone()))?;
        Ok(self.envelope(&key.session_id, TaskCancel::new(key.task_id.clone()), mode))
    }

    /// SESSION_CLOSE. The session is closed locally at once.
    pub fn close(&mut self, session_id: &str, reason: Option<String>) -> Result<Envelope, SessionError> {
        let s = self.sessions.get_mut(session_id).ok_or_else(|| Misuse::UnknownSession(session_id.to_owned()))?;
        s.state = SessionState::Closed;
        self.tasks.retain(|k, _| k.session_id != session_id);
        Ok(self.envelope(session_id, SessionClose::new(reason), PayloadMode::Text))
    }

    /// Handles one reply as raw bytes: decoded by [`Envelope::from_slice`], the decoder the responder uses, and its
    /// signature (for the JCS algorithms) verified over the bytes as received.
    pub fn handle(&mut self, bytes: &[u8]) -> Result<(), SessionError> {
        let env = Envelope::from_slice(bytes).map_err(PeerMisbehaved::UndecodableReply)?;
        let received = if self.cfg.security.needs_raw_json() { Received::Bytes(bytes) } else { Received::Decoded };
        self.handle_received(env, received)
    }

    /// Handles one decoded reply; `raw` is the JSON as received when available (JCS signatures need it).
    pub fn handle_envelope(&mut self, env: Envelope, raw: Option<&Value>) -> Result<(), SessionError> {
        self.handle_received(env, raw.into())
    }

    fn handle_received(&mut self, env: Envelope, raw: Received<'_>) -> Result<(), SessionError> {
        verify_inbound(&self.cfg.security, &env, raw).map_err(SessionError::Peer)?;
        if let Some(replay) = self.cfg.security.replay {
            self.replay.check(&replay, &env, self.wall.now_utc()).map_err(SessionError::Peer)?;
        }
        match env.body {
            Body::CapabilityManifest(m) => self.on_manifest(m),
            Body::SessionAccept(a) => return self.on_session_accept(a),
            Body::SessionReject(r) => self.on_session_reject(&env.session_id, r),
            Body::TaskUpdate(u) => self.on_task_update(env.session_id, u),
            Body::TaskResult(r) => return self.on_task_result(env.session_id, r),
            Body::TaskFailed(f) => return self.on_task_failed(env.session_id, f),
            Body::SessionClose(_) => self.on_session_close(env.session_id),
            Body::Attestation(a) => {
                self.events.push_back(InitiatorEvent::Attestation { session_id: env.session_id, attestation: a });
            }
            other @ (Body::Hello(_)
            | Body::SessionPropose(_)
            | Body::TaskSubmit(_)
            | Body::TaskCancel(_)
            | Body::Unknown(_)) => {
                return Err(PeerMisbehaved::NotAReply { message_type: other.type_name().to_owned() }.into());
            }
        }
        Ok(())
    }

    /// CAPABILITY_MANIFEST: the peer's capabilities, kept and reported.
    fn on_manifest(&mut self, m: CapabilityManifest) {
        let manifest = Manifest::from_value(&m.capabilities);
        self.manifest = Some(manifest.clone());
        self.events.push_back(InitiatorEvent::Manifest(manifest));
    }

    /// SESSION_ACCEPT: the session is ACTIVE under the responder's id, matched to a proposal of ours.
    fn on_session_accept(&mut self, a: SessionAccept) -> Result<(), SessionError> {
        // The responder's id is authoritative; match it to our proposal, or to the oldest one. An accept
        // that answers no proposal of ours is not a session we asked for.
        let matched = match self.proposals.iter().position(|p| *p == a.session_id) {
            Some(i) => self.proposals.remove(i),
            None => self.proposals.pop_front(),
        };
        let Some(proposed) = matched else {
            return Err(PeerMisbehaved::UnsolicitedAccept { session_id: a.session_id }.into());
        };
        self.deadlines.remove(&Awaited::Proposal(proposed.clone()));
        if proposed != a.session_id {
            self.sessions.remove(&proposed);
        }
        let fallback = a.fallback_chain.clone().unwrap_or_else(|| self.default_fallback(a.negotiated_mode));
        self.sessions.insert(
            a.session_id.clone(),
            InitiatorSession { state: SessionState::Active, mode: a.negotiated_mode, fallback: fallback.clone() },
        );
        self.events.push_back(InitiatorEvent::SessionEstablished {
            session_id: a.session_id,
            mode: a.negotiated_mode,
            fallback_chain: fallback,
        });
        Ok(())
    }

    /// SESSION_REJECT: the proposal it answers has FAILED.
    fn on_session_reject(&mut self, session_id: &str, r: SessionReject) {
        let matched = match self.proposals.iter().position(|p| *p == session_id) {
            Some(i) => self.proposals.remove(i),
            None => self.proposals.pop_front(),
        };
        if let Some(p) = &matched {
            self.deadlines.remove(&Awaited::Proposal(p.clone()));
        }
        if let Some(s) = matched.and_then(|p| self.sessions.get_mut(&p)) {
            s.state = SessionState::Failed;
        }
        let error = r.error.unwrap_or_else(|| LdpError::policy(codes::SESSION_REJECTED, r.reason));
        self.events.push_back(InitiatorEvent::SessionRejected { error });
    }

    /// TASK_UPDATE: progress, reported.
    fn on_task_update(&mut self, session_id: String, u: TaskUpdate) {
        let key = TaskKey { session_id, task_id: u.task_id };
        self.events.push_back(InitiatorEvent::TaskProgress { key, progress: u.progress, message: u.message });
    }

    /// TASK_RESULT: a task of ours ends, through its contract check.
    fn on_task_result(&mut self, session_id: String, r: TaskResult) -> Result<(), SessionError> {
        let key = TaskKey { session_id, task_id: r.task_id };
        // A result for no task of ours (never submitted, already finished, or of a closed session) is not
        // reported: it would escape the contract check of the task it claims to finish.
        self.deadlines.remove(&Awaited::Task(key.clone()));
        let Some(pending) = self.tasks.remove(&key) else {
            return Err(PeerMisbehaved::UnknownTaskResult { task_id: key.task_id }.into());
        };
        // A record just decoded is held once: unwrapped without a copy.
        let provenance = Arc::unwrap_or_clone(r.provenance);
        let event = match pending.contract {
            Some((contract, limits)) => {
                match apply_contract(&contract, &limits, &r.output, provenance, self.wall.now_utc()) {
                    ContractOutcome::Accepted(provenance) => {
                        InitiatorEvent::TaskCompleted { key, output: r.output, provenance }
                    }
                    ContractOutcome::Rejected(error) => InitiatorEvent::TaskFailed { key, error },
                }
            }
            None => InitiatorEvent::TaskCompleted { key, output: r.output, provenance },
        };
        self.events.push_back(event);
        Ok(())
    }

    /// TASK_FAILED: a task of ours ends, or falls back to the next payload mode (RFC 4.3).
    fn on_task_failed(&mut self, session_id: String, f: TaskFailed) -> Result<(), SessionError> {
        let key = TaskKey { session_id, task_id: f.task_id };
        if f.error.code == codes::PAYLOAD_MODE_FAILED && self.fall_back(&key)? {
            return Ok(());
        }
        self.tasks.remove(&key);
        self.deadlines.remove(&Awaited::Task(key.clone()));
        if matches!(f.error.code.as_str(), codes::SESSION_EXPIRED | codes::SESSION_CLOSED | codes::SESSION_NOT_FOUND)
            && let Some(s) = self.sessions.get_mut(&key.session_id)
        {
            s.state = SessionState::Closed;
        }
        self.events.push_back(InitiatorEvent::TaskFailed { key, error: f.error });
        Ok(())
    }

    /// SESSION_CLOSE from the peer: the session and its pending tasks end.
    fn on_session_close(&mut self, session_id: String) {
        if let Some(s) = self.sessions.get_mut(&session_id) {
            s.state = SessionState::Closed;
        }
        // Tasks still pending in a session the peer closed end definitely, never silently.
        let mut orphans: Vec<TaskKey> = self.tasks.keys().filter(|k| k.session_id == session_id).cloned().collect();
        orphans.sort();
        for key in orphans {
            self.tasks.remove(&key);
            self.deadlines.remove(&Awaited::Task(key.clone()));
            let error = LdpError::session(codes::SESSION_CLOSED, "the peer closed the session").with_retryable(false);
            self.events.push_back(InitiatorEvent::TaskFailed { key, error });
        }
        self.events.push_back(InitiatorEvent::SessionClosed { session_id });
    }

    fn default_fallback(&self, mode: PayloadMode) -> Vec<PayloadMode> {
        let peer_modes = self.manifest.as_ref().map(|m| m.supported_modes.clone()).unwrap_or_default();
        let mut chain: Vec<PayloadMode> = self
            .cfg
            .supported_modes
            .iter()
            .copied()
            .filter(|m| m.number() < mode.number() && (peer_modes.contains(m) || *m == PayloadMode::Text))
            .collect();
        chain.sort_by_key(|m| std::cmp::Reverse(m.number()));
        if mode != PayloadMode::Text && !chain.contains(&PayloadMode::Text) {
            chain.push(PayloadMode::Text);
        }
        chain
    }

    /// RFC 4.3: downgrade the session and queue the task again in the next mode. Returns false when no fallback is
    /// left (the failure then surfaces).
    fn fall_back(&mut self, key: &TaskKey) -> Result<bool, SessionError> {
        let Some(task) = self.tasks.get(key) else { return Ok(false) };
        let failed = task.mode;
        let Some(session) = self.sessions.get_mut(&key.session_id) else { return Ok(false) };
        let Some(next) = session.fallback.iter().copied().find(|m| m.number() < failed.number()) else {
            return Ok(false);
        };
        if session.mode.number() > next.number() {
            session.mode = next;
        }
        let Some(task) = self.tasks.get_mut(key) else { return Ok(false) };
        task.input = fit_payload(&task.input, next).map_err(Misuse::Payload)?;
        task.mode = next;
        let body = TaskSubmit::new(
            key.task_id.clone(),
            task.skill.clone(),
            task.input.clone(),
            task.contract.as_ref().map(|(c, _)| c.clone()),
        );
        let env = self.envelope(&key.session_id, body, next);
        self.outbound.push_back(env);
        self.events.push_back(InitiatorEvent::FellBack { key: key.clone(), from: failed, to: next });
        Ok(true)
    }
}

/// The contract of a sub-task of `parent`: `contract` (or, when none is given, the parent's own) with the delegation
/// depth the parent has left, one less than its `max_delegation_depth`; `DelegationDepthExceeded` when the parent may
/// not delegate at all. The one rule of delegation depth, used by the initiator and by delegates that delegate.
pub fn delegated_contract(
    contract: Option<DelegationContract>,
    parent: Option<&TaskRequest>,
) -> Result<Option<DelegationContract>, SessionError> {
    let Some(parent_max) = parent.and_then(|p| p.contract.as_ref()).and_then(|c| c.policy.max_delegation_depth) else {
        return Ok(contract);
    };
    if parent_max == 0 {
        return Err(Misuse::DelegationDepthExceeded { depth: 1, max: 0 }.into());
    }
    let remaining = parent_max - 1;
    let mut c = match (contract, parent.and_then(|p| p.contract.clone())) {
        (Some(c), _) => c,
        (None, Some(parent_contract)) => parent_contract,
        (None, None) => return Ok(None),
    };
    c.policy.max_delegation_depth = Some(c.policy.max_delegation_depth.map_or(remaining, |m| m.min(remaining)));
    Ok(Some(c))
}

/// Shapes an input for `mode`: text mode renders a semantic frame as readable text; semantic-frame mode requires a
/// valid frame.
pub fn fit_payload(input: &RawJson, mode: PayloadMode) -> Result<RawJson, ldp_types::Error> {
    match mode {
        // Only an object can be a frame; anything else is sent as it is, unparsed.
        PayloadMode::Text if !input.json().starts_with('{') => Ok(input.clone()),
        PayloadMode::Text => Ok(match input.to_value()? {
            Value::Object(obj) if obj.contains_key("instruction") => {
                let mut lines = Vec::new();
                for key in ["task_type", "instruction"] {
                    if let Some(Value::String(v)) = obj.get(key) {
                        lines.push(format!("{key}: {v}"));
                    }
                }
                for (k, v) in &obj {
                    if k != "task_type" && k != "instruction" {
                        let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                        lines.push(format!("{k}: {text}"));
                    }
                }
                RawJson::from(lines.join("\n"))
            }
            _ => input.clone(),
        }),
        mode => {
            validate_payload(mode, input)?;
            Ok(input.clone())
        }
    }
}
