#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Bad input gives the right typed [`ldp_types::Error`] variant, and [`LdpError::from`] turns it into the expected
//! wire code and category.

use ldp_types::signing::{self, SignatureAlgorithm, SigningKey};
use ldp_types::{
    DelegateId, Envelope, Error, ErrorCategory, ErrorSeverity, IdentityCard, LdpError, MessageType, PayloadMode, Score,
    SemanticFrame, codes, validate_payload,
};
use serde_json::{Value, json};

fn flow() -> Vec<Value> {
    serde_json::from_str(include_str!("fixtures/ldp-session-flow.json")).unwrap()
}

fn submit() -> Value {
    flow()[4].clone()
}

fn card() -> Value {
    json!({"delegate_id": "ldp:delegate:qwen3-8b", "name": "Q", "model_family": "qwen", "model_version": "3",
        "trust_domain": {"name": "research.internal"}, "context_window": 32768,
        "capabilities": [{"name": "reasoning", "quality_hint": 0.85}], "supported_payload_modes": ["text"]})
}

/// Asserts the wire mapping of a local error.
fn assert_wire(err: &Error, code: &str, category: ErrorCategory) -> LdpError {
    let wire = LdpError::from(err);
    assert_eq!((wire.code.as_str(), wire.category), (code, category), "{err}");
    assert_eq!(wire.message, err.to_string());
    wire
}

fn assert_malformed_message(err: &Error) {
    let wire = assert_wire(err, codes::MALFORMED_MESSAGE, ErrorCategory::Runtime);
    // A malformed message is not worth retrying as is.
    assert!(!wire.retryable, "{err}");
    assert_eq!(wire.severity, ErrorSeverity::Error);
}

#[test]
fn truncated_json_is_malformed_json() {
    let text = serde_json::to_string(&submit()).unwrap();
    for cut in [0, 1, 10, text.len() / 2, text.len() - 1] {
        let err = Envelope::from_json(&text[..cut]).unwrap_err();
        assert!(matches!(err, Error::MalformedJson(_)), "cut at {cut}: {err:?}");
        assert_malformed_message(&err);
        let err = Envelope::from_slice(&text.as_bytes()[..cut]).unwrap_err();
        assert!(matches!(err, Error::MalformedJson(_)), "cut at {cut}: {err:?}");
    }
    for garbage in ["{\"message_id\":\"m\",}", "nul", "{'a': 1}", "{\"a\" 1}", "\u{feff}{}"] {
        assert!(matches!(Envelope::from_json(garbage), Err(Error::MalformedJson(_))), "{garbage}");
    }
    // Invalid UTF-8 inside a string.
    let mut bytes = text.clone().into_bytes();
    let at = text.find("reasoning").unwrap();
    bytes[at] = 0xff;
    assert!(matches!(Envelope::from_slice(&bytes), Err(Error::MalformedJson(_))));
    let card = card().to_string();
    assert!(matches!(IdentityCard::from_json(&card[..card.len() - 2]), Err(Error::MalformedJson(_))));
}

/// Applies `f` to a copy of the TASK_SUBMIT and decodes it, expecting `InvalidMessage` mentioning `needle`.
fn invalid(what: &str, needle: &str, f: impl FnOnce(&mut Value)) {
    let mut v = submit();
    f(&mut v);
    for err in [Envelope::from_value(v.clone()).unwrap_err(), Envelope::from_json(&v.to_string()).unwrap_err()] {
        assert!(matches!(err, Error::InvalidMessage(_)), "{what}: {err:?}");
        assert!(err.to_string().contains(needle), "{what}: {err} does not mention {needle:?}");
        assert_malformed_message(&err);
    }
}

#[test]
fn wrong_types_are_invalid_messages() {
    invalid("numeric message_id", "invalid type: integer", |v| v["message_id"] = json!(5));
    invalid("array from", "invalid type: sequence", |v| v["from"] = json!(["a"]));
    invalid("object timestamp", "invalid type: map", |v| v["timestamp"] = json!({}));
    invalid("boolean session_id", "invalid type: boolean", |v| v["session_id"] = json!(true));
    invalid("string body", "invalid type: string", |v| v["body"] = json!("TASK_SUBMIT"));
    invalid("numeric type", "invalid type: integer", |v| v["body"]["type"] = json!(6));
    invalid("numeric skill", "invalid type: integer", |v| v["body"]["skill"] = json!(1));
    invalid("string progress", "invalid type: string", |v| v["body"]["progress"] = json!("half"));
    invalid("string contract", "invalid type: string", |v| v["body"]["contract"] = json!("ctr-1"));
    invalid("numeric nonce", "invalid type: integer", |v| v["nonce"] = json!(1));
    invalid("string provenance", "invalid type: string", |v| v["provenance"] = json!("me"));
    invalid("negative budget", "invalid value: integer `-1`", |v| {
        v["body"]["contract"] = json!({"contract_id": "c", "policy": {"budget": {"max_tokens": -1}}})
    });
    invalid("error without category", "missing field `category`", |v| {
        v["body"] = json!({"type": "TASK_FAILED", "task_id": "t", "error": {"code": "X", "message": "m"}})
    });
    invalid("unknown error category", "unknown variant `weird`", |v| {
        v["body"] = json!({"type": "TASK_FAILED", "task_id": "t", "error": {"code": "X", "category": "weird"}})
    });
    for not_an_object in [json!([]), json!("envelope"), json!(1), Value::Null] {
        let err = Envelope::from_value(not_an_object.clone()).unwrap_err();
        assert!(matches!(err, Error::InvalidMessage(_)), "{not_an_object}: {err:?}");
    }
}

