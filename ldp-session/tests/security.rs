#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Message security (RFC 7.3, message level): signature policy per peer, replay protection within a timestamp
//! window, signed replies.

use std::collections::HashMap;
use std::time::Duration;

use crate::support::*;
use ldp_session::{InitiatorEvent, Outcome, ReplayConfig, SecurityConfig, SessionError, SignaturePolicy, TaskOutput};
use ldp_types::signing::{self, SignatureAlgorithm, SigningKey};
use ldp_types::{Body, ErrorCategory, Hello, PayloadMode, SessionConfig, SessionPropose, TaskSubmit, codes};
use serde_json::{Value, json};

fn key(alg: SignatureAlgorithm) -> SigningKey {
    match alg {
        SignatureAlgorithm::Ed25519Jcs => SigningKey::ed25519_from_seed(&[7; 32]),
        shared => SigningKey::shared_secret(shared, "correct horse battery staple").unwrap(),
    }
}

fn other_key(alg: SignatureAlgorithm) -> SigningKey {
    match alg {
        SignatureAlgorithm::Ed25519Jcs => SigningKey::ed25519_from_seed(&[8; 32]),
        shared => SigningKey::shared_secret(shared, "wrong secret").unwrap(),
    }
}

/// Both sides sign with `alg` and require the other to.
fn signed_sim(alg: SignatureAlgorithm) -> Sim {
    let mut r = responder_config();
    r.security = SecurityConfig::symmetric(key(alg));
    let mut i = initiator_config();
    i.security = SecurityConfig::symmetric(key(alg));
    Sim::with(r, i)
}

fn security_code(r: Result<Outcome, ldp_session::Refusal>) -> String {
    let refusal = r.unwrap_err();
    assert_eq!(refusal.error.category, ErrorCategory::Security, "{:?}", refusal.error);
    assert!(refusal.reply.is_some());
    refusal.error.code.to_string()
}

#[test]
fn a_signed_exchange_works_with_every_algorithm_and_replies_verify() {
    for alg in SignatureAlgorithm::ALL {
        let mut sim = signed_sim(alg);
        let sid = sim.session();
        let step = sim.submit(&sid, "echo", frame("signed"));
        let task = step.task();
        sim.complete(&task.key, TaskOutput::new(json!("ok")));
        assert!(matches!(sim.initiator_events().as_slice(), [InitiatorEvent::TaskCompleted { .. }]), "{alg}");
        // Every message on the wire, both ways, is signed with the algorithm and carries a nonce.
        for (dir, env) in &sim.wire {
            assert_eq!(env.signature_algorithm.as_deref(), Some(alg.as_str()), "{alg} {dir:?}");
            assert!(env.nonce.is_some());
            signing::verify(env, &key(alg).verifying_key()).unwrap();
        }
    }
}

#[test]
fn bad_and_missing_signatures_get_typed_security_answers() {
    for alg in SignatureAlgorithm::ALL {
        let mut sim = signed_sim(alg);
        let sid = sim.session();
        let submit = |sim: &mut Sim, t: &str| {
            sim.forge(&sid, TaskSubmit::new(t.into(), "echo".into(), frame("x"), None), PayloadMode::SemanticFrame)
        };
        // Unsigned.
        let env = submit(&mut sim, "t1");
        assert_eq!(security_code(sim.send_responder(&env)), codes::SIGNATURE_REQUIRED, "{alg}");
        // Signed with the wrong key.
        let mut env = submit(&mut sim, "t2");
        signing::sign(&mut env, &other_key(alg)).unwrap();
        assert_eq!(security_code(sim.send_responder(&env)), codes::SIGNATURE_INVALID, "{alg}");
        // Signed, then a covered field changed in transit.
        let mut env = submit(&mut sim, "t3");
        signing::sign(&mut env, &key(alg)).unwrap();
        env.from = STRANGER.into();
        assert_eq!(security_code(sim.send_responder(&env)), codes::SIGNATURE_INVALID, "{alg}");
        // Signed under another algorithm's name.
        let mut env = submit(&mut sim, "t4");
        signing::sign(&mut env, &key(alg)).unwrap();
        env.signature_algorithm =
            Some(SignatureAlgorithm::ALL.into_iter().find(|a| *a != alg).unwrap().as_str().to_owned());
        assert_eq!(security_code(sim.send_responder(&env)), codes::SIGNATURE_INVALID, "{alg}");
        // Correctly signed: accepted.
        let mut env = submit(&mut sim, "t5");
        env.nonce = Some("00".repeat(16));
        signing::sign(&mut env, &key(alg)).unwrap();
        assert!(matches!(sim.send_responder(&env), Ok(Outcome::Execute(_))), "{alg}");
        assert_eq!(sim.responder.running_tasks(), 1);
    }
}

