//! A two-peer simulator for the session machines: one [`Responder`], one [`Initiator`], a shared [`ManualClock`] for
//! wall-clock time and a virtual monotonic clock (a fixed `Instant` base plus an offset). Messages cross between the
//! machines as JSON bytes, through the same `handle(bytes)` entry points a transport uses. Nothing sleeps.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::result_large_err)]

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ldp_session::{
    Delivery, Initiator, InitiatorConfig, InitiatorEvent, ManualClock, Outcome, PeerContext, Refusal, Responder,
    ResponderConfig, ResponderEvent, SeededIds, SessionError, TaskKey, TaskOutput, TaskRequest, WallClock,
};
use ldp_types::{
    Body, Capability, DelegateId, Envelope, IdentityCard, LdpError, PayloadMode, SessionConfig, TrustDomain,
};
use time::OffsetDateTime;
use time::macros::datetime;

/// The responder's delegate id.
pub const RESPONDER: &str = "ldp:delegate:echo";
/// The initiator's delegate id.
pub const INITIATOR: &str = "ldp:delegate:client";
/// Someone else.
pub const STRANGER: &str = "ldp:delegate:stranger";
/// The responder's trust domain (and, by default, the initiator's).
pub const DOMAIN: &str = "lab.internal";
/// The responder's model version.
pub const MODEL_VERSION: &str = "echo-2026.03";
/// Skills the responder declares.
pub const SKILLS: [&str; 2] = ["echo", "summarize"];
/// Wall-clock time at the start of every simulation.
pub const START: OffsetDateTime = datetime!(2026-03-09 10:00:00 UTC);

/// The responder's identity card: two skills, semantic frame and text, domain [`DOMAIN`].
pub fn card() -> IdentityCard {
    let mut card = IdentityCard::new(DelegateId::new(RESPONDER).unwrap(), "Echo", "echo", MODEL_VERSION);
    card.trust_domain = TrustDomain::new(DOMAIN);
    card.capabilities = SKILLS.iter().map(|s| Capability::new(*s)).collect();
    card.supported_payload_modes = vec![PayloadMode::SemanticFrame, PayloadMode::Text];
    card
}

/// Default responder configuration around [`card`].
pub fn responder_config() -> ResponderConfig {
    ResponderConfig::new(card())
}

/// Default initiator configuration: declares [`DOMAIN`], prefers semantic frame then text.
pub fn initiator_config() -> InitiatorConfig {
    let mut cfg = InitiatorConfig::new(INITIATOR);
    cfg.trust_domain = Some(DOMAIN.to_owned());
    cfg
}

/// A valid semantic frame.
pub fn frame(instruction: &str) -> serde_json::Value {
    serde_json::json!({ "task_type": "echo", "instruction": instruction })
}

/// The two peers and their clocks.
pub struct Sim {
    /// Wall-clock time of both machines.
    pub clock: ManualClock,
    /// Virtual monotonic time is `base + offset`.
    pub base: Instant,
    /// How far virtual time has advanced.
    pub offset: Duration,
    /// The responder machine.
    pub responder: Responder,
    /// The initiator machine.
    pub initiator: Initiator,
    /// What the responder's transport knows about the initiator.
    pub peer: PeerContext,
    /// Every envelope that crossed the wire, oldest first, with its direction.
    pub wire: Vec<(Dir, Envelope)>,
    /// Tasks the responder handed to its delegate and that the test has not finished yet.
    pub tasks: VecDeque<TaskRequest>,
}

/// Direction of a message on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Initiator to responder.
    ToResponder,
    /// Responder to initiator.
    ToInitiator,
}

/// What one step produced: the responder's verdict and, when it answered, what the initiator made of the answer.
#[derive(Debug)]
pub struct Step {
    /// The responder's outcome.
    pub outcome: Result<Outcome, Refusal>,
    /// The reply delivered to the initiator, if any, and its verdict.
    pub reply: Option<(Envelope, Result<(), SessionError>)>,
}

impl Step {
    /// The task to execute; panics otherwise.
    pub fn task(&self) -> TaskRequest {
        match &self.outcome {
            Ok(Outcome::Execute(t)) => t.clone(),
            other => panic!("expected Execute, got {other:?}"),
        }
    }

