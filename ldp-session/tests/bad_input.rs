#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Bad input to `Responder::handle(bytes)`: every case is a defined, typed refusal, and none disturbs live sessions.

use crate::support::*;
use ldp_session::{Outcome, SessionState};
use ldp_types::{Body, ErrorCategory, PayloadMode, codes};
use serde_json::{Value, json};

fn envelope_json(sim: &mut Sim, session_id: &str, body: Value) -> Value {
    let mut v = sim.forge(session_id, ldp_types::SessionClose::new(None), PayloadMode::Text).to_value().unwrap();
    v["body"] = body;
    v
}

#[test]
fn undecodable_input_is_refused_as_malformed_without_a_reply() {
    let mut sim = Sim::new();
    let sid = sim.session();
    let valid = envelope_json(&mut sim, &sid, json!({"type": "SESSION_CLOSE"}));
    let with = |f: &dyn Fn(&mut Value)| {
        let mut v = valid.clone();
        f(&mut v);
        serde_json::to_vec(&v).unwrap()
    };
    let deep = format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000));
    let table: Vec<(&str, Vec<u8>)> = vec![
        ("empty", b"".to_vec()),
        ("not json", b"hello".to_vec()),
        ("truncated", serde_json::to_vec(&valid).unwrap()[..40].to_vec()),
        ("not utf-8", vec![0xff, 0xfe, b'{', b'}']),
        ("a json array", b"[1,2,3]".to_vec()),
        ("a json string", b"\"HELLO\"".to_vec()),
        ("null", b"null".to_vec()),
        ("an empty object", b"{}".to_vec()),
        ("deeply nested", deep.into_bytes()),
        ("body missing", with(&|v| drop(v.as_object_mut().unwrap().remove("body")))),
        ("body not an object", with(&|v| v["body"] = json!("SESSION_CLOSE"))),
        ("body without type", with(&|v| v["body"] = json!({"reason": "x"}))),
        ("type not a string", with(&|v| v["body"] = json!({"type": 7}))),
        ("unknown payload mode", with(&|v| v["payload_mode"] = json!("telepathy"))),
        ("payload mode as a number", with(&|v| v["payload_mode"] = json!(1))),
        ("session id not a string", with(&|v| v["session_id"] = json!(12))),
        ("from not a string", with(&|v| v["from"] = json!({"id": 1}))),
        ("negative ttl", with(&|v| v["body"] = json!({"type": "SESSION_PROPOSE", "config": {"ttl_secs": -1}}))),
        ("ttl beyond u64", with(&|v| v["body"] = json!({"type": "SESSION_PROPOSE", "config": {"ttl_secs": 1e30}}))),
        (
            "unknown mode in preferences",
            with(&|v| v["body"] = json!({"type": "SESSION_PROPOSE", "config": {"preferred_payload_modes": ["x"]}})),
        ),
        ("task id not a string", with(&|v| v["body"] = json!({"type": "TASK_SUBMIT", "task_id": 5, "skill": "echo"}))),
    ];
    for (what, bytes) in table {
        let refusal = sim.send_responder_bytes(&bytes).expect_err(what);
        assert_eq!(
            (refusal.error.category, refusal.error.code.as_str(), refusal.error.retryable),
            (ErrorCategory::Runtime, codes::MALFORMED_MESSAGE, false),
            "{what}: {:?}",
            refusal.error
        );
        assert!(refusal.reply.is_none(), "{what}: an undecodable message has no one to address");
    }
    assert_eq!(sim.responder.session_state(&sid), Some(SessionState::Active));
    assert_eq!(sim.responder.session_count(), 1);
}

