#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Property tests: every wire type round-trips (encode, decode, compare; encode again, compare bytes), and arbitrary
//! or mutated input never panics the decoders or the verifiers. Whatever the envelope decoder accepts also validates
//! against the envelope JSON Schema, and our JCS canonicalisation equals `serde_json_canonicalizer`'s.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use ldp_types::signing::{self, SignatureAlgorithm, SigningKey};
use ldp_types::{
    Attestation, Body, Budget, Capability, CapabilityManifest, ClaimType, ContractPolicy, CostTier, DelegateId,
    DelegationContract, Envelope, ErrorCategory, ErrorSeverity, EvidenceRef, FailurePolicy, Hello, IdentityCard,
    LdpError, LineageEntry, Manifest, PayloadMode, Provenance, QualityMetrics, RawJson, Score, SessionAccept,
    SessionClose, SessionConfig, SessionPropose, SessionReject, TaskCancel, TaskFailed, TaskResult, TaskSubmit,
    TaskUpdate, TrustDomain, UnknownBody, VerificationStatus,
};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

// ---------------------------------------------------------------------------------------------------------------
// Strategies

fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 _:.|/\\-\"\\\\\n\u{e9}\u{20ac}\u{1f600}]{0,10}"
}

/// Floats that print and parse back exactly.
fn exact_f64() -> impl Strategy<Value = f64> {
    (-100_000i64..100_000).prop_map(|n| n as f64 / 64.0)
}

fn score() -> impl Strategy<Value = Score> {
    (0u32..=1024).prop_map(|n| Score::new(f64::from(n) / 1024.0).unwrap())
}