    /// The refusal; panics otherwise.
    pub fn refusal(&self) -> Refusal {
        match &self.outcome {
            Err(r) => r.clone(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// The typed error of the refusal.
    pub fn error(&self) -> LdpError {
        self.refusal().error
    }

    /// The reply envelope that went back to the initiator; panics if none.
    pub fn reply(&self) -> Envelope {
        self.reply.as_ref().map(|(e, _)| e.clone()).expect("a reply")
    }
}

impl Default for Sim {
    fn default() -> Self {
        Self::new()
    }
}

impl Sim {
    /// Default configurations on both sides.
    pub fn new() -> Self {
        Self::with(responder_config(), initiator_config())
    }

    /// Custom configurations.
    pub fn with(responder: ResponderConfig, initiator: InitiatorConfig) -> Self {
        let clock = ManualClock::new(START);
        let wall = Arc::new(clock.clone());
        Self {
            responder: Responder::new(responder, wall.clone(), Box::new(SeededIds::new(1))),
            initiator: Initiator::new(initiator, RESPONDER, wall, Box::new(SeededIds::new(2))),
            clock,
            base: Instant::now(),
            offset: Duration::ZERO,
            peer: PeerContext {
                authenticated: None,
                connection: Some(1),
                principal: None,
                address: None,
                scopes: None,
            },
            wire: Vec::new(),
            tasks: VecDeque::new(),
        }
    }

    /// Virtual monotonic time.
    pub fn now(&self) -> Instant {
        self.base + self.offset
    }

    /// Advances both clocks.
    pub fn advance(&mut self, by: Duration) {
        self.offset += by;
        self.clock.advance(by);
    }

    /// Delivers an envelope to the responder as bytes.
    pub fn send_responder(&mut self, env: &Envelope) -> Result<Outcome, Refusal> {
        self.wire.push((Dir::ToResponder, env.clone()));
        let bytes = env.to_vec().unwrap();
        self.send_responder_bytes(&bytes)
    }

    /// Delivers raw bytes to the responder.
    pub fn send_responder_bytes(&mut self, bytes: &[u8]) -> Result<Outcome, Refusal> {
        let now = self.now();
        let peer = self.peer.clone();
        let outcome = self.responder.handle(now, &peer, bytes);
        if let Ok(Outcome::Execute(task)) = &outcome {
            self.tasks.push_back(task.clone());
        }
        outcome
    }

    /// Delivers an envelope to the initiator as bytes.
    pub fn send_initiator(&mut self, env: &Envelope) -> Result<(), SessionError> {
        self.wire.push((Dir::ToInitiator, env.clone()));
        self.initiator.handle(&env.to_vec().unwrap())
    }

    /// Sends one initiator message to the responder and delivers the responder's answer (reply, cancel
    /// acknowledgement or refusal reply) back to the initiator.
    pub fn step(&mut self, env: Envelope) -> Step {
        let outcome = self.send_responder(&env);
        let answer = match &outcome {
            Ok(Outcome::Reply(r)) | Ok(Outcome::Cancel { reply: r, .. }) => Some(r.clone()),
            Err(Refusal { reply: Some(r), .. }) => Some(r.clone()),
            _ => None,
        };
        let reply = answer.map(|r| {
            let verdict = self.send_initiator(&r);
            (r, verdict)
        });
        Step { outcome, reply }
    }

    /// Flushes the initiator's own outbound queue (resubmissions after fallback) through [`Sim::step`] until it is
    /// empty; returns the steps taken.
    pub fn drive(&mut self) -> Vec<Step> {
        let mut steps = Vec::new();
        while let Some(env) = self.initiator.poll_outbound() {
            steps.push(self.step(env));
            assert!(steps.len() < 64, "the initiator keeps resubmitting");
        }
        steps
    }

    /// HELLO, then SESSION_PROPOSE with `config`; returns the session id. Panics unless the session is established
    /// on both sides.
    pub fn establish(&mut self, config: SessionConfig) -> String {
        let hello = self.initiator.hello();
        let step = self.step(hello);
        assert!(matches!(step.outcome, Ok(Outcome::Reply(_))), "{step:?}");
        let propose = self.initiator.propose(config);
        let step = self.step(propose);
        assert!(matches!(step.outcome, Ok(Outcome::Reply(_))), "propose refused: {step:?}");
        let established = self.initiator_events().into_iter().find_map(|e| match e {
            InitiatorEvent::SessionEstablished { session_id, .. } => Some(session_id),
            _ => None,
        });
        let session_id = established.expect("initiator saw SessionEstablished");
        self.responder_events();
        session_id
    }

    /// A session with default configuration.
    pub fn session(&mut self) -> String {
        self.establish(SessionConfig::default())
    }

    /// Submits a task through the initiator and delivers it.
    pub fn submit(&mut self, session_id: &str, skill: &str, input: serde_json::Value) -> Step {
        let env = self.initiator.submit(session_id, skill, input, None, None).unwrap();
        self.step(env)
    }

    /// Completes a task at the responder and delivers the result to the initiator when it can go out.
    pub fn complete(&mut self, key: &TaskKey, out: TaskOutput) -> Delivery {
        self.tasks.retain(|t| t.key != *key);
        let delivery = self.responder.complete_task(self.now(), key, out).unwrap();
        if let Delivery::Send(env) = &delivery {
            self.send_initiator(env).unwrap();
        }
        delivery
    }

    /// Fails a task at the responder and delivers the failure.
    pub fn fail(&mut self, key: &TaskKey, error: LdpError) -> Delivery {
        self.tasks.retain(|t| t.key != *key);
        let delivery = self.responder.fail_task(self.now(), key, error).unwrap();
        if let Delivery::Send(env) = &delivery {
            self.send_initiator(env).unwrap();
        }
        delivery
    }

    /// An envelope from [`INITIATOR`] to [`RESPONDER`] built by hand (for messages our initiator would not send),
    /// with a fresh message id and the current wall-clock timestamp.
    pub fn forge(&mut self, session_id: &str, body: impl Into<Body>, mode: PayloadMode) -> Envelope {
        // Unique per process: responders deduplicate message ids, signed or not.
        static FORGED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = FORGED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Envelope::new(
            format!("forged-{n}-{}", self.offset.as_nanos()),
            ldp_types::time::format_timestamp(self.clock.now_utc()),
            session_id,
            INITIATOR,
            RESPONDER,
            body,
        )
        .with_payload_mode(mode)
    }

    /// Drains the initiator's events.
    pub fn initiator_events(&mut self) -> Vec<InitiatorEvent> {
        std::iter::from_fn(|| self.initiator.poll_event()).collect()
    }

    /// Drains the responder's events.
    pub fn responder_events(&mut self) -> Vec<ResponderEvent> {
        std::iter::from_fn(|| self.responder.poll_event()).collect()
    }
}