#[test]
fn body_covering_algorithms_detect_a_tampered_payload() {
    for alg in [SignatureAlgorithm::HmacSha256Jcs, SignatureAlgorithm::Ed25519Jcs] {
        let mut sim = signed_sim(alg);
        let sid = sim.session();
        let mut env = sim.initiator.submit(&sid, "echo", frame("pay 10 USD"), None, None).unwrap();
        let Body::TaskSubmit(ts) = &mut env.body else { unreachable!() };
        ts.input = frame("pay 10000 USD").into();
        assert_eq!(security_code(sim.send_responder(&env)), codes::SIGNATURE_INVALID, "{alg}");
    }
}

#[test]
fn jcs_verification_covers_the_json_as_received() {
    // A member added as `null` in transit (as Python peers write unused members) is part of the received JSON, and
    // so of the canonical bytes: the responder verifies what it received, not a re-serialisation of its decode.
    for alg in [SignatureAlgorithm::HmacSha256Jcs, SignatureAlgorithm::Ed25519Jcs] {
        let mut sim = signed_sim(alg);
        let hello = sim.initiator.hello();
        let mut raw = hello.to_value().unwrap();
        assert!(raw.get("signature").is_some());
        let bytes = serde_json::to_vec(&raw).unwrap();
        assert!(matches!(sim.send_responder_bytes(&bytes), Ok(Outcome::Reply(_))), "{alg}");
        // Signatures are checked before the replay table, so reusing the message id does not matter here.
        raw["body"].as_object_mut().unwrap().insert("task_id".into(), Value::Null);
        let bytes = serde_json::to_vec(&raw).unwrap();
        let decoded = ldp_types::Envelope::from_slice(&bytes).unwrap();
        assert_eq!(decoded, hello, "the typed decode drops the null member");
        let refusal = sim.send_responder_bytes(&bytes).unwrap_err();
        assert_eq!(refusal.error.code, codes::SIGNATURE_INVALID, "{alg}");
    }
}

#[test]
fn per_peer_policies_and_unsigned_hello() {
    let alg = SignatureAlgorithm::HmacSha256;
    // (allow_unsigned_hello, sender, HELLO accepted unsigned)
    for (allow_hello, sender, accepted) in
        [(false, INITIATOR, false), (true, INITIATOR, true), (false, STRANGER, true), (true, STRANGER, true)]
    {
        let mut r = responder_config();
        r.security = SecurityConfig {
            signing_key: Some(key(alg)),
            default_policy: SignaturePolicy::Require(key(alg).verifying_key()),
            // The stranger is a known unsigned peer.
            peer_policies: HashMap::from([(STRANGER.to_owned(), SignaturePolicy::None)]),
            allow_unsigned_hello: allow_hello,
            replay: None,
        };
        let mut sim = Sim::with(r, initiator_config());
        let mut hello = sim.forge("", Hello::new(sender.into(), vec![PayloadMode::Text]), PayloadMode::Text);
        hello.from = sender.into();
        let outcome = sim.send_responder(&hello);
        assert_eq!(outcome.is_ok(), accepted, "allow_unsigned_hello={allow_hello} from {sender}: {outcome:?}");
        if !accepted {
            assert_eq!(security_code(outcome), codes::SIGNATURE_REQUIRED);
        }
        // Unsigned HELLO is the only exception: an unsigned proposal from the signing peer is refused.
        let mut propose = sim.forge("", SessionPropose::new(SessionConfig::default()), PayloadMode::Text);
        propose.from = sender.into();
        let outcome = sim.send_responder(&propose);
        if sender == INITIATOR {
            let refusal = outcome.unwrap_err();
            assert_eq!(refusal.error.code, codes::SIGNATURE_REQUIRED);
            assert!(matches!(refusal.reply.unwrap().body, Body::SessionReject(_)));
        } else {
            assert!(matches!(outcome, Ok(Outcome::Reply(_))));
        }
    }
}

