#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Issue 14: protocol-state limits and principal binding in the responder machine (sessions bound to the principal
//! that opened them, identifier limits, session caps, per-principal replay quotas, unsigned-mode checks).

mod support;

use std::sync::Arc;

use ldp_session::{AuthenticatedPeer, Outcome, PeerContext, SecurityConfig, SessionState, TaskKey, TrustPolicy};
use ldp_types::signing::{self, SignatureAlgorithm, SigningKey};
use ldp_types::{
    Attestation, Envelope, ErrorCategory, PayloadMode, SessionClose, TaskCancel, TaskSubmit, TaskUpdate, codes,
};
use support::*;

fn token_peer(label: &str, domain: &str) -> PeerContext {
    PeerContext {
        authenticated: Some(AuthenticatedPeer { delegate_id: None, trust_domain: domain.to_owned() }),
        connection: Some(1),
        principal: Some(Arc::from(label)),
    }
}

/// Every kind of message that addresses an existing session, built by hand under the session owner's `from`.
fn into_session(sim: &mut Sim, sid: &str, running: &str) -> Vec<Envelope> {
    vec![
        sim.forge(sid, TaskSubmit::new("intruder".into(), "echo".into(), frame("x"), None), PayloadMode::SemanticFrame),
        sim.forge(sid, TaskCancel::new(running.into()), PayloadMode::SemanticFrame),
        sim.forge(sid, TaskUpdate::new(running.into(), None, None), PayloadMode::SemanticFrame),
        sim.forge(
            sid,
            Attestation { claim: serde_json::json!("c"), evidence: serde_json::Value::Null, extra: Default::default() },
            PayloadMode::Text,
        ),
        sim.forge(sid, SessionClose::new(None), PayloadMode::Text),
    ]
}

fn assert_not_session_peer(sim: &mut Sim, sid: &str, running: &TaskKey, sign: Option<&SigningKey>) {
    for (i, mut env) in into_session(sim, sid, &running.task_id).into_iter().enumerate() {
        env.message_id = format!("{}-{i}", env.message_id);
        if let Some(key) = sign {
            env.nonce = Some(format!("n-{}", env.message_id));
            signing::sign(&mut env, key).unwrap();
        }
        let what = env.body.type_name().to_owned();
        let err = sim.step(env).error();
        assert_eq!((err.category, err.code.as_str()), (ErrorCategory::Session, codes::NOT_SESSION_PEER), "{what}");
        assert!(!err.retryable, "{what}");
    }
    // Nothing changed: the session is active and the owner's task still runs.
    assert_eq!(sim.responder.session_state(sid), Some(SessionState::Active));
    assert_eq!(sim.responder.running_tasks(), 1);
}

#[test]
fn another_token_of_the_same_or_another_domain_cannot_use_a_session() {
    let mut cfg = responder_config();
    cfg.trust = TrustPolicy::strict();
    let mut sim = Sim::with(cfg, initiator_config());
    sim.peer = token_peer("bearer:a", DOMAIN);
    let sid = sim.session();
    let running = sim.submit(&sid, "echo", frame("mine")).task().key;
    // Token B of the same domain, token C of another domain, and no token at all, all reusing A's `from`.
    for intruder in [
        token_peer("bearer:b", DOMAIN),
        token_peer("bearer:c", "other.org"),
        PeerContext { authenticated: None, connection: Some(2), principal: None },
    ] {
        sim.peer = intruder;
        assert_not_session_peer(&mut sim, &sid, &running, None);
    }
    // The owner still can.
    sim.peer = token_peer("bearer:a", DOMAIN);
    let close = sim.initiator.close(&sid, None).unwrap();
    assert!(matches!(sim.step(close).outcome, Ok(Outcome::Cancel { .. })));
}

#[test]
fn signed_messages_from_another_principal_are_refused_too() {
    let key = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "shared by everyone").unwrap();
    let mut r = responder_config();
    r.security = SecurityConfig::symmetric(key.clone());
    let mut i = initiator_config();
    i.security = SecurityConfig::symmetric(key.clone());
    let mut sim = Sim::with(r, i);
    sim.peer = token_peer("bearer:a", DOMAIN);
    let sid = sim.session();
    let running = sim.submit(&sid, "echo", frame("mine")).task().key;
    sim.peer = token_peer("bearer:b", DOMAIN);
    assert_not_session_peer(&mut sim, &sid, &running, Some(&key));
}

#[test]
fn without_a_principal_label_the_authenticated_identity_binds_the_session() {
    let mut sim = Sim::new();
    let auth = |domain: &str| PeerContext {
        authenticated: Some(AuthenticatedPeer { delegate_id: None, trust_domain: domain.to_owned() }),
        connection: Some(1),
        principal: None,
    };
    sim.peer = auth(DOMAIN);
    let sid = sim.session();
    let running = sim.submit(&sid, "echo", frame("mine")).task().key;
    sim.peer = auth("other.org");
    assert_not_session_peer(&mut sim, &sid, &running, None);
}

#[test]
fn the_principal_of_a_peer_context() {
    assert_eq!(PeerContext::default().principal(), None);
    assert_eq!(token_peer("bearer:x", DOMAIN).principal().as_deref(), Some("bearer:x"));
    let a = PeerContext {
        authenticated: Some(AuthenticatedPeer { delegate_id: Some("d".into()), trust_domain: "t".into() }),
        ..PeerContext::default()
    };
    assert!(a.principal().is_some());
}
