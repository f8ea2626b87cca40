//! Strategies for the property tests of `proptest.rs` and `scanner.rs`: every wire type, generated in the shapes
//! peers send (RFC and reference-SDK shapes, compact and pretty-printed payloads, unknown members).
#![allow(dead_code, reason = "each test file uses its own share of the strategies")]

use std::collections::BTreeMap;

use ldp_types::signing::{SignatureAlgorithm, SigningKey};
use ldp_types::{
    Attestation, Body, Budget, Capability, CapabilityManifest, ClaimType, ContractPolicy, CostTier, DelegateId,
    DelegationContract, Envelope, ErrorCategory, ErrorSeverity, EvidenceRef, FailurePolicy, Hello, IdentityCard,
    LdpError, LineageEntry, PayloadMode, Provenance, QualityMetrics, RawJson, Score, SessionAccept, SessionClose,
    SessionConfig, SessionPropose, SessionReject, TaskCancel, TaskFailed, TaskResult, TaskSubmit, TaskUpdate,
    TrustDomain, UnknownBody, VerificationStatus,
};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Map, Value};

// ---------------------------------------------------------------------------------------------------------------
// Strategies

pub fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 _:.|/\\-\"\\\\\n\u{e9}\u{20ac}\u{1f600}]{0,10}"
}

/// Floats that print and parse back exactly.
pub fn exact_f64() -> impl Strategy<Value = f64> {
    (-100_000i64..100_000).prop_map(|n| n as f64 / 64.0)
}

pub fn score() -> impl Strategy<Value = Score> {
    (0u32..=1024).prop_map(|n| Score::new(f64::from(n) / 1024.0).unwrap())
}

pub fn mode() -> impl Strategy<Value = PayloadMode> {
    select(PayloadMode::ALL.to_vec())
}

pub fn json_value() -> impl Strategy<Value = Value> {
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

pub fn non_null_value() -> impl Strategy<Value = Value> {
    json_value().prop_filter("not null", |v| !v.is_null())
}

/// Extension members: names that no decoder gives a meaning to.
pub fn extra() -> impl Strategy<Value = Map<String, Value>> {
    btree_map("x_[a-z]{1,6}", json_value(), 0..3).prop_map(|m| m.into_iter().collect())
}

pub fn ldp_error() -> impl Strategy<Value = LdpError> {
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

pub fn verification_status() -> impl Strategy<Value = VerificationStatus> {
    select(VerificationStatus::ALL.to_vec())
}

pub fn provenance() -> impl Strategy<Value = Provenance> {
    let evidence = (text(), text(), option::of(text()), option::of(text()))
        .prop_map(|(source, kind, uri, summary)| EvidenceRef { source, kind, uri, summary });
    let hop_facts = (
        option::of(text()),
        option::of(score()),
        option::of(any::<u64>()),
        option::of(exact_f64()),
        option::of(any::<u64>()),
    );
    let lineage = (text(), text(), text(), option::of(text()), verification_status(), hop_facts).prop_map(
        |(delegate_id, model_version, step, timestamp, verification_status, facts)| {
            let mut entry =
                LineageEntry::new(delegate_id, model_version, step).with_verification_status(verification_status);
            entry.timestamp = timestamp;
            (entry.skill, entry.confidence, entry.tokens_used, entry.cost_usd, entry.latency_ms) = facts;
            entry
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

pub fn contract() -> impl Strategy<Value = DelegationContract> {
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

pub fn session_config() -> impl Strategy<Value = SessionConfig> {
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
pub fn raw_json() -> impl Strategy<Value = RawJson> {
    (json_value(), any::<bool>()).prop_map(|(v, pretty)| {
        if pretty { RawJson::from_json(serde_json::to_string_pretty(&v).unwrap()).unwrap() } else { v.into() }
    })
}

pub fn body() -> impl Strategy<Value = Body> {
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
            provenance: std::sync::Arc::new(p),
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

pub fn envelope() -> impl Strategy<Value = Envelope> {
    (
        (text(), text(), text(), text(), body(), mode(), text()),
        (option::of(provenance()), option::of("[0-9a-f]{64}"), option::of(text()), option::of(text()), extra()),
    )
        .prop_map(|(a, b)| {
            let mut e = Envelope::new(a.0, a.6, a.1, a.2, a.3, a.4).with_payload_mode(a.5);
            e.provenance = b.0.map(std::sync::Arc::new);
            e.signature = b.1;
            e.signature_algorithm = b.2;
            e.nonce = b.3;
            e.extensions = b.4;
            e
        })
}

pub fn quality() -> impl Strategy<Value = QualityMetrics> {
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
pub fn capability() -> impl Strategy<Value = Capability> {
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

pub fn identity_card() -> impl Strategy<Value = IdentityCard> {
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

/// One signing key of each algorithm.
pub fn keys() -> Vec<SigningKey> {
    vec![
        SigningKey::shared_secret(SignatureAlgorithm::HmacSha256, "k").unwrap(),
        SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "k").unwrap(),
        SigningKey::ed25519_from_seed(&[3; 32]),
    ]
}
