#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Property tests: every wire type round-trips (encode, decode, compare; encode again, compare bytes), and arbitrary
//! or mutated input never panics the decoders or the verifiers. Whatever the envelope decoder accepts also validates
//! against the envelope JSON Schema, and our JCS canonicalisation equals `serde_json_canonicalizer`'s. The scanner
//! against the serde decoder, deep nesting and duplicate member names are in `scanner.rs`.

use std::sync::OnceLock;

use ldp_types::signing::{self, SignatureAlgorithm, SigningKey};
use ldp_types::{Envelope, IdentityCard, Manifest};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::strategies::*;

// ---------------------------------------------------------------------------------------------------------------
// Round trips

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: &T) {
    let bytes = serde_json::to_vec(value).unwrap();
    let back: T = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&bytes)));
    assert_eq!(&back, value);
    assert_eq!(serde_json::to_vec(&back).unwrap(), bytes);
}

fn envelope_validator() -> &'static jsonschema::Validator {
    static V: OnceLock<jsonschema::Validator> = OnceLock::new();
    V.get_or_init(|| jsonschema::validator_for(&ldp_types::schema::envelope_schema()).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn envelope_round_trips(env in envelope()) {
        let bytes = env.to_vec().unwrap();
        let text = std::str::from_utf8(&bytes).unwrap();
        if ldp_types::_scanner_decodes(text) {
            prop_assert_eq!(Envelope::from_json(text).unwrap(), ldp_types::_serde_decodes(text).unwrap());
        }
        // `to_vec` writes the envelope and the common bodies directly; `Serialize` goes through serde.
        prop_assert_eq!(&bytes, &serde_json::to_vec(&env).unwrap());
        let back = Envelope::from_slice(&bytes).unwrap();
        prop_assert_eq!(&back, &env);
        prop_assert_eq!(back.to_vec().unwrap(), bytes);
        prop_assert_eq!(Envelope::from_value(env.to_value().unwrap()).unwrap(), env.clone());
        prop_assert_eq!(Envelope::from_json(&env.to_json().unwrap()).unwrap(), env.clone());
        // What we send validates against the schema.
        prop_assert!(envelope_validator().is_valid(&env.to_value().unwrap()));
    }

    /// A TASK_RESULT's provenance given again on the envelope (as the reference transcript does) is written once
    /// and copied: the bytes must still be serde's.
    #[test]
    fn a_result_s_provenance_given_twice_is_written_as_serde_writes_it(mut env in envelope()) {
        if let ldp_types::Body::TaskResult(r) = &env.body {
            env.provenance = Some(r.provenance.clone());
        }
        prop_assert_eq!(&env.to_vec().unwrap(), &serde_json::to_vec(&env).unwrap());
    }

    #[test]
    fn identity_card_round_trips(card in identity_card()) {
        round_trip(&card);
        prop_assert_eq!(IdentityCard::from_json(&serde_json::to_string(&card).unwrap()).unwrap(), card);
    }

    #[test]
    fn capability_round_trips_in_both_shapes(c in capability()) {
        round_trip(&c);
        // The accessors read whichever shape carries the value.
        prop_assert_eq!(c.quality_score(), c.quality.as_ref().and_then(|q| q.quality_score).or(c.quality_hint));
    }

    #[test]
    fn provenance_round_trips(p in provenance()) {
        round_trip(&p);
    }

    #[test]
    fn contract_round_trips(c in contract()) {
        round_trip(&c);
    }

    #[test]
    fn ldp_error_round_trips(e in ldp_error()) {
        round_trip(&e);
    }

    #[test]
    fn session_config_round_trips(c in session_config()) {
        round_trip(&c);
    }

    #[test]
    fn manifest_round_trips(
        skills in vec("[a-z]{1,8}", 0..4),
        supported_modes in vec(mode(), 0..4),
        max_concurrent_tasks in option::of(any::<u32>()),
        capabilities in vec(capability(), 0..3),
    ) {
        let mut m = Manifest { skills, supported_modes, max_concurrent_tasks, capabilities };
        // Reading adds every capability's name to the skills; start from that fixed point.
        m = Manifest::from_value(&m.to_value());
        let value = m.to_value();
        let back = Manifest::from_value(&value);
        prop_assert_eq!(&back, &m);
        prop_assert_eq!(back.to_value(), value);
        // The bare-list shape of the Python SDK reads the same capabilities.
        let list = serde_json::to_value(&m.capabilities).unwrap();
        prop_assert_eq!(Manifest::from_value(&list).capabilities, m.capabilities);
    }

    #[test]
    fn jcs_matches_the_reference_canonicaliser(env in envelope()) {
        let key = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "k").unwrap();
        let mut signed = env.clone();
        signing::sign(&mut signed, &key).unwrap();
        let mut raw = signed.to_value().unwrap();
        let ours = signing::canonical_signing_input_value(&raw).unwrap();
        raw.as_object_mut().unwrap().remove("signature");
        raw.as_object_mut().unwrap().remove("signature_algorithm");
        prop_assert_eq!(&ours, &serde_json_canonicalizer::to_vec(&raw).unwrap());
        prop_assert_eq!(signing::canonical_signing_input(&signed).unwrap(), ours);
        signing::verify_value(&signed.to_value().unwrap(), &key.verifying_key()).unwrap();
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Never panics

/// `value` with an envelope-level provenance moved into a TASK_RESULT body that has none (or `null`).
fn provenance_moved_into_result(value: &Value) -> Value {
    let mut judged = value.clone();
    let record = judged.get("provenance").filter(|p| p.is_object()).cloned();
    if let (Some(record), Some(body)) = (record, judged.get_mut("body").and_then(Value::as_object_mut))
        && body.get("type").and_then(Value::as_str) == Some("TASK_RESULT")
        && body.get("provenance").is_none_or(Value::is_null)
    {
        body.insert("provenance".to_owned(), record);
    }
    judged
}

/// Runs every entry point on `value`; they must return, never panic. When the decoder accepts, the schema must too.
fn exercise(value: &Value) {
    let decoded = Envelope::from_value(value.clone());
    let text = value.to_string();
    let from_text = Envelope::from_slice(text.as_bytes());
    assert_eq!(decoded.is_ok(), from_text.is_ok(), "value and text decoding disagree on {text}");
    if decoded.is_ok() {
        // One documented leniency beyond the schema: a TASK_RESULT whose provenance is only in the envelope (RFC 3.1)
        // is read as if the body carried it, so the schema judges it in that form.
        let judged = provenance_moved_into_result(value);
        let errors: Vec<String> = envelope_validator().iter_errors(&judged).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "decoder accepted but schema rejected {text}: {errors:?}");
    }
    // Where the scanner decodes a text itself, serde decodes it to the same envelope.
    for text in [text.clone(), serde_json::to_string_pretty(value).unwrap()] {
        if ldp_types::_scanner_decodes(&text) {
            let serde_path = ldp_types::_serde_decodes(&text).ok();
            assert_eq!(Envelope::from_json(&text).ok(), serde_path, "scanner and serde disagree on {text}");
        }
    }
    let _ = IdentityCard::from_json(&text);
    for key in keys() {
        let _ = signing::verify_value(value, &key.verifying_key());
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Remove(Vec<usize>),
    Replace(Vec<usize>, Value),
    Null(Vec<usize>),
}

/// The member or element reached by following `path` (indices taken modulo the container size), stopping early at
/// scalars.
fn locate<'a>(mut v: &'a mut Value, path: &[usize]) -> (&'a mut Value, Option<usize>) {
    let mut last = None;
    for (depth, step) in path.iter().enumerate() {
        let len = match &*v {
            Value::Object(m) => m.len(),
            Value::Array(a) => a.len(),
            _ => 0,
        };
        if len == 0 || depth + 1 == path.len() {
            last = (len > 0).then_some(step % len.max(1));
            break;
        }
        v = match v {
            Value::Object(m) => m.values_mut().nth(step % len).unwrap(),
            Value::Array(a) => &mut a[step % len],
            _ => unreachable!(),
        };
    }
    (v, last)
}