fn replay_sim(window: u64, skew: u64, max_entries: usize) -> Sim {
    let mut r = responder_config();
    r.security.replay = Some(ReplayConfig {
        window: Duration::from_secs(window),
        future_skew: Duration::from_secs(skew),
        max_entries,
        ..ReplayConfig::default()
    });
    Sim::with(r, initiator_config())
}

#[test]
fn replays_within_the_window_are_refused() {
    let mut sim = replay_sim(60, 5, 1000);
    let sid = sim.session();
    let env = sim.initiator.submit(&sid, "echo", frame("once"), None, None).unwrap();
    assert!(matches!(sim.send_responder(&env), Ok(Outcome::Execute(_))));
    sim.advance(Duration::from_secs(30));
    assert_eq!(security_code(sim.send_responder(&env)), codes::REPLAY_DETECTED);
    // Same message id with another nonce is another message.
    let mut other = env.clone();
    other.nonce = Some("ff".repeat(16));
    let Body::TaskSubmit(ts) = &mut other.body else { unreachable!() };
    ts.task_id = "second".into();
    assert!(matches!(sim.send_responder(&other), Ok(Outcome::Execute(_))));
    // After the window the replay is refused for its stale timestamp.
    sim.advance(Duration::from_secs(31));
    assert_eq!(security_code(sim.send_responder(&env)), codes::TIMESTAMP_OUT_OF_WINDOW);
}

#[test]
fn timestamps_outside_the_window_or_unparseable_are_refused() {
    let mut sim = replay_sim(60, 5, 1000);
    let sid = sim.session();
    let fmt = |secs: i64| ldp_types::time::format_timestamp(START + time::Duration::seconds(secs));
    // (timestamp, accepted)
    let table = [
        (fmt(0), true),
        (fmt(-60), true),
        (fmt(-61), false),
        (fmt(5), true),
        (fmt(6), false),
        ("2026-03-09T10:00:00.123456+00:00".to_owned(), true),
        ("2026-03-09T11:00:00+01:00".to_owned(), true),
        ("yesterday".to_owned(), false),
        (String::new(), false),
        ("2026-13-40T99:00:00Z".to_owned(), false),
    ];
    for (i, (ts, accepted)) in table.into_iter().enumerate() {
        let mut env = sim.forge(
            &sid,
            TaskSubmit::new(format!("t{i}"), "echo".into(), frame("x"), None),
            PayloadMode::SemanticFrame,
        );
        env.timestamp = ts.clone();
        let outcome = sim.send_responder(&env);
        if accepted {
            assert!(matches!(outcome, Ok(Outcome::Execute(_))), "{ts:?}: {outcome:?}");
        } else {
            assert_eq!(security_code(outcome), codes::TIMESTAMP_OUT_OF_WINDOW, "{ts:?}");
        }
    }
}