#[test]
fn out_of_range_scores_are_rejected() {
    for bad in [-0.01, 1.01, 2.0, f64::NAN, f64::INFINITY] {
        let err = Score::new(bad).unwrap_err();
        assert!(matches!(err, Error::ScoreOutOfRange(_)), "{bad}: {err:?}");
        assert_malformed_message(&err);
    }
    assert!(Score::new(0.0).is_ok() && Score::new(1.0).is_ok());
    let provenance = |confidence: Value| json!({"produced_by": "ldp:delegate:q", "model_version": "3", "payload_mode_used": "text", "confidence": confidence});
    for bad in [json!(1.2), json!(-0.5), json!(2)] {
        invalid("envelope confidence", "out of range", |v| v["provenance"] = provenance(bad.clone()));
        invalid("result confidence", "out of range", |v| {
            v["body"] =
                json!({"type": "TASK_RESULT", "task_id": "t", "output": "o", "provenance": provenance(bad.clone())})
        });
        let mut c = card();
        c["capabilities"][0]["quality_hint"] = bad.clone();
        let err = IdentityCard::from_json(&c.to_string()).unwrap_err();
        assert!(matches!(err, Error::InvalidMessage(_)) && err.to_string().contains("out of range"), "{err}");
        let mut c = card();
        c["capabilities"][0]["quality"] = json!({"quality_score": bad});
        assert!(matches!(IdentityCard::from_json(&c.to_string()), Err(Error::InvalidMessage(_))));
    }
    // A string where a score belongs is a type error, not a range error.
    invalid("string confidence", "invalid type: string", |v| v["provenance"] = provenance(json!("high")));
}

#[test]
fn bad_delegate_ids_in_a_card_are_rejected() {
    for bad in ["qwen3-8b", "ldp:delegate:", "ldp:delegate:a b", "ldp:agent:x", "LDP:delegate:x", "ldp:delegate:\t"] {
        let err = DelegateId::new(bad).unwrap_err();
        assert!(matches!(&err, Error::InvalidDelegateId(id) if id == bad), "{bad}: {err:?}");
        assert_malformed_message(&err);
        let mut c = card();
        c["delegate_id"] = json!(bad);
        let err = IdentityCard::from_json(&c.to_string()).unwrap_err();
        assert!(matches!(err, Error::InvalidMessage(_)), "{bad}: {err:?}");
        assert!(err.to_string().contains("invalid delegate id"), "{err}");
        assert_malformed_message(&err);
    }
    let mut c = card();
    c["delegate_id"] = json!(7);
    assert!(matches!(IdentityCard::from_json(&c.to_string()), Err(Error::InvalidMessage(_))));
    // The card itself is fine.
    IdentityCard::from_json(&card().to_string()).unwrap();
}

#[test]
fn unknown_payload_modes_are_rejected() {
    for bad in ["binary", "TEXT", "semantic-frame", ""] {
        let err = bad.parse::<PayloadMode>().unwrap_err();
        assert!(matches!(&err, Error::UnknownPayloadMode(m) if m == bad), "{bad}: {err:?}");
        assert_wire(&err, codes::PAYLOAD_MODE_FAILED, ErrorCategory::Capability);
        invalid("envelope payload mode", "unknown payload mode", |v| v["payload_mode"] = json!(bad));
        invalid("hello modes", "unknown payload mode", |v| {
            v["body"] = json!({"type": "HELLO", "delegate_id": "ldp:delegate:a", "supported_modes": ["text", bad]})
        });
        let mut c = card();
        c["supported_payload_modes"] = json!([bad]);
        assert!(matches!(IdentityCard::from_json(&c.to_string()), Err(Error::InvalidMessage(_))));
    }
    // Modes 2-5 parse but cannot be validated here.
    let err = validate_payload(PayloadMode::LatentCapsules, &json!({}).into()).unwrap_err();
    assert!(matches!(err, Error::UnknownPayloadMode(_)));
    assert_wire(&err, codes::PAYLOAD_MODE_FAILED, ErrorCategory::Capability);
    let err = SemanticFrame::validate(&json!({"task_type": "t"}).into()).unwrap_err();
    assert!(matches!(err, Error::InvalidSemanticFrame(_)));
    assert_wire(&err, codes::PAYLOAD_MODE_FAILED, ErrorCategory::Capability);
}

