#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Issue 14: protocol-state limits and principal binding in the responder machine (sessions bound to the principal
//! that opened them, identifier limits, session caps, per-principal replay quotas, unsigned-mode checks).

use std::sync::Arc;

use crate::support::*;
use ldp_session::{AuthenticatedPeer, Outcome, PeerContext, SecurityConfig, SessionState, TaskKey, TrustPolicy};
use ldp_types::signing::{self, SignatureAlgorithm, SigningKey};
use ldp_types::{
    Attestation, Envelope, ErrorCategory, PayloadMode, SessionClose, TaskCancel, TaskSubmit, TaskUpdate, codes,
};

fn token_peer(label: &str, domain: &str) -> PeerContext {
    PeerContext {
        authenticated: Some(AuthenticatedPeer { delegate_id: None, trust_domain: domain.to_owned() }),
        connection: Some(1),
        principal: Some(Arc::from(label)),
        address: None,
        scopes: None,
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
        PeerContext { authenticated: None, connection: Some(2), principal: None, address: None, scopes: None },
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
        address: None,
        scopes: None,
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

fn propose_env(sim: &mut Sim) -> Envelope {
    sim.forge("", ldp_types::SessionPropose::new(ldp_types::SessionConfig::default()), PayloadMode::Text)
}

#[test]
fn a_one_megabyte_from_is_refused_and_not_stored() {
    let mut sim = Sim::new();
    let mut env = propose_env(&mut sim);
    env.from = "x".repeat(1 << 20);
    let bytes = env.to_vec().unwrap();
    // The check outside the machine refuses it too, before the signature policy.
    let checked = sim.responder.inbound_check().check(&bytes).unwrap_err();
    assert_eq!(checked.error.code, codes::MALFORMED_MESSAGE);
    let refusal = sim.send_responder_bytes(&bytes).unwrap_err();
    assert_eq!(refusal.error.code, codes::MALFORMED_MESSAGE);
    assert!(!refusal.error.retryable);
    assert!(refusal.reply.is_none(), "a reply would echo the oversized id");
    assert_eq!(sim.responder.session_count(), 0);
    assert!(sim.responder_events().is_empty());
}

#[test]
fn every_peer_controlled_identifier_is_limited() {
    let mut cfg = responder_config();
    cfg.limits.max_identifier_len = 40;
    let mut sim = Sim::with(cfg, initiator_config());
    let long = "y".repeat(41);
    let at_limit = "z".repeat(40);
    let sid = sim.session();
    let submit = |sim: &mut Sim, task: &str, skill: &str| {
        sim.forge(&sid, TaskSubmit::new(task.into(), skill.into(), frame("x"), None), PayloadMode::SemanticFrame)
    };
    let mut cases: Vec<(&str, Envelope)> = Vec::new();
    for field in ["from", "to", "message_id", "session_id", "nonce", "signature_algorithm"] {
        let mut env = propose_env(&mut sim);
        match field {
            "from" => env.from = long.clone(),
            "to" => env.to = long.clone(),
            "message_id" => env.message_id = long.clone(),
            "session_id" => env.session_id = long.clone(),
            "nonce" => env.nonce = Some(long.clone()),
            _ => env.signature_algorithm = Some(long.clone()),
        }
        cases.push((field, env));
    }
    cases.push(("task_id", submit(&mut sim, &long, "echo")));
    cases.push(("skill", submit(&mut sim, "t", &long)));
    let declared = ldp_types::SessionConfig { trust_domain: Some(long.clone()), ..Default::default() };
    cases.push(("trust_domain", sim.forge("", ldp_types::SessionPropose::new(declared), PayloadMode::Text)));
    for (field, env) in cases {
        let refusal = sim.send_responder(&env).unwrap_err();
        assert_eq!(refusal.error.code, codes::MALFORMED_MESSAGE, "{field}");
        assert!(refusal.error.message.contains(field), "{field}: {}", refusal.error.message);
    }
    assert_eq!(sim.responder.session_count(), 1);
    // At the limit is fine.
    let env = submit(&mut sim, &at_limit, "echo");
    assert!(matches!(sim.send_responder(&env), Ok(Outcome::Execute(_))));
}

fn proposal_from(sim: &mut Sim, from: &str) -> Envelope {
    let mut env = propose_env(sim);
    env.from = from.to_owned();
    env.message_id = format!("p-{}-{from}", sim.wire.len());
    env
}

fn capacity_refused(r: Result<Outcome, ldp_session::Refusal>) {
    let refusal = r.unwrap_err();
    assert_eq!(refusal.error.code, codes::CAPACITY_EXCEEDED);
    assert!(refusal.error.retryable);
    assert_eq!(refusal.reply.unwrap().body.type_name(), "SESSION_REJECT");
}

#[test]
fn sessions_are_capped_per_principal_and_globally_and_counts_drop_when_they_end() {
    let mut cfg = responder_config();
    cfg.limits.max_sessions_per_principal = 2;
    cfg.limits.max_sessions = 5;
    let mut sim = Sim::with(cfg, initiator_config());
    // Unauthenticated: the declared `from` is the principal.
    let mut mine = Vec::new();
    for _ in 0..2 {
        let env = proposal_from(&mut sim, "ldp:delegate:a");
        let Ok(Outcome::Reply(r)) = sim.send_responder(&env) else { panic!("refused") };
        mine.push(r.session_id);
    }
    let env = proposal_from(&mut sim, "ldp:delegate:a");
    capacity_refused(sim.send_responder(&env));
    // Others are not affected by a's quota.
    let env = proposal_from(&mut sim, "ldp:delegate:b");
    assert!(matches!(sim.send_responder(&env), Ok(Outcome::Reply(_))));
    // Authenticated: two tokens are two principals, whatever `from` they declare.
    sim.peer = token_peer("bearer:a", DOMAIN);
    let env = proposal_from(&mut sim, "ldp:delegate:a");
    assert!(matches!(sim.send_responder(&env), Ok(Outcome::Reply(_))));
    sim.peer = token_peer("bearer:b", DOMAIN);
    let env = proposal_from(&mut sim, "ldp:delegate:c");
    assert!(matches!(sim.send_responder(&env), Ok(Outcome::Reply(_))));
    assert_eq!(sim.responder.session_count(), 5);
    // The global cap.
    let env = proposal_from(&mut sim, "ldp:delegate:d");
    capacity_refused(sim.send_responder(&env));
    // Closing one of a's sessions gives a (and the global count) room again.
    sim.peer = PeerContext { authenticated: None, connection: Some(1), principal: None, address: None, scopes: None };
    let mut close = sim.forge(&mine[0], SessionClose::new(None), PayloadMode::Text);
    close.from = "ldp:delegate:a".into();
    assert!(matches!(sim.send_responder(&close), Ok(Outcome::Cancel { .. })));
    let env = proposal_from(&mut sim, "ldp:delegate:a");
    assert!(matches!(sim.send_responder(&env), Ok(Outcome::Reply(_))));
    // Expiry frees them too.
    sim.advance(std::time::Duration::from_secs(2 * 3600));
    let now = sim.now();
    let _reaped = sim.responder.handle_timeout(now);
    assert_eq!(sim.responder.session_count(), 0);
    for _ in 0..2 {
        let env = proposal_from(&mut sim, "ldp:delegate:a");
        assert!(matches!(sim.send_responder(&env), Ok(Outcome::Reply(_))));
    }
}

#[test]
fn one_key_holder_flooding_the_replay_table_does_not_lock_out_others() {
    let key = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "shared by everyone").unwrap();
    let mut r = responder_config();
    r.security = SecurityConfig::symmetric(key.clone());
    r.security.replay = Some(ldp_session::ReplayConfig {
        max_entries: 20,
        max_entries_per_principal: 3,
        ..ldp_session::ReplayConfig::default()
    });
    let mut i = initiator_config();
    i.security = SecurityConfig::symmetric(key);
    let mut sim = Sim::with(r, i);
    sim.peer = token_peer("bearer:flooder", DOMAIN);
    for _ in 0..3 {
        let hello = sim.initiator.hello();
        assert!(matches!(sim.send_responder(&hello), Ok(Outcome::Reply(_))));
    }
    let hello = sim.initiator.hello();
    let err = sim.send_responder(&hello).unwrap_err().error;
    assert_eq!(err.code, codes::CAPACITY_EXCEEDED);
    assert!(err.retryable);
    // Another credential (same `from`, same secret) keeps working.
    sim.peer = token_peer("bearer:victim", DOMAIN);
    let sid = sim.session();
    sim.submit(&sid, "echo", frame("still works")).task();
    // Unauthenticated senders of a transport that knows no address (in process) are counted by their declared
    // `from`; over a network, by their address (`ldp-cli/tests/quotas.rs`).
    sim.peer = PeerContext::default();
    for _ in 0..3 {
        let hello = sim.initiator.hello();
        assert!(matches!(sim.send_responder(&hello), Ok(Outcome::Reply(_))));
    }
    let hello = sim.initiator.hello();
    assert_eq!(sim.send_responder(&hello).unwrap_err().error.code, codes::CAPACITY_EXCEEDED);
}

#[test]
fn unsigned_messages_need_an_rfc3339_timestamp() {
    let mut sim = Sim::new();
    for bad in ["not a time", "", "2026-13-01T00:00:00Z", "yesterday"] {
        let mut env = propose_env(&mut sim);
        env.timestamp = bad.to_owned();
        let refusal = sim.send_responder(&env).unwrap_err();
        assert_eq!(refusal.error.code, codes::MALFORMED_MESSAGE, "{bad:?}");
        assert!(!refusal.error.retryable);
    }
    assert_eq!(sim.responder.session_count(), 0);
    // Offsets other than Z, and fractions, as the Python SDK sends them, are fine.
    let mut env = propose_env(&mut sim);
    env.timestamp = "2026-03-09T11:00:00.123456+01:00".into();
    assert!(matches!(sim.send_responder(&env), Ok(Outcome::Reply(_))));
}

#[test]
fn an_unsigned_duplicate_proposal_does_not_open_a_second_session() {
    let mut cfg = responder_config();
    cfg.limits.unsigned_dedupe_entries = 3;
    let mut sim = Sim::with(cfg, initiator_config());
    let env = propose_env(&mut sim);
    assert!(matches!(sim.send_responder(&env), Ok(Outcome::Reply(_))));
    let again = sim.send_responder(&env).unwrap_err();
    assert_eq!((again.error.category, again.error.code.as_str()), (ErrorCategory::Security, codes::REPLAY_DETECTED));
    assert_eq!(again.reply.unwrap().body.type_name(), "SESSION_REJECT");
    assert_eq!(sim.responder.session_count(), 1);
    // A duplicate task is refused too, and the task runs once.
    let sid = sim.session();
    let submit = sim.initiator.submit(&sid, "echo", frame("once"), None, None).unwrap();
    assert!(matches!(sim.send_responder(&submit), Ok(Outcome::Execute(_))));
    assert_eq!(sim.send_responder(&submit).unwrap_err().error.code, codes::REPLAY_DETECTED);
    assert_eq!(sim.responder.running_tasks(), 1);
    // The table is bounded: the oldest ids are forgotten (never a new message refused), and ids leave with time.
    for _ in 0..3 {
        let fresh = propose_env(&mut sim);
        assert!(matches!(sim.send_responder(&fresh), Ok(Outcome::Reply(_))));
    }
    let mut late = sim.initiator.submit(&sid, "echo", frame("later"), None, None).unwrap();
    assert!(matches!(sim.send_responder(&late), Ok(Outcome::Execute(_))));
    sim.advance(std::time::Duration::from_secs(301));
    late.timestamp = ldp_types::time::format_timestamp(ldp_session::WallClock::now_utc(&sim.clock));
    // Same id after the window: accepted as a message again (the task id is now a duplicate task instead).
    assert_ne!(sim.send_responder(&late).unwrap_err().error.code, codes::REPLAY_DETECTED);
}

/// Sends a proposal under `from`.
#[allow(clippy::result_large_err)] // The machine's own answer, passed on as `Sim::send_responder` gives it.
fn propose_as(sim: &mut Sim, from: &str) -> Result<Outcome, ldp_session::Refusal> {
    let env = proposal_from(sim, from);
    sim.send_responder(&env)
}

/// An unauthenticated peer at `address`, as a network transport reports it.
fn from_address(address: &str) -> PeerContext {
    PeerContext { address: Some(address.parse().unwrap()), ..PeerContext::default() }
}

/// The session a proposal opened, from its SESSION_ACCEPT.
fn accepted(outcome: Result<Outcome, ldp_session::Refusal>) -> String {
    match outcome {
        Ok(Outcome::Reply(env)) => match env.body {
            ldp_types::Body::SessionAccept(a) => a.session_id,
            other => panic!("expected SESSION_ACCEPT, got {}", other.type_name()),
        },
        other => panic!("expected SESSION_ACCEPT, got {other:?}"),
    }
}

/// Issue 58: an unauthenticated peer counts against its address, whatever `from` it declares; in a full table the
/// heaviest source's least recently used idle session makes room for a lighter source, never the other way round,
/// never a session running a task, and never between sources of equal weight.
#[test]
fn a_full_session_table_makes_room_from_the_heaviest_source_only() {
    let mut cfg = responder_config();
    (cfg.limits.max_sessions, cfg.limits.max_sessions_per_principal) = (6, 100);
    let mut sim = Sim::with(cfg, initiator_config());
    // The attacker fills the table rotating `from`: one source all the same.
    sim.peer = from_address("127.0.0.1");
    let mut flood = Vec::new();
    for i in 0..6 {
        let env = proposal_from(&mut sim, &format!("ldp:delegate:bot-{i}"));
        flood.push((env.from.clone(), accepted(sim.send_responder(&env))));
        sim.advance(std::time::Duration::from_secs(1));
    }
    capacity_refused(propose_as(&mut sim, "ldp:delegate:bot-6"));
    // The oldest of the attacker's sessions is busy: it stays, the next oldest idle one goes.
    let (busy_from, busy) = flood[0].clone();
    let mut submit = sim.forge(&busy, TaskSubmit::new("t".into(), "echo".into(), frame("x"), None), PayloadMode::Text);
    submit.from = busy_from;
    assert!(matches!(sim.send_responder(&submit), Ok(Outcome::Execute(_))));
    sim.peer = from_address("127.0.0.2");
    let honest = accepted(propose_as(&mut sim, "ldp:delegate:honest"));
    assert_eq!(sim.responder.session_count(), 6);
    assert_eq!(sim.responder.session_state(&busy), Some(SessionState::Active));
    assert_eq!(sim.responder.session_state(&flood[1].1), None, "the least recently used idle one went");
    // Its peer is told why, and may establish another.
    sim.peer = from_address("127.0.0.1");
    let mut late = sim.forge(&flood[1].1, TaskUpdate::new("t".into(), None, None), PayloadMode::Text);
    late.from = flood[1].0.clone();
    let error = sim.step(late).error();
    assert_eq!(error.code, codes::SESSION_EXPIRED);
    assert!(error.message.contains("make room"), "{}", error.message);
    // The attacker (5 sessions) cannot take the honest client's (1) back: only heavier sources give way.
    capacity_refused(propose_as(&mut sim, "ldp:delegate:bot-7"));
    assert_eq!(sim.responder.session_state(&honest), Some(SessionState::Active));
    // A second quiet source still gets in; then two of them hold 1 each and the attacker 4.
    sim.peer = from_address("127.0.0.3");
    accepted(propose_as(&mut sim, "ldp:delegate:quiet"));
    sim.peer = from_address("127.0.0.2");
    accepted(propose_as(&mut sim, "ldp:delegate:honest"));
    // Sources of equal weight never displace each other: a table of three sources of one session each is full.
    let mut cfg = responder_config();
    cfg.limits.max_sessions = 3;
    let mut sim = Sim::with(cfg, initiator_config());
    for i in 1..=3 {
        sim.peer = from_address(&format!("10.0.0.{i}"));
        accepted(propose_as(&mut sim, &format!("ldp:delegate:p{i}")));
    }
    sim.peer = from_address("10.0.0.9");
    capacity_refused(propose_as(&mut sim, "ldp:delegate:p9"));
}

/// Issue 58: proposals under a victim's `from` from another address do not use the victim's share; an IPv6 source
/// is its /64, so rotating the low bits of one address gains nothing.
#[test]
fn a_victims_share_is_its_addresses_not_its_declared_id() {
    let mut cfg = responder_config();
    cfg.limits.max_sessions_per_principal = 3;
    let mut sim = Sim::with(cfg, initiator_config());
    for i in 0..5 {
        sim.peer = from_address(&format!("2001:db8::{i}"));
        let outcome = propose_as(&mut sim, "ldp:delegate:victim");
        if i < 3 {
            accepted(outcome);
        } else {
            capacity_refused(outcome);
        }
    }
    sim.peer = from_address("2001:db8:1::1");
    accepted(propose_as(&mut sim, "ldp:delegate:victim"));
}

/// Issue 58: holders of one shared secret are told apart by address; a peer that signs with a key of its own counts
/// against that key wherever it sends from.
#[test]
fn replay_shares_are_keyed_by_address_for_a_shared_secret_and_by_key_for_a_peers_own() {
    let shared = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "shared by everyone").unwrap();
    let own = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "the initiator's own").unwrap();
    let mut r = responder_config();
    r.security = SecurityConfig::symmetric(shared.clone());
    r.security.replay = Some(ldp_session::ReplayConfig {
        max_entries: 100,
        max_entries_per_principal: 3,
        ..ldp_session::ReplayConfig::default()
    });
    let mut i = initiator_config();
    i.security = SecurityConfig::symmetric(shared.clone());
    let mut sim = Sim::with(r.clone(), i);
    let hello_from = |sim: &mut Sim, from: &str| {
        let mut env = sim.initiator.hello();
        env.from = from.to_owned();
        env.nonce = Some(format!("n-{}", sim.wire.len()));
        env.message_id = format!("m-{}", sim.wire.len());
        env
    };
    let signed = |env: &mut Envelope, key: &SigningKey| signing::sign(env, key).unwrap();
    // One address rotating `from`: one share.
    sim.peer = from_address("127.0.0.1");
    for n in 0..4 {
        let mut env = hello_from(&mut sim, &format!("ldp:delegate:bot-{n}"));
        signed(&mut env, &shared);
        let outcome = sim.send_responder(&env);
        if n < 3 {
            assert!(matches!(outcome, Ok(Outcome::Reply(_))), "{outcome:?}");
        } else {
            capacity_refused_any(outcome);
        }
    }
    // Another address holding the same secret keeps working.
    sim.peer = from_address("127.0.0.2");
    let mut env = hello_from(&mut sim, "ldp:delegate:bot-0");
    signed(&mut env, &shared);
    assert!(matches!(sim.send_responder(&env), Ok(Outcome::Reply(_))));

    // A peer with a key of its own counts against the key, from any address.
    r.security
        .peer_policies
        .insert("ldp:delegate:own".into(), ldp_session::SignaturePolicy::Require(own.verifying_key()));
    let mut sim = Sim::with(r, initiator_config());
    for n in 0..4 {
        sim.peer = from_address(&format!("10.9.0.{n}"));
        let mut env = hello_from(&mut sim, "ldp:delegate:own");
        signed(&mut env, &own);
        let outcome = sim.send_responder(&env);
        if n < 3 {
            assert!(matches!(outcome, Ok(Outcome::Reply(_))), "{outcome:?}");
        } else {
            capacity_refused_any(outcome);
        }
    }
}

fn capacity_refused_any(r: Result<Outcome, ldp_session::Refusal>) {
    let refusal = r.unwrap_err();
    assert_eq!(refusal.error.code, codes::CAPACITY_EXCEEDED);
    assert!(refusal.error.retryable);
}