fn mode() -> impl Strategy<Value = PayloadMode> {
    select(PayloadMode::ALL.to_vec())
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        exact_f64().prop_map(Value::from),
        text().prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map(text(), inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn non_null_value() -> impl Strategy<Value = Value> {
    json_value().prop_filter("not null", |v| !v.is_null())
}

/// Extension members: names that no decoder gives a meaning to.
fn extra() -> impl Strategy<Value = Map<String, Value>> {
    btree_map("x_[a-z]{1,6}", json_value(), 0..3).prop_map(|m| m.into_iter().collect())
}

fn ldp_error() -> impl Strategy<Value = LdpError> {
    (
        select(ErrorCategory::ALL.to_vec()),
        "[A-Z_]{1,12}",
        text(),
        select(vec![ErrorSeverity::Warning, ErrorSeverity::Error, ErrorSeverity::Fatal]),
        any::<bool>(),
        option::of(non_null_value()),
    )
        .prop_map(|(category, code, message, severity, retryable, partial)| {
            let mut e = LdpError::new(category, code, message).with_severity(severity).with_retryable(retryable);
            e.partial_output = partial;
            e
        })
}

fn verification_status() -> impl Strategy<Value = VerificationStatus> {
    select(VerificationStatus::ALL.to_vec())
}

fn provenance() -> impl Strategy<Value = Provenance> {
    let evidence = (text(), text(), option::of(text()), option::of(text()))
        .prop_map(|(source, kind, uri, summary)| EvidenceRef { source, kind, uri, summary });
    let lineage = (text(), text(), text(), option::of(text()), verification_status()).prop_map(
        |(delegate_id, model_version, step, timestamp, verification_status)| LineageEntry {
            delegate_id,
            model_version,
            step,
            timestamp,
            verification_status,
        },
    );
    (
        (text(), text(), mode(), option::of(score()), any::<bool>(), option::of(text()), option::of(text())),
        (option::of(verification_status()), vec(evidence, 0..2), vec(lineage, 0..3), option::of(any::<u64>())),
        (option::of(exact_f64()), option::of(text()), option::of(any::<bool>()), vec("[A-Z_]{1,10}", 0..2)),
    )
        .prop_map(|(a, b, c)| {
            let mut p = Provenance::new(a.0, a.1, a.2);
            p.confidence = a.3;
            p.verified = a.4;
            p.session_id = a.5;
            p.timestamp = a.6;
            if let Some(status) = b.0 {
                p.set_verification_status(status);
            }
            p.evidence = b.1;
            p.lineage = b.2;
            p.tokens_used = b.3;
            p.cost_usd = c.0;
            p.contract_id = c.1;
            p.contract_satisfied = c.2;
            p.contract_violations = c.3;
            p
        })
}

fn contract() -> impl Strategy<Value = DelegationContract> {
    let budget = (option::of(any::<u64>()), option::of(exact_f64()))
        .prop_map(|(max_tokens, max_cost_usd)| Budget { max_tokens, max_cost_usd });
    let policy = (
        select(vec![FailurePolicy::FailClosed, FailurePolicy::FailOpen]),
        option::of(budget),
        vec(text(), 0..3),
        option::of(any::<u32>()),
    )
        .prop_map(|(failure_policy, budget, safety_constraints, max_delegation_depth)| ContractPolicy {
            failure_policy,
            budget,
            safety_constraints,
            max_delegation_depth,
        });
    (text(), text(), vec(text(), 0..3), policy, option::of(text()), option::of(text())).prop_map(
        |(contract_id, objective, success_criteria, policy, deadline, created_at)| DelegationContract {
            contract_id,
            objective,
            success_criteria,
            policy,
            deadline,
            created_at,
        },
    )
}

fn session_config() -> impl Strategy<Value = SessionConfig> {
    (
        option::of(vec(mode(), 0..4)),
        option::of(mode()),
        option::of(any::<u64>()),
        option::of(text()),
        option::of(text()),
        extra(),
    )
        .prop_map(
            |(preferred_payload_modes, payload_mode, ttl_secs, required_trust_domain, trust_domain, extra)| {
                SessionConfig {
                    preferred_payload_modes,
                    payload_mode,
                    ttl_secs,
                    required_trust_domain,
                    trust_domain,
                    extra,
                }
            },
        )
}

/// A payload as a peer may have written it: compact or pretty-printed.
fn raw_json() -> impl Strategy<Value = RawJson> {
    (json_value(), any::<bool>()).prop_map(|(v, pretty)| {
        if pretty { RawJson::from_json(serde_json::to_string_pretty(&v).unwrap()).unwrap() } else { v.into() }
    })
}

fn body() -> impl Strategy<Value = Body> {
    let names: Vec<&str> = ldp_types::MessageType::ALL.iter().map(|t| t.as_str()).collect();
    prop_oneof![
        (text(), vec(mode(), 0..4), extra()).prop_map(|(d, m, x)| Body::Hello(Hello {
            delegate_id: d,
            supported_modes: m,
            extra: x
        })),
        (non_null_value(), extra())
            .prop_map(|(c, x)| Body::CapabilityManifest(CapabilityManifest { capabilities: c, extra: x })),
        (session_config(), extra()).prop_map(|(c, x)| Body::SessionPropose(SessionPropose { config: c, extra: x })),
        (text(), mode(), option::of(vec(mode(), 0..3)), extra()).prop_map(|(s, m, f, x)| Body::SessionAccept(
            SessionAccept { session_id: s, negotiated_mode: m, fallback_chain: f, extra: x }
        )),
        (text(), option::of(ldp_error()), extra()).prop_map(|(r, e, x)| Body::SessionReject(SessionReject {
            reason: r,
            error: e,
            extra: x
        })),
        (text(), text(), raw_json(), option::of(contract()), extra()).prop_map(|(t, s, i, c, x)| Body::TaskSubmit(
            TaskSubmit { task_id: t, skill: s, input: i, contract: c.map(Box::new), extra: x }
        )),
        (text(), option::of(exact_f64()), option::of(text()), option::of(raw_json()), extra()).prop_map(
            |(t, p, m, c, x)| Body::TaskUpdate(TaskUpdate {
                task_id: t,
                progress: p,
                message: m,
                // A `null` chunk reads back as no chunk.
                partial_output: c.filter(|c| !c.is_null()),
                extra: x
            })
        ),
        (text(), raw_json(), provenance(), extra()).prop_map(|(t, o, p, x)| Body::TaskResult(TaskResult {
            task_id: t,
            output: o,
            provenance: Box::new(p),
            extra: x
        })),
        (text(), ldp_error(), extra()).prop_map(|(t, e, x)| Body::TaskFailed(TaskFailed {
            task_id: t,
            error: e,
            extra: x
        })),
        (text(), extra()).prop_map(|(t, x)| Body::TaskCancel(TaskCancel { task_id: t, extra: x })),
        (json_value(), json_value(), extra()).prop_map(|(c, e, x)| Body::Attestation(Attestation {
            claim: c,
            evidence: e,
            extra: x
        })),
        (option::of(text()), extra()).prop_map(|(r, x)| Body::SessionClose(SessionClose { reason: r, extra: x })),
        ("[A-Z_]{0,12}".prop_filter("unknown type", move |t| !names.contains(&t.as_str())), extra())
            .prop_map(|(t, x)| Body::Unknown(UnknownBody { type_name: t, fields: x })),
    ]
}

fn envelope() -> impl Strategy<Value = Envelope> {
    (
        (text(), text(), text(), text(), body(), mode(), text()),
        (option::of(provenance()), option::of("[0-9a-f]{64}"), option::of(text()), option::of(text()), extra()),
    )
        .prop_map(|(a, b)| {
            let mut e = Envelope::new(a.0, a.6, a.1, a.2, a.3, a.4).with_payload_mode(a.5);
            e.provenance = b.0.map(Box::new);
            e.signature = b.1;
            e.signature_algorithm = b.2;
            e.nonce = b.3;
            e.extensions = b.4;
            e
        })
}

fn quality() -> impl Strategy<Value = QualityMetrics> {
    (
        (option::of(score()), option::of(any::<u64>()), option::of(any::<u64>()), option::of(exact_f64())),
        (option::of(any::<u64>()), any::<bool>(), select(ClaimType::ALL.to_vec())),
        (option::of(text()), option::of(text()), option::of(text()), option::of(text())),
    )
        .prop_map(|(a, b, c)| QualityMetrics {
            quality_score: a.0,
            latency_p50_ms: a.1,
            latency_p99_ms: a.2,
            cost_per_call_usd: a.3,
            max_tokens: b.0,
            supports_streaming: b.1,
            claim_type: b.2,
            issuer_id: c.0,
            attested_at: c.1,
            expires_at: c.2,
            evidence_ref: c.3,
        })
}

/// A capability in the RFC shape, the reference-SDK shape, or both.
fn capability() -> impl Strategy<Value = Capability> {
    let rfc = (option::of(score()), option::of(any::<u64>()), option::of(select(vec![CostTier::Low, CostTier::High])));
    let sdk = (option::of(text()), option::of(non_null_value()), option::of(non_null_value()), vec(text(), 0..3));
    ("[a-z_]{1,10}", prop_oneof![Just(0u8), Just(1), Just(2)], rfc, sdk, option::of(quality()), extra()).prop_map(
        |(name, shape, rfc, sdk, quality, extra)| {
            let mut c = Capability::new(name);
            if shape != 1 {
                (c.quality_hint, c.latency_hint_ms_p50, c.cost_hint) = rfc;
            }
            if shape != 0 {
                (c.description, c.input_schema, c.output_schema, c.domains) = sdk;
                c.quality = quality;
            }
            c.extra = extra.into_iter().collect();
            c
        },
    )
}

fn identity_card() -> impl Strategy<Value = IdentityCard> {
    let trust = ("[a-z.]{1,12}", any::<bool>(), vec("[a-z.]{1,8}", 0..3)).prop_map(|(n, a, p)| TrustDomain {
        name: n,
        allow_cross_domain: a,
        trusted_peers: p,
    });
    (
        ("[a-z0-9-]{1,12}", text(), option::of(text()), text(), text(), option::of("[0-9a-f]{64}"), trust),
        (any::<u64>(), option::of(text()), option::of(text()), option::of(text()), option::of(text())),
        (vec(capability(), 0..3), vec(mode(), 1..4), text(), btree_map("[a-z]{1,6}", text(), 0..3), extra()),
    )
        .prop_map(|(a, b, c)| {
            let mut card = IdentityCard::new(DelegateId::from_name(&a.0).unwrap(), a.1, a.3, a.4);
            card.description = a.2;
            card.weights_fingerprint = a.5;
            card.trust_domain = a.6;
            card.context_window = b.0;
            card.reasoning_profile = b.1;
            card.cost_profile = b.2;
            card.latency_profile = b.3;
            card.jurisdiction = b.4;
            card.capabilities = c.0;
            card.supported_payload_modes = c.1;
            card.endpoint = c.2;
            card.metadata = c.3;
            card.extra = c.4.into_iter().collect::<BTreeMap<_, _>>();
            card
        })
}

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

fn keys() -> Vec<SigningKey> {
    vec![
        SigningKey::shared_secret(SignatureAlgorithm::HmacSha256, "k").unwrap(),
        SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "k").unwrap(),
        SigningKey::ed25519_from_seed(&[3; 32]),
    ]
}

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

#[path = "../benches/inputs/mod.rs"]
mod inputs;

/// One byte edit of a message's text, biased towards the bytes JSON's grammar turns on.
fn byte_edit() -> impl Strategy<Value = (usize, u8, u8)> {
    let byte = prop_oneof![
        Just(b'"'),
        Just(b'\\'),
        Just(b'{'),
        Just(b'}'),
        Just(b'['),
        Just(b']'),
        Just(b','),
        Just(b':'),
        Just(b' '),
        Just(b'\n'),
        Just(b'n'),
        Just(b'0'),
        Just(b'-'),
        Just(b'e'),
        Just(0x01),
        any::<u8>(),
    ];
    (any::<usize>(), byte, 0u8..3)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Byte-level damage (which no `Value`-level mutation can produce: cut strings, stray escapes, bad separators)
    /// decodes as the serde path decodes it, through the scanner or around it.
    #[test]
    fn damaged_text_decodes_as_serde_decodes_it(env in envelope(), edits in vec(byte_edit(), 1..4)) {
        let mut bytes = env.to_vec().unwrap();
        for (at, byte, op) in edits {
            let at = at % (bytes.len() + 1);
            match op {
                0 => bytes.insert(at, byte),
                1 if at < bytes.len() => drop(bytes.remove(at)),
                _ if at < bytes.len() => bytes[at] = byte,
                _ => bytes.push(byte),
            }
        }
        let ours = Envelope::from_slice(&bytes).ok();
        let serde_path = serde_json::from_slice::<Envelope>(&bytes).ok();
        prop_assert_eq!(ours, serde_path, "{}", String::from_utf8_lossy(&bytes));
    }
}

#[test]
fn the_scanner_takes_the_transcript_and_the_benchmarked_messages() {
    let flow: Vec<Value> = serde_json::from_str(include_str!("fixtures/ldp-session-flow.json")).unwrap();
    let sized = [inputs::sized_submit(972, false), inputs::sized_submit(1497, true)];
    let texts = flow.iter().map(|m| m.to_string()).chain(sized.iter().map(|b| String::from_utf8(b.clone()).unwrap()));
    for text in texts {
        // The transcript's `_comment` is an extension member like any other.
        assert!(ldp_types::_scanner_decodes(&text), "{text}");
        assert_eq!(Envelope::from_json(&text).unwrap(), ldp_types::_serde_decodes(&text).unwrap());
    }
    // Left to serde: escapes in a member name, nesting near the recursion limit, any error.
    let escaped_name =
        r#"{"message\u005fid":"m","from":"a","to":"b","timestamp":"t","body":{"type":"TASK_CANCEL","task_id":"t"}}"#;
    assert!(!ldp_types::_scanner_decodes(escaped_name));
    assert_eq!(Envelope::from_json(escaped_name).unwrap().message_id, "m");
    let deep = nested_input(127).replace("\"input\"", "\"x_deep\"");
    assert!(!ldp_types::_scanner_decodes(&deep));
    assert!(Envelope::from_json(&deep).is_err(), "127 levels inside the body exceed serde_json's limit of 128");
    assert!(!ldp_types::_scanner_decodes(r#"{"message_id":"m"}"#));
}

#[test]
fn the_scanner_reads_contracts_and_edge_cases_as_serde_does() {
    let envelope = |body: &str| {
        format!(r#"{{"message_id":"m","session_id":null,"from":"a","to":"b","timestamp":"t","body":{body}}}"#)
    };
    let submit = |contract: &str| {
        envelope(&format!(r#"{{"type":"TASK_SUBMIT","task_id":"t","skill":"s","input":null,"contract":{contract}}}"#))
    };
    let policy = |p: &str| submit(&format!(r#"{{"contract_id":"c","policy":{p}}}"#));
    let texts = [
        submit("null"),
        submit(r#"{"contract_id":"c"}"#),
        submit(r#"{"contract_id":null}"#),
        submit(r#"{"objective":"o"}"#),
        submit(r#"{"contract_id":"c","contract_id":"d"}"#),
        submit(r#"{"contract_id":"c","objective":null,"success_criteria":null,"policy":null,"deadline":null}"#),
        submit(r#"{"contract_id":"c","success_criteria":["a",null]}"#),
        submit(r#"{"contract_id":"c","success_criteria":[]}"#),
        submit(r#"{"contract_id":"c","success_criteria":"a"}"#),
        submit(r#"{"contract_id":"c\u00e9\n","x_more":{"deep":[1,2,{"a":null}]}}"#),
        submit(r#"["c"]"#),
        policy(r#"{"failure_policy":"fail_closed","failure_policy":"fail_open"}"#),
        policy(r#"{"failure_policy":null}"#),
        policy(r#"{"failure_policy":"fail_sideways"}"#),
        policy(r#"{"failure_policy":"fail\u005fclosed"}"#),
        policy(r#"{"budget":null,"safety_constraints":null}"#),
        policy(r#"{"budget":{"max_tokens":6000,"max_cost_usd":0.05}}"#),
        policy(r#"{"budget":{"max_tokens":6000,"max_tokens":1}}"#),
        policy(r#"{"budget":{"max_tokens":null,"max_cost_usd":null,"extra":[]}}"#),
        policy(r#"{"budget":{"max_tokens":1.0}}"#),
        policy(r#"{"budget":{"max_tokens":-1}}"#),
        policy(r#"{"budget":{"max_tokens":01}}"#),
        policy(r#"{"budget":{"max_tokens":1e3}}"#),
        policy(r#"{"budget":{"max_tokens":18446744073709551615}}"#),
        policy(r#"{"budget":{"max_tokens":18446744073709551616}}"#),
        policy(r#"{"budget":[]}"#),
        policy("[]"),
        policy(r#"["fail_closed"]"#),
        policy(r#"{"max_delegation_depth":4294967295}"#),
        policy(r#"{"max_delegation_depth":4294967296}"#),
        policy(r#"{"max_delegation_depth":0}"#),
        policy(r#"{"max_delegation_depth": 2 }"#),
        policy(r#"{"max_delegation_depth":2,"max_delegation_depth":3}"#),
        envelope(r#"{"type":"TASK_SUBMIT","task_id":"t","skill":"s","task_id":"u"}"#),
        envelope(r#"{"type":"TASK_SUBMIT","type":"TASK_CANCEL","task_id":"t"}"#),
        envelope(r#"{"type":"TASK_\u0053UBMIT","task_id":"t","skill":"s"}"#),
        envelope(
            r#"{"type":"TASK_RESULT","task_id":"t","output":{"a":[1]},"provenance":{"produced_by":"d","model_version":"v","payload_mode_used":"text"}}"#,
        ),
        envelope(r#"{"type":"GOSSIP","rumour":"x"}"#),
        envelope(r#"{"type":"TASK_SUBMIT","task_id":"t","skill":"s","output":{"o":1},"delegate_id":null,"x":[1]}"#),
        envelope(r#"{"type":"TASK_SUBMIT","task_id":"t","skill":"s","delegate_id":5}"#),
        envelope(r#"{"type":"TASK_SUBMIT","task_id":"t","skill":null}"#),
        envelope(r#"{"type":"TASK_SUBMIT","task_id":"t","skill":"s","input":"a","input":"b"}"#),
        envelope(r#"{"task_id":"t","type":"TASK_SUBMIT","skill":"s","input":[]}"#),
        envelope(
            r#"{"type":"TASK_RESULT","task_id":"t","skill":"s","provenance":{"produced_by":"d","model_version":"v","payload_mode_used":"text"}}"#,
        ),
        envelope(r#"{"type":"TASK_RESULT","task_id":"t","output":null}"#),
        envelope(r#"{"type":"TASK_RESULT","task_id":"t","provenance":null,"output":"x"}"#),
        envelope(r#"{"type":"HELLO","delegate_id":"ldp:delegate:a","supported_modes":["text"]}"#),
        envelope(r#"{"type":"TASK_CANCEL","task_id":"t"} "#) + " ",
        envelope(r#"{"type":"TASK_CANCEL","task_id":"t"}"#) + " x",
        envelope(r#"{"type":"TASK_CANCEL","task_id":"t\"q"}"#),
        envelope(r#"{"type":"TASK_CANCEL","task_id":"tab\there"}"#),
        envelope("{\"type\":\"TASK_CANCEL\",\"task_id\":\"raw\ttab\"}"),
        envelope(r#"{"type":"TASK_CANCEL","task_id":"t"}"#).replace(r#""to":"b""#, r#""to":"b","to":"c""#),
        envelope(r#"{"type":"TASK_CANCEL","task_id":"t"}"#).replace(r#""from":"a""#, r#""from":null"#),
        envelope(r#"{"type":"TASK_CANCEL","task_id":"t"}"#).replace(r#""session_id":null"#, r#""payload_mode":null"#),
        envelope(r#"{"type":"TASK_CANCEL","task_id":"t"}"#)
            .replace(r#""session_id":null"#, r#""payload_mode":"binary""#),
        envelope(r#"{"type":"TASK_CANCEL","task_id":"t"}"#).replace(r#""session_id":null"#, r#""provenance":7"#),
    ];
    let mut scanned = 0;
    let mut duplicated = 0;
    for text in &texts {
        let ours = Envelope::from_json(text).ok();
        let serde_path = ldp_types::_serde_decodes(text).ok();
        assert_eq!(ours, serde_path, "{text}");
        scanned += usize::from(ldp_types::_scanner_decodes(text));
        duplicated += usize::from(matches!(Envelope::from_json(text), Err(ldp_types::Error::DuplicateMember(_))));
    }
    // Every text above that repeats a member name, in the envelope, the body, the contract or its policy.
    assert_eq!(duplicated, 8);
    // A struct's fields given as an array (which serde's derived decoders would take) are refused, as the schema
    // refuses them.
    for text in [policy("[]"), policy(r#"{"budget":[6000]}"#), submit(r#"["c"]"#)] {
        assert!(matches!(Envelope::from_json(&text), Err(ldp_types::Error::InvalidMessage(_))), "{text}");
    }
    // Most of these are the scanner's (the rest it leaves to serde, which the equality above covers).
    assert!(scanned >= (texts.len() - duplicated) / 2, "only {scanned} of {} scanned", texts.len());
}

#[test]
fn the_scanner_reads_provenance_as_serde_does() {
    let result = |provenance: &str| {
        format!(
            r#"{{"message_id":"m","from":"a","to":"b","timestamp":"t","body":{{"type":"TASK_RESULT","task_id":"t","output":1,"provenance":{provenance}}}}}"#
        )
    };
    let at_envelope = |provenance: &str| {
        format!(
            r#"{{"message_id":"m","from":"a","to":"b","timestamp":"t","provenance":{provenance},"body":{{"type":"TASK_CANCEL","task_id":"t"}}}}"#
        )
    };
    let with =
        |members: &str| format!(r#"{{"produced_by":"d","model_version":"v","payload_mode_used":"text"{members}}}"#);
    let records = [
        with(""),
        with(r#","confidence":0.82,"verified":false,"session_id":"s","timestamp":"2026-03-09T10:00:09Z""#),
        with(r#","verified":true"#),
        with(r#","verified":null,"confidence":null,"session_id":null,"timestamp":null"#),
        with(r#","verified":false,"verification_status":"tool_verified""#),
        with(r#","verified":true,"verification_status":"unverified""#),
        with(r#","verification_status":"self_verified","verification_status":"peer_verified""#),
        with(r#","verification_status":"notarised""#),
        with(r#","verification_status":"peer\u005fverified""#),
        with(r#","verification_status":null"#),
        with(r#","verified":"yes""#),
        with(r#","verified":truex"#),
        with(r#","confidence":1.2"#),
        with(r#","confidence":1"#),
        with(r#","confidence":-0.0"#),
        with(r#","confidence":"0.5""#),
        with(r#","tokens_used":1500,"cost_usd":0.0021,"contract_id":"ctr-1","contract_satisfied":true"#),
        with(r#","tokens_used":1.5"#),
        with(r#","tokens_used":null,"cost_usd":null,"contract_id":null,"contract_satisfied":null"#),
        with(r#","contract_satisfied":"true""#),
        with(r#","contract_violations":["BUDGET_EXCEEDED","DEADLINE_MISSED"]"#),
        with(r#","contract_violations":null"#),
        with(r#","contract_violations":[null]"#),
        with(r#","evidence":[{"source":"pytest","kind":"test_results","uri":"u","summary":"ok"}],"lineage":[]"#),
        with(r#","evidence":null,"lineage":null"#),
        with(r#","evidence":[["pytest","test_results"]]"#),
        with(r#","evidence":{"source":"pytest","kind":"k"}"#),
        with(r#","lineage":[{"delegate_id":"a","model_version":"m","step":"s","verification_status":null}]"#),
        with(r#","lineage":[{"delegate_id":"a","model_version":"m","step":"s","verification_status":"nope"}]"#),
        with(r#","x_extra":{"deep":[1,{"a":null}]},"produced_by_note":"x""#),
        with(r#","produced_by":"e""#),
        r#"{"model_version":"v","payload_mode_used":"text"}"#.to_owned(),
        r#"{"produced_by":"d","model_version":"v"}"#.to_owned(),
        r#"{"produced_by":"d","model_version":"v","payload_mode_used":"smoke_signals"}"#.to_owned(),
        r#"{"produced_by":"d","model_version":"v","payload_mode_used":null}"#.to_owned(),
        r#"{"produced_by":"d\u00e9","model_version":"v","payload_mode_used":"semantic\u005fframe"}"#.to_owned(),
        r#"{"produced_by":null,"model_version":"v","payload_mode_used":"text"}"#.to_owned(),
        r#"{ "produced_by" : "d" , "model_version" : "v" , "payload_mode_used" : "text" }"#.to_owned(),
        r#"["d","v","text"]"#.to_owned(),
        r#""d""#.to_owned(),
        "null".to_owned(),
        "{}".to_owned(),
    ];
    let mut scanned = 0;
    let mut texts = 0;
    for record in &records {
        for text in [result(record), at_envelope(record)] {
            let ours = Envelope::from_json(&text).ok();
            let serde_path = ldp_types::_serde_decodes(&text).ok();
            assert_eq!(ours, serde_path, "{text}");
            scanned += usize::from(ldp_types::_scanner_decodes(&text));
            texts += 1;
        }
    }
    // About half are errors (serde then answers for the scanner); the rest the scanner decodes itself.
    assert!(scanned >= texts / 3, "only {scanned} of {texts} scanned");
    // The legacy flag follows the status, as serde's decoder keeps it.
    let text = result(&with(r#","verified":false,"verification_status":"tool_verified""#));
    let Body::TaskResult(r) = Envelope::from_json(&text).unwrap().body else { panic!("not a result") };
    assert!(r.provenance.verified);
}

// ---------------------------------------------------------------------------------------------------------------
// Deep nesting

fn nested_input(depth: usize) -> String {
    format!(
        r#"{{"message_id":"m","from":"a","to":"b","timestamp":"t","body":{{"type":"TASK_SUBMIT","task_id":"t","skill":"s","input":{}{}}}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    )
}

#[test]
fn recursion_limit_holds_through_the_custom_decoders() {
    // A message must be one a `serde_json::Value` can hold, payload included: 127 levels counted from the envelope,
    // whose payload starts two levels down. Deeper is refused at decoding as a typed error, never a stack overflow,
    // by the scanner and the serde path alike; so a payload that decodes can always be read and signed.
    let key =
        ldp_types::signing::SigningKey::shared_secret(ldp_types::signing::SignatureAlgorithm::HmacSha256Jcs, b"k")
            .unwrap();
    for depth in [100, 125] {
        let text = nested_input(depth);
        let whole: Value = serde_json::from_str(&text).unwrap();
        let env = Envelope::from_json(&text).unwrap();
        assert_eq!(ldp_types::_serde_decodes(&text).unwrap(), env);
        let ldp_types::Body::TaskSubmit(submit) = &env.body else { panic!("not a submit") };
        assert_eq!(submit.input, whole["body"]["input"]);
        ldp_types::signing::sign(&mut env.clone(), &key).unwrap();
    }
    for depth in [126, 129, 1_000, 100_000] {
        let text = nested_input(depth);
        assert!(serde_json::from_str::<Value>(&text).is_err());
        for err in [Envelope::from_json(&text).unwrap_err(), ldp_types::_serde_decodes(&text).unwrap_err()] {
            assert!(matches!(err, ldp_types::Error::MalformedJson(_)), "{depth}: {err}");
            assert!(err.to_string().contains("recursion limit"), "{depth}: {err}");
        }
        assert!(serde_json::from_str::<Envelope>(&text).is_err());
    }
    // The same anywhere else in the message.
    let deep_extra = nested_input(1_000).replace("\"input\"", "\"x_deep\"");
    let err = Envelope::from_json(&deep_extra).unwrap_err();
    assert!(err.to_string().contains("recursion limit"), "{err}");
    let deep_card = format!(
        r#"{{"delegate_id":"ldp:delegate:x","name":"n","model_family":"f","model_version":"v","trust_domain":"d",
        "context_window":1,"supported_payload_modes":["text"],"x_deep":{}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert!(matches!(IdentityCard::from_json(&deep_card), Err(ldp_types::Error::MalformedJson(_))));
    // Under a member the contract decoder ignores, too: it is part of what a signature covers.
    let deep_contract = |depth: usize| {
        format!(
            r#"{{"message_id":"m","from":"a","to":"b","timestamp":"t","body":{{"type":"TASK_SUBMIT","task_id":"t",
        "skill":"s","contract":{{"contract_id":"c","x":{}1{}}}}}}}"#,
            "{\"a\":".repeat(depth),
            "}".repeat(depth)
        )
    };
    let env = Envelope::from_json(&deep_contract(100)).unwrap();
    let ldp_types::Body::TaskSubmit(submit) = env.body else { panic!("not a submit") };
    assert_eq!(submit.contract.unwrap().contract_id, "c");
    for text in [
        deep_contract(5_000),
        deep_contract(5_000).replace(r#""contract":{"contract_id":"c","x":"#, r#""x_kept":{"y":"#),
    ] {
        let err = Envelope::from_json(&text).unwrap_err();
        assert!(err.to_string().contains("recursion limit"), "{err}");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Duplicate member names (issue 14, finding 7)

/// Writes `value` as compact JSON, repeating one member of the `target`-th object (pre-order, counting every object:
/// envelope, body, records, payloads, unknown members) after its other members, with `again` as its second value
/// (or its first value again). An empty target object gets a member `"k"` twice. Returns whether the target object
/// existed.
fn write_with_duplicate(
    value: &Value,
    target: usize,
    again: Option<&Value>,
    seen: &mut usize,
    out: &mut String,
) -> bool {
    match value {
        Value::Object(map) => {
            let here = *seen == target;
            *seen += 1;
            let mut hit = here;
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push(':');
                hit |= write_with_duplicate(v, target, again, seen, out);
            }
            if here {
                let name = map.keys().nth(map.len() / 2).cloned().unwrap_or_else(|| "k".to_owned());
                let again = again.or(map.get(&name)).cloned().unwrap_or(Value::from(1));
                if map.is_empty() {
                    out.push_str(&format!("{}:{again},", serde_json::to_string(&name).unwrap()));
                } else {
                    out.push(',');
                }
                out.push_str(&format!("{}:{again}", serde_json::to_string(&name).unwrap()));
            }
            out.push('}');
            hit
        }
        Value::Array(items) => {
            let mut hit = false;
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                hit |= write_with_duplicate(v, target, again, seen, out);
            }
            out.push(']');
            hit
        }
        scalar => {
            out.push_str(&scalar.to_string());
            false
        }
    }
}

/// A body whose payloads, records and unknown members hold objects at several depths.
fn nested_body() -> impl Strategy<Value = Body> {
    let payload =
        || json_value().prop_map(|v| json!({"task_type": "t", "instruction": "i", "data": [v, {"n": {"m": 1}}]}));
    prop_oneof![
        (payload(), option::of(contract()), extra()).prop_map(|(input, contract, extra)| {
            let mut submit = TaskSubmit::new("t1".into(), "s".into(), input, contract);
            submit.extra = extra;
            Body::TaskSubmit(submit)
        }),
        (payload(), provenance(), extra()).prop_map(|(output, provenance, extra)| {
            let mut result = TaskResult::new("t1".into(), output, provenance);
            result.extra = extra;
            Body::TaskResult(result)
        }),
        body(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// A member name repeated in any object of a message (the envelope, the body, a record, a payload, an unknown
    /// member), with the same or another value, compact or pretty: the scanner leaves it, and the serde path, the
    /// decoder as a whole, serde_json's `Deserialize` and the signature check all refuse it as a duplicate.
    #[test]
    fn a_duplicate_member_anywhere_is_refused_by_every_path(
        env in (envelope(), nested_body()).prop_map(|(mut e, b)| { e.body = b; e }),
        target in any::<prop::sample::Index>(),
        again in option::of(json_value()),
        pretty in any::<bool>(),
    ) {
        let mut value = env.to_value().unwrap();
        value["x_ext"] = json!({"a": [{"b": {}}]});
        let objects = {
            let mut count = 0;
            write_with_duplicate(&value, usize::MAX, None, &mut count, &mut String::new());
            count
        };
        let target = target.index(objects);
        let mut text = String::new();
        prop_assert!(write_with_duplicate(&value, target, again.as_ref(), &mut 0, &mut text));
        if pretty {
            text = text.replace(",\"", ",\n  \"").replace(":", " : ");
        }
        let is_duplicate = |r: Result<Envelope, ldp_types::Error>| matches!(r, Err(ldp_types::Error::DuplicateMember(_)));
        prop_assert!(!ldp_types::_scanner_decodes(&text), "{}", text);
        prop_assert!(is_duplicate(Envelope::from_json(&text)), "{}", text);
        prop_assert!(is_duplicate(Envelope::from_slice(text.as_bytes())), "{}", text);
        prop_assert!(is_duplicate(ldp_types::_serde_decodes(&text)), "{}", text);
        prop_assert!(serde_json::from_str::<Envelope>(&text).is_err(), "{}", text);
        for key in keys() {
            let verdict = signing::verify_slice(text.as_bytes(), &key.verifying_key());
            prop_assert!(matches!(verdict, Err(ldp_types::Error::DuplicateMember(_))), "{}: {:?}", text, verdict);
        }
    }
}