/// A minimal valid body of each type, with the members it requires.
fn minimal_body(ty: MessageType) -> (Value, &'static [&'static str]) {
    let provenance = json!({"produced_by": "ldp:delegate:q", "model_version": "3", "payload_mode_used": "text"});
    match ty {
        MessageType::Hello => (json!({"delegate_id": "ldp:delegate:a"}), &["delegate_id"]),
        MessageType::CapabilityManifest => (json!({"capabilities": []}), &["capabilities"]),
        MessageType::SessionPropose => (json!({}), &[]),
        MessageType::SessionAccept => {
            (json!({"session_id": "s", "negotiated_mode": "text"}), &["session_id", "negotiated_mode"])
        }
        MessageType::SessionReject => (json!({}), &[]),
        MessageType::TaskSubmit => (json!({"task_id": "t", "skill": "s"}), &["task_id", "skill"]),
        MessageType::TaskUpdate => (json!({"task_id": "t"}), &["task_id"]),
        MessageType::TaskResult => (json!({"task_id": "t", "provenance": provenance}), &["task_id", "provenance"]),
        MessageType::TaskFailed => (json!({"task_id": "t", "error": "boom"}), &["task_id", "error"]),
        MessageType::TaskCancel => (json!({"task_id": "t"}), &["task_id"]),
        MessageType::Attestation => (json!({}), &[]),
        MessageType::SessionClose => (json!({}), &[]),
    }
}

#[test]
fn missing_required_fields_of_each_body_type() {
    for ty in MessageType::ALL {
        let (mut body, required) = minimal_body(ty);
        body["type"] = json!(ty.as_str());
        let mut env = submit();
        env["body"] = body.clone();
        let ok = Envelope::from_value(env.clone()).unwrap_or_else(|e| panic!("{ty}: minimal body rejected: {e}"));
        assert_eq!(ok.body.message_type(), Some(ty));
        for field in required.iter().chain(["type"].iter()) {
            let mut missing = env.clone();
            missing["body"].as_object_mut().unwrap().remove(*field);
            let err = Envelope::from_value(missing).unwrap_err();
            assert!(matches!(err, Error::InvalidMessage(_)), "{ty} without {field}: {err:?}");
            assert!(err.to_string().contains(&format!("missing field `{field}`")), "{ty}: {err}");
            assert_malformed_message(&err);
            // A Python-style null is as good as absent.
            let mut null = env.clone();
            null["body"][*field] = Value::Null;
            assert!(matches!(Envelope::from_value(null), Err(Error::InvalidMessage(_))), "{ty} with null {field}");
        }
    }
    for field in ["message_id", "from", "to", "body", "timestamp"] {
        let mut env = submit();
        env.as_object_mut().unwrap().remove(field);
        let err = Envelope::from_json(&env.to_string()).unwrap_err();
        assert!(err.to_string().contains(&format!("missing field `{field}`")), "{field}: {err}");
        assert_malformed_message(&err);
    }
    for field in ["delegate_id", "name", "model_family", "model_version", "trust_domain", "context_window"] {
        let mut c = card();
        c.as_object_mut().unwrap().remove(field);
        let err = IdentityCard::from_json(&c.to_string()).unwrap_err();
        assert!(err.to_string().contains(&format!("missing field `{field}`")), "{field}: {err}");
    }
}

#[test]
fn signature_failures_map_to_security_errors() {
    let key = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "k").unwrap();
    let mut env = Envelope::from_value(submit()).unwrap();
    let err = signing::verify(&env, &key.verifying_key()).unwrap_err();
    assert!(matches!(err, Error::MissingSignature));
    assert_wire(&err, codes::SIGNATURE_REQUIRED, ErrorCategory::Security);
    signing::sign(&mut env, &key).unwrap();
    env.signature = Some("zz".into());
    let err = signing::verify(&env, &key.verifying_key()).unwrap_err();
    assert!(matches!(err, Error::BadSignature));
    let wire = assert_wire(&err, codes::SIGNATURE_INVALID, ErrorCategory::Security);
    assert!(!wire.retryable);
    assert_eq!(wire.severity, ErrorSeverity::Fatal);
    let err = "rsa-sha1".parse::<SignatureAlgorithm>().unwrap_err();
    assert!(matches!(err, Error::UnknownSignatureAlgorithm(_)));
    assert_wire(&err, codes::SIGNATURE_INVALID, ErrorCategory::Security);
    let err = ldp_types::time::parse_timestamp("yesterday").unwrap_err();
    assert!(matches!(err, Error::InvalidTimestamp(_)));
    assert_wire(&err, codes::TIMESTAMP_OUT_OF_WINDOW, ErrorCategory::Security);
}