#[test]
fn flooding_with_fresh_nonces_never_evicts_a_remembered_message() {
    let mut sim = replay_sim(60, 5, 4);
    let hello = |sim: &mut Sim, nonce: &str| {
        sim.forge("", Hello::new(INITIATOR.into(), vec![PayloadMode::Text]), PayloadMode::Text).with_nonce(nonce)
    };
    let victim = hello(&mut sim, "victim");
    assert!(sim.send_responder(&victim).is_ok());
    let mut refused = 0;
    for i in 0..20 {
        let mut flood = hello(&mut sim, &format!("flood-{i}"));
        flood.message_id = format!("flood-{i}");
        match sim.send_responder(&flood) {
            Ok(_) => {}
            Err(r) => {
                assert_eq!((r.error.code.as_str(), r.error.retryable), (codes::CAPACITY_EXCEEDED, true));
                refused += 1;
            }
        }
    }
    // One source holds at most the room the table has left: half of its 4 entries, the victim's and one flood.
    assert_eq!(refused, 19, "the source holds half the table and is refused the rest");
    assert_eq!(security_code(sim.send_responder(&victim)), codes::REPLAY_DETECTED);
    // Once the window has passed the table empties, and the victim is refused for its age.
    sim.advance(Duration::from_secs(61));
    let _reaped = sim.responder.handle_timeout(sim.now());
    let fresh = hello(&mut sim, "fresh");
    assert!(sim.send_responder(&fresh).is_ok());
    assert_eq!(security_code(sim.send_responder(&victim)), codes::TIMESTAMP_OUT_OF_WINDOW);
}

#[test]
fn the_initiator_verifies_replies_and_refuses_replays() {
    for alg in SignatureAlgorithm::ALL {
        let mut sim = signed_sim(alg);
        let sid = sim.session();
        let task = sim.submit(&sid, "echo", frame("x")).task();
        let ldp_session::Delivery::Send(result) =
            sim.responder.complete_task(sim.now(), &task.key, TaskOutput::new(json!("genuine"))).unwrap()
        else {
            panic!()
        };
        // Forged by someone without the key.
        let mut forged = result.clone();
        signing::sign(&mut forged, &other_key(alg)).unwrap();
        let err = sim.send_initiator(&forged).unwrap_err();
        assert!(matches!(&err, SessionError::Peer(e) if e.code == codes::SIGNATURE_INVALID), "{alg}: {err:?}");
        // Unsigned.
        let mut unsigned = result.clone();
        unsigned.signature = None;
        let err = sim.send_initiator(&unsigned).unwrap_err();
        assert!(matches!(&err, SessionError::Peer(e) if e.code == codes::SIGNATURE_REQUIRED), "{alg}: {err:?}");
        // Genuine: accepted once.
        sim.send_initiator(&result).unwrap();
        let err = sim.send_initiator(&result).unwrap_err();
        assert!(matches!(&err, SessionError::Peer(e) if e.code == codes::REPLAY_DETECTED), "{alg}: {err:?}");
        assert_eq!(sim.initiator_events().len(), 1);
    }
}

#[test]
fn refusals_are_signed_too() {
    let alg = SignatureAlgorithm::HmacSha256Jcs;
    let mut sim = signed_sim(alg);
    let sid = sim.session();
    let step = sim.submit(&sid, "no-such-skill", frame("x"));
    let reply = step.reply();
    signing::verify(&reply, &key(alg).verifying_key()).unwrap();
    step.reply.unwrap().1.unwrap();
}

/// RFC 3.1's envelope has a `provenance` member, and the transcript ldp-session-flow.json (step 6) carries the
/// TASK_RESULT's provenance there as well as in the body: the responder fills both, with the same record, before
/// signing (so a signature over the envelope covers it).
#[test]
fn task_result_fills_the_envelope_provenance_too() {
    for alg in SignatureAlgorithm::ALL {
        let mut sim = signed_sim(alg);
        let sid = sim.session();
        let task = sim.submit(&sid, "echo", frame("x")).task();
        let ldp_session::Delivery::Send(result) =
            sim.responder.complete_task(sim.now(), &task.key, TaskOutput::new(json!("genuine"))).unwrap()
        else {
            panic!()
        };
        let ldp_types::Body::TaskResult(body) = &result.body else { panic!("{:?}", result.body) };
        assert_eq!(result.provenance.as_deref(), Some(&*body.provenance), "{alg}");
        let wire = result.to_value().unwrap();
        assert_eq!(wire["provenance"], wire["body"]["provenance"], "{alg}");
        assert!(wire["provenance"]["produced_by"].is_string(), "{alg}");
        // The initiator accepts it.
        sim.send_initiator(&result).unwrap();
    }
}
