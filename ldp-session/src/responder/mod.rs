//! The responder machine: serves a delegate's side of every session.
//!
//! Calling order: feed each inbound message to [`Responder::handle`] (or `handle_envelope`), act on the returned
//! [`Outcome`], report task progress and completion with [`Responder::progress`], [`Responder::complete_task`] and
//! [`Responder::fail_task`], drain [`Responder::poll_event`] and [`Responder::poll_aborted`] (tasks whose work must
//! stop), and call [`Responder::handle_timeout`] when [`Responder::poll_timeout`] says so (it reaps expired sessions
//! and returns their memory). Every call that depends on time takes the monotonic `now`.
//!
//! Where each rule lives:
//!
//! | file | owns |
//! | --- | --- |
//! | `mod.rs` | [`Responder`]: the state, the calling order, [`Responder::handle_timeout`], the checks every message passes in order (`handle_verified`: identifiers, signature, replay or dedupe, authenticated sender) and the dispatch per body; building and signing every outbound message (`envelope`, `refuse`) |
//! | `inbound.rs` | checks that need no session state: decoding, identifier sizes, [`InboundCheck`], unsigned dedupe, the category a refusal is sent with |
//! | `sessions.rs` | establishment (`on_propose`: trust domain, caps, TTL), the one in-session check (`with_session`; `ResponderSession::touch` restarts the TTL, moves the session to its connection and resumes it), close and expiry (`end_session`, aborting running tasks) |
//! | `sources.rs` | who a session or replay entry counts against ([`Responder::quota_key`]: credential, own signing key, address), each source's sessions, and the room a full table makes from the heaviest source (`make_room_for`) |
//! | `admit.rs` | admission of a TASK_SUBMIT: `admit`, each rule a small function, checked in order (the first broken one is the refusal) |
//! | `tasks.rs` | `on_submit` (admit, then accept), cancel, status queries, results and failures, contract deadlines, aborts |
//! | `shared.rs` | state shared with other replicas through a store: the replay claim of a message ([`Responder::replay_claim`]), a session's record and its adoption ([`Responder::shared_session`], [`Responder::adopt_session`], [`Responder::end_shared_session`]), a task another replica holds ([`Responder::refuse_claimed`]) or ran (status queries) |
//! | `resume.rs` | suspend/resume: which connection carries a session ([`Responder::connection_of`]), held answers ([`Responder::take_held`], [`Responder::hold`]) |
//! | `context.rs` | a session's context (RFC 5.3): [`History`], [`Turn`] |
//! | `types.rs` | the public vocabulary: [`PeerContext`], [`Outcome`], [`Delivery`], [`Aborted`], [`ResponderEvent`], ... |

use crate::keyed::PeerMap;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ldp_types::{
    Body, CapabilityManifest, Envelope, LdpError, Manifest, PayloadMode, SessionReject, TaskFailed, codes,
};
use serde_json::Value;

use crate::clock::{IdSource, WallClock};
use crate::config::ResponderConfig;
use crate::error::Refusal;
use crate::held::HeldStore;
use crate::refusals::RefusalLog;
use crate::security::{Received, ReplayGuard, SecurityConfig, sign_outbound, verify_inbound};
use crate::shared::SharedTask;
use crate::{SessionState, TaskKey};

mod admit;
mod context;
mod inbound;
mod resume;
mod sessions;
mod shared;
mod sources;
mod tasks;
mod types;

pub use context::{History, Turn, Turns};
pub use inbound::{Checked, InboundCheck};
use inbound::{Dedupe, check_identifiers, decode, reference_category};
use sessions::{Ended, IdleOrder, ResponderSession};
pub use shared::SharedEnd;
use sources::{HeavySources, PrincipalSessions};
use tasks::TaskDeadline;
pub use types::{
    Aborted, AuthenticatedPeer, DelegatedHop, Delivery, HistoryItem, Outcome, PeerContext, ResponderEvent, TaskOutput,
    TaskRequest, TaskStatus, source_of,
};

