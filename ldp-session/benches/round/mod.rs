//! The TASK_SUBMIT round shared by the `responder` bench and the `responder_loop` example: a responder with one
//! established session, a peer that writes (optionally signed) TASK_SUBMITs, and the round through
//! `Responder::handle` and `complete_task`.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use ldp_session::{
    Delivery, ManualClock, Outcome, PeerContext, Responder, ResponderConfig, SecurityConfig, SeededIds, TaskOutput,
    WallClock,
};
use ldp_types::signing::{self, SigningKey};
use ldp_types::{
    Body, Capability, DelegateId, Envelope, IdentityCard, PayloadMode, SessionConfig, SessionPropose, TaskSubmit,
    TrustDomain,
};
use serde_json::json;

const RESPONDER: &str = "ldp:delegate:qwen3-8b";
const INITIATOR: &str = "ldp:delegate:router-alpha";

/// Builds the initiator's messages; shares the wall clock with the responder.
pub struct Peer {
    clock: ManualClock,
    pub key: Option<SigningKey>,
    session_id: String,
    seq: u64,
}

impl Peer {
    /// A signed (when keyed) message from the initiator, as bytes; a millisecond of wall-clock time passes per
    /// message.
    pub fn message(&mut self, session_id: &str, body: impl Into<Body>, mode: PayloadMode) -> Vec<u8> {
        self.seq += 1;
        self.clock.advance(Duration::from_millis(1));
        let mut env = Envelope::new(
            format!("00000000-0000-4000-8000-{:012x}", self.seq),
            ldp_types::time::format_timestamp(self.clock.now_utc()),
            session_id,
            INITIATOR,
            RESPONDER,
            body,
        )
        .with_payload_mode(mode);
        if let Some(k) = &self.key {
            env.nonce = Some(format!("{:032x}", self.seq));
            signing::sign(&mut env, k).unwrap();
        }
        env.to_vec().unwrap()
    }

    /// The RFC 3.3 TASK_SUBMIT example, with a fresh task id.
    pub fn submit(&mut self) -> Vec<u8> {
        let input = json!({
            "task_type": "analysis",
            "instruction": "Analyze the tradeoffs between microservices and monoliths for a 10-person startup",
            "expected_output_format": "structured_analysis"
        });
        let body = TaskSubmit::new(format!("task-{}", self.seq), "reasoning".into(), input, None);
        let sid = self.session_id.clone();
        self.message(&sid, body, PayloadMode::SemanticFrame)
    }
}

/// The responder side: the machine, the (fixed) monotonic time and the transport's peer context.
pub struct Server {
    responder: Responder,
    now: Instant,
    peer: PeerContext,
}

impl Server {
    /// Handles one submit and completes its task at once; returns the TASK_RESULT to send.
    pub fn round(&mut self, bytes: &[u8]) -> Envelope {
        let task = match self.responder.handle(self.now, &self.peer, bytes) {
            Ok(Outcome::Execute(task)) => task,
            other => panic!("submit refused: {other:?}"),
        };
        let out = TaskOutput::new(json!({ "analysis": "monolith first" }));
        match self.responder.complete_task(self.now, &task.key, out) {
            Ok(Delivery::Send(env)) => env,
            other => panic!("{other:?}"),
        }
    }
}

/// A responder with one established session, and its peer.
pub fn setup(key: Option<SigningKey>) -> (Peer, Server) {
    let clock = ManualClock::new(time::macros::datetime!(2026-03-09 10:00:00 UTC));
    let mut card = IdentityCard::new(DelegateId::new(RESPONDER).unwrap(), "Qwen", "qwen", "qwen3-8b-2026.01");
    card.trust_domain = TrustDomain::new("research.internal");
    card.capabilities = vec![Capability::new("reasoning"), Capability::new("summarize")];
    card.supported_payload_modes = vec![PayloadMode::SemanticFrame, PayloadMode::Text];
    let mut cfg = ResponderConfig::new(card);
    if let Some(k) = &key {
        cfg.security = SecurityConfig::symmetric(k.clone());
        // Entries leave the window as the clock advances; the bounds only guard against a stalled clock, and a long
        // run holds more than a sender's default share (the bench's clock moves a millisecond per message).
        let replay = cfg.security.replay.as_mut().unwrap();
        (replay.max_entries, replay.max_entries_per_principal) = (usize::MAX, usize::MAX);
    }
    let responder = Responder::new(cfg, Arc::new(clock.clone()), Box::new(SeededIds::new(7)));
    let mut server = Server { responder, now: Instant::now(), peer: PeerContext::default() };
    let mut peer = Peer { clock, key, session_id: String::new(), seq: 0 };
    let propose = peer.message("", SessionPropose::new(SessionConfig::default()), PayloadMode::Text);
    let Ok(Outcome::Reply(accept)) = server.responder.handle(server.now, &server.peer, &propose) else {
        panic!("no session")
    };
    let Body::SessionAccept(a) = accept.body else { panic!("{accept:?}") };
    peer.session_id = a.session_id;
    while server.responder.poll_event().is_some() {}
    (peer, server)
}
