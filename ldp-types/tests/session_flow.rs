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