/// The responder machine. See the module docs for the calling order.
#[derive(Debug)]
pub struct Responder {
    cfg: ResponderConfig,
    wall: Arc<dyn WallClock>,
    ids: Box<dyn IdSource>,
    sessions: PeerMap<Arc<str>, ResponderSession>,
    expiry: BinaryHeap<Reverse<(Instant, Arc<str>)>>,
    /// Deadlines of running tasks under `fail_closed` contracts, (when, session id, task id); an entry whose task
    /// has ended meanwhile is skipped when it comes due.
    task_deadlines: BinaryHeap<Reverse<TaskDeadline>>,
    ended: PeerMap<Box<str>, Ended>,
    ended_order: VecDeque<Box<str>>,
    replay: ReplayGuard,
    /// Message ids seen recently, in unsigned mode.
    dedupe: Dedupe,
    /// The ids of the live sessions of each source ([`Responder::quota_key`]), for `max_sessions_per_principal`, and
    /// so that the scans at that limit read one source's sessions rather than all of them.
    sessions_per_principal: PeerMap<Arc<str>, PrincipalSessions>,
    /// The sources holding two sessions or more, by count, for the heaviest to give way in a full table.
    heavy: HeavySources,
    /// The attack signals of the machine's limits.
    refusals: Refusals,
    /// Shutting down ([`Responder::start_draining`]): new sessions and tasks are refused, running tasks finish.
    draining: bool,
    /// How many sessions held are idle ([`ResponderSession::is_idle`]), kept at every start and end of a task and
    /// every suspend and resume, so that at `max_sessions` whether one can give way is known without a scan.
    idle_total: usize,
    /// The idle sessions by last activity, for the least recently used to give way at `max_sessions`
    /// ([`Responder::adopt_session`]). Built when that limit first needs it, so that a replica under its cap keeps
    /// none; then each session that becomes idle is queued. Kept lazily, as the expiry queue is: an entry whose
    /// session was used, became busy or left since is corrected or skipped when it comes up.
    idle_order: Option<IdleOrder>,
    /// The sessions made active over each connection (WebSocket), so that a connection's drop suspends its own
    /// sessions without reading the others ([`Responder::suspend_connection`]). An entry is added when a session is
    /// established over a connection, moves to it or resumes on it; one whose session ended or moved since is
    /// skipped, and a connection's list is dropped with the connection, or pruned when it doubles.
    sessions_per_connection: HashMap<u64, Vec<Arc<str>>>,
    running_total: usize,
    events: VecDeque<ResponderEvent>,
    /// Tasks ended by the machine whose delegate work the driver must stop ([`Responder::poll_aborted`]).
    aborted: VecDeque<Aborted>,
    /// Answers kept for suspended sessions' resume, bounded by [`Limits::held`](crate::Limits::held).
    held: HeldStore,
    /// When [`Responder::handle_timeout`] next drops held answers older than their TTL.
    held_sweep: Option<Instant>,
    /// Whether a store shares this machine's state ([`Responder::set_shared`]): held answers are then also queued
    /// for it ([`Responder::poll_shared_ended`]).
    shared: bool,
    /// Final answers held for a suspended session, for the driver to record in the store.
    shared_ended: VecDeque<(TaskKey, Envelope)>,
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
            sessions: PeerMap::default(),
            expiry: BinaryHeap::new(),
            task_deadlines: BinaryHeap::new(),
            ended: PeerMap::default(),
            ended_order: VecDeque::new(),
            replay: ReplayGuard::default(),
            sessions_per_principal: PeerMap::default(),
            heavy: HeavySources::new(),
            refusals: Refusals::default(),
            draining: false,
            dedupe: Dedupe::default(),
            idle_total: 0,
            idle_order: None,
            sessions_per_connection: HashMap::new(),
            running_total: 0,
            events: VecDeque::new(),
            aborted: VecDeque::new(),
            held: HeldStore::default(),
            held_sweep: None,
            shared: false,
            shared_ended: VecDeque::new(),
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
        [session, task, self.refusals.quiet_deadline()].into_iter().flatten().min()
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
        self.refusals.tick(now);
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
        self.handle_verified(now, peer, env, |security, env| verify_inbound(security, env, raw), None)
    }

    /// Handles a message that [`InboundCheck::check`] decoded and verified outside the machine (e.g. before taking
    /// the lock a runtime keeps around it). Every rule applies as in [`Responder::handle`], in the same order.
    pub fn handle_checked(&mut self, now: Instant, peer: &PeerContext, checked: Checked) -> Result<Outcome, Refusal> {
        let Checked { env, signature } = checked;
        self.handle_verified(now, peer, env, |_, _| signature, None)
    }

    /// [`Responder::handle_checked`] with what a shared store knows of the task a status query asks about
    /// (`crate::shared`): a task this replica does not know is answered from that record.
    pub fn handle_checked_shared(
        &mut self,
        now: Instant,
        peer: &PeerContext,
        checked: Checked,
        remote: Option<&SharedTask>,
    ) -> Result<Outcome, Refusal> {
        let Checked { env, signature } = checked;
        self.handle_verified(now, peer, env, |_, _| signature, remote)
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
        remote: Option<&SharedTask>,
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
            let principal = self.quota_key(peer, &env);
            if let Err(error) = self.replay.check_for(&replay, &env, &principal, wall) {
                if error.code == codes::CAPACITY_EXCEEDED {
                    self.refusals.replay_window.refused(now);
                }
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
        if self.draining && matches!(env.body, Body::SessionPropose(_) | Body::TaskSubmit(_)) {
            let error = LdpError::runtime(
                codes::CAPACITY_EXCEEDED,
                "the delegate is shutting down; retry on another replica or later",
            )
            .with_retryable(true);
            return Err(self.refuse(&env, error));
        }
        match &env.body {
            Body::Hello(_) => Ok(Outcome::Reply(self.manifest_reply(&env))),
            Body::SessionPropose(_) => self.on_propose(now, peer, env),
            Body::TaskSubmit(_) => self.on_submit(now, peer, env),
            Body::TaskCancel(_) => self.on_cancel(now, peer, env, remote),
            Body::TaskUpdate(_) => self.on_status_query(now, peer, env, remote),
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
        let timestamp = ldp_types::time::format_timestamp(self.wall.now_utc());
        self.envelope_at(timestamp, session_id, to, body, mode)
    }

    /// [`Responder::envelope`] stamped `timestamp` (a result's, which its provenance carries too).
    fn envelope_at(
        &mut self,
        timestamp: String,
        session_id: &str,
        to: &str,
        body: impl Into<Body>,
        mode: PayloadMode,
    ) -> Envelope {
        let mut env =
            Envelope::new(self.ids.uuid(), timestamp, session_id, self.cfg.card.delegate_id.as_str(), to, body)
                .with_payload_mode(mode);
        // RFC 3.1's envelope has a `provenance` member; the reference transcript (ldp-session-flow.json, step 6)
        // fills it on TASK_RESULT with the body's record, and so does this responder (before signing, so the
        // algorithms that cover the envelope's provenance cover it; reference `hmac-sha256` covers neither copy).
        if let Body::TaskResult(r) = &env.body {
            env.provenance = Some(Arc::clone(&r.provenance));
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
}

/// The attack signals of the machine's limits (one log line when each starts refusing, a few while it goes on, one
/// when it stops; [`RefusalLog`]).
#[derive(Debug)]
struct Refusals {
    session_table: RefusalLog,
    session_share: RefusalLog,
    replay_window: RefusalLog,
}

impl Default for Refusals {
    fn default() -> Self {
        Self {
            session_table: RefusalLog::new("the session table (max_sessions)"),
            session_share: RefusalLog::new("a source's share of sessions (max_sessions_per_principal)"),
            replay_window: RefusalLog::new("the replay window"),
        }
    }
}

impl Refusals {
    fn all(&self) -> [&RefusalLog; 3] {
        [&self.session_table, &self.session_share, &self.replay_window]
    }

    fn tick(&self, now: Instant) {
        self.all().into_iter().for_each(|log| log.tick(now));
    }

    /// When the first run of refusals ends if none comes before, so that its end is logged on time.
    fn quiet_deadline(&self) -> Option<Instant> {
        self.all().into_iter().filter_map(RefusalLog::quiet_deadline).min()
    }
}

/// How often, at most, [`Responder::handle_timeout`] sweeps held answers for their TTL.
const HELD_SWEEP: Duration = Duration::from_secs(1);

/// The longest TTL a session can have, whatever the configuration says.
const MAX_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

fn internal() -> LdpError {
    LdpError::runtime(codes::EXECUTION_FAILED, "internal state inconsistency")
}
