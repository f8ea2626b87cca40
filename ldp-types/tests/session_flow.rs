#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Every message of the RFC's wire transcript (`shared/spec/ldp-session-flow.json`, copied under `tests/fixtures`)
//! parses and re-serialises to an equal JSON value.

use ldp_types::{Body, Envelope, Manifest, PayloadMode, SemanticFrame};
use serde_json::Value;

fn flow() -> Vec<Value> {
    serde_json::from_str(include_str!("fixtures/ldp-session-flow.json")).unwrap()
}

fn without_comment(mut v: Value) -> Value {
    v.as_object_mut().unwrap().remove("_comment");
    v
}

#[test]
fn every_flow_message_round_trips() {
    let messages = flow();
    assert_eq!(messages.len(), 6);
    for raw in messages {
        let env = Envelope::from_value(raw.clone()).unwrap_or_else(|e| panic!("{e}: {raw}"));
        assert!(env.body.message_type().is_some(), "known type expected: {raw}");
        let re = env.to_value().unwrap();
        assert_eq!(without_comment(re), without_comment(raw.clone()));
        // And through text, as a transport would.
        let text = serde_json::to_string(&raw).unwrap();
        assert_eq!(Envelope::from_json(&text).unwrap(), env);
    }
}

#[test]
fn flow_contents_are_typed() {
    let envs: Vec<Envelope> = flow().into_iter().map(|v| Envelope::from_value(v).unwrap()).collect();
    let Body::Hello(h) = &envs[0].body else { panic!() };
    assert_eq!(h.supported_modes, vec![PayloadMode::SemanticFrame, PayloadMode::Text]);
    let Body::CapabilityManifest(m) = &envs[1].body else { panic!() };
    let manifest = Manifest::from_value(&m.capabilities);
    assert_eq!(manifest.skills, vec!["reasoning", "analysis"]);
    assert_eq!(manifest.max_concurrent_tasks, Some(4));
    let Body::SessionPropose(p) = &envs[2].body else { panic!() };
    assert_eq!(p.config.required_trust_domain.as_deref(), Some("research.internal"));
    assert_eq!(p.config.ttl_secs(), 3600);
    let Body::SessionAccept(a) = &envs[3].body else { panic!() };
    assert_eq!(a.session_id, envs[3].session_id);
    let Body::TaskSubmit(t) = &envs[4].body else { panic!() };
    SemanticFrame::validate(&t.input).unwrap();
    let Body::TaskResult(r) = &envs[5].body else { panic!() };
    assert_eq!(r.provenance.confidence.map(|c| c.get()), Some(0.82));
    assert!(envs[5].provenance.is_some());
}

/// RFC 3.1 shows `"provenance"` as a member of every envelope, RFC 6.1 says "Every TASK_RESULT message MUST include a
/// provenance record", and the transcript's TASK_RESULT carries it in both places. A sender that fills only the
/// envelope's member is read as if it had filled the body's, on every decoding path; the body's wins when both are
/// there; a TASK_RESULT with neither is still refused.
#[test]
fn a_task_result_with_provenance_only_in_the_envelope_is_read_from_there() {
    let result = flow().into_iter().find(|m| m["body"]["type"] == "TASK_RESULT").unwrap();
    let expected = Envelope::from_value(result.clone()).unwrap();
    let record = result["body"]["provenance"].clone();
    assert!(record.is_object());

    let mut envelope_only = without_comment(result.clone());
    envelope_only["provenance"] = record.clone();
    let body = envelope_only["body"].as_object_mut().unwrap();
    body.remove("provenance");
    let text = serde_json::to_string(&envelope_only).unwrap();
    let mut with_null = envelope_only.clone();
    with_null["body"]["provenance"] = Value::Null;
    for (how, decoded) in [
        ("from_json", Envelope::from_json(&text)),
        ("from_slice", Envelope::from_slice(text.as_bytes())),
        ("from_value", Envelope::from_value(envelope_only.clone())),
        ("from_value_ref", Envelope::from_value_ref(&envelope_only)),
        ("serde path", ldp_types::_serde_decodes(&text)),
        ("body null", Envelope::from_value(with_null.clone())),
        ("body null, text", Envelope::from_json(&with_null.to_string())),
    ] {
        let env = decoded.unwrap_or_else(|e| panic!("{how}: {e}"));
        let (Body::TaskResult(got), Body::TaskResult(want)) = (&env.body, &expected.body) else { panic!("{how}") };
        assert_eq!(got.provenance, want.provenance, "{how}");
        assert_eq!(got.output, want.output, "{how}");
    }

    // Both present and different: the body's record is the task's.
    let mut both = without_comment(result.clone());
    let mut other = record.clone();
    other["produced_by"] = "ldp:delegate:someone-else".into();
    both["provenance"] = other;
    let env = Envelope::from_json(&both.to_string()).unwrap();
    let Body::TaskResult(r) = &env.body else { panic!() };
    assert_eq!(r.provenance.produced_by, record["produced_by"].as_str().unwrap());

    // Neither: still malformed.
    let mut neither = without_comment(result);
    neither["body"].as_object_mut().unwrap().remove("provenance");
    neither["provenance"] = Value::Null;
    assert!(Envelope::from_json(&neither.to_string()).is_err());
    assert!(Envelope::from_value(neither).is_err());
}