#[test]
fn unknown_message_types_get_a_task_failed_reply() {
    let mut sim = Sim::new();
    let sid = sim.session();
    for name in ["TASK_EXPLODE", "task_submit", "", "HELLO ", "Hello"] {
        let v = envelope_json(&mut sim, &sid, json!({"type": name, "task_id": "t-9", "extra": [1, 2]}));
        let refusal = sim.send_responder_bytes(&serde_json::to_vec(&v).unwrap()).expect_err(name);
        assert_eq!(
            (refusal.error.category, refusal.error.code.as_str()),
            (ErrorCategory::Capability, codes::UNKNOWN_MESSAGE_TYPE),
            "{name:?}"
        );
        let reply = refusal.reply.unwrap();
        assert_eq!((reply.to.as_str(), reply.session_id.as_str()), (INITIATOR, sid.as_str()));
        let Body::TaskFailed(f) = &reply.body else { panic!("{reply:?}") };
        assert_eq!(f.error, refusal.error);
        // The initiator can read the answer.
        sim.send_initiator(&reply).unwrap();
    }
    assert_eq!(sim.responder.session_state(&sid), Some(SessionState::Active));
}

#[test]
fn odd_but_valid_values_are_handled_without_harm() {
    let mut sim = Sim::new();
    let sid = sim.session();
    // A large input, unicode everywhere, unknown members: accepted and passed through untouched.
    let big = "é🙂".repeat(100_000);
    let input = json!({"task_type": "echo", "instruction": big, "nested": {"x": [null, 1e308, -0.0]}});
    let mut v = envelope_json(
        &mut sim,
        &sid,
        json!({"type": "TASK_SUBMIT", "task_id": "ünïcødé-🙂", "skill": "echo", "input": input, "x-extra": true}),
    );
    v["payload_mode"] = json!("semantic_frame");
    v["x-envelope-extension"] = json!({"a": 1});
    let Ok(Outcome::Execute(task)) = sim.send_responder_bytes(&serde_json::to_vec(&v).unwrap()) else { panic!() };
    assert_eq!(task.input, input);
    assert_eq!(task.key.task_id, "ünïcødé-🙂");
    // A task id of 1 MB is refused before it is stored (issue 14: identifiers are bounded, 256 bytes by default).
    let long = "t".repeat(1 << 20);
    let v =
        envelope_json(&mut sim, &sid, json!({"type": "TASK_SUBMIT", "task_id": long, "skill": "echo", "input": "x"}));
    let refusal = sim.send_responder_bytes(&serde_json::to_vec(&v).unwrap()).unwrap_err();
    assert_eq!(refusal.error.code, codes::MALFORMED_MESSAGE);
    let long = "t".repeat(256);
    let mut v =
        envelope_json(&mut sim, &sid, json!({"type": "TASK_SUBMIT", "task_id": long, "skill": "echo", "input": "x"}));
    v["payload_mode"] = json!("semantic_frame");
    // In semantic-frame mode a bare string is not a frame: it runs in text, the next mode of the chain
    // (transparent fallback, the default).
    let Ok(Outcome::Execute(task)) = sim.send_responder_bytes(&serde_json::to_vec(&v).unwrap()) else {
        panic!("expected a transparent fallback to text")
    };
    assert_eq!(task.payload_mode, PayloadMode::Text);
    assert_eq!(task.key.task_id.len(), 256);
    // Future payload modes in the envelope decode, and are refused as not negotiated.
    let mut v =
        envelope_json(&mut sim, &sid, json!({"type": "TASK_SUBMIT", "task_id": "cs", "skill": "echo", "input": "x"}));
    v["payload_mode"] = json!("cache_slices");
    let refusal = sim.send_responder_bytes(&serde_json::to_vec(&v).unwrap()).unwrap_err();
    assert_eq!(refusal.error.code, codes::PAYLOAD_MODE_FAILED);
    // Python-style nulls for every unused member are accepted.
    let v = json!({
        "message_id": "py-1", "session_id": sid, "from": INITIATOR, "to": "http://127.0.0.1:8090",
        "payload_mode": "text", "timestamp": "2026-03-09T10:00:00.123456+00:00", "provenance": null,
        "signature": null, "signature_algorithm": null,
        "body": {"type": "TASK_UPDATE", "task_id": task.key.task_id, "progress": null, "message": null,
                 "skill": null, "input": null, "output": null, "error": null, "config": null}
    });
    let Ok(Outcome::Reply(reply)) = sim.send_responder_bytes(&serde_json::to_vec(&v).unwrap()) else { panic!() };
    assert!(matches!(&reply.body, Body::TaskUpdate(u) if u.message.as_deref() == Some("running")));
}