fn apply(mut value: Value, mutation: &Mutation) -> Value {
    let (path, replacement) = match mutation {
        Mutation::Remove(p) => (p, None),
        Mutation::Replace(p, r) => (p, Some(r.clone())),
        Mutation::Null(p) => (p, Some(Value::Null)),
    };
    let (container, index) = locate(&mut value, path);
    let Some(i) = index else { return value };
    match (container, replacement) {
        (Value::Object(m), None) => {
            let key = m.keys().nth(i).cloned().unwrap();
            m.remove(&key);
        }
        (Value::Array(a), None) => drop(a.remove(i)),
        (Value::Object(m), Some(r)) => *m.values_mut().nth(i).unwrap() = r,
        (Value::Array(a), Some(r)) => a[i] = r,
        _ => {}
    }
    value
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let path = vec(any::<usize>(), 1..5);
    let retype = prop_oneof![
        Just(json!(0)),
        Just(json!(-1)),
        Just(json!(1.5)),
        Just(json!("")),
        Just(json!("x")),
        Just(json!([])),
        Just(json!({})),
        Just(json!(true)),
        Just(json!(u64::MAX)),
        Just(json!("ldp:delegate:")),
        Just(json!({"type": "TASK_SUBMIT"})),
        json_value(),
    ];
    prop_oneof![
        path.clone().prop_map(Mutation::Remove),
        path.clone().prop_map(Mutation::Null),
        (path, retype).prop_map(|(p, r)| Mutation::Replace(p, r)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..256)) {
        let _ = Envelope::from_slice(&bytes);
        if let Ok(text) = std::str::from_utf8(&bytes) {
            let _ = IdentityCard::from_json(text);
            let _ = Envelope::from_json(text);
        }
    }

    #[test]
    fn arbitrary_json_never_panics(value in json_value()) {
        exercise(&value);
        exercise(&json!({"message_id": "m", "from": "a", "to": "b", "timestamp": "t", "body": value}));
    }

    #[test]
    fn mutated_envelopes_never_panic(env in envelope(), mutations in vec(mutation(), 1..4)) {
        let mut value = env.to_value().unwrap();
        for m in &mutations {
            value = apply(value, m);
        }
        exercise(&value);
    }

    #[test]
    fn mutated_flow_and_cards_never_panic(index in 0usize..6, mutations in vec(mutation(), 1..4)) {
        let flow: Vec<Value> = serde_json::from_str(include_str!("fixtures/ldp-session-flow.json")).unwrap();
        let mut value = flow[index].clone();
        for m in &mutations {
            value = apply(value, m);
        }
        exercise(&value);
        let card = json!({"delegate_id": "ldp:delegate:x", "name": "n", "model_family": "f", "model_version": "v",
            "trust_domain": {"name": "d", "allow_cross_domain": true, "trusted_peers": ["e"]}, "context_window": 1,
            "capabilities": [{"name": "c", "quality": {"quality_score": 0.5, "claim_type": "self_claimed"}}],
            "supported_payload_modes": ["text"]});
        let mut card = card;
        for m in &mutations {
            card = apply(card, m);
        }
        let _ = IdentityCard::from_json(&card.to_string());
    }
}
