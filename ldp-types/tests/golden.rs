#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Interoperability with both reference SDKs (`ldp-protocol` 0.2.0 from PyPI and from crates.io).
//!
//! - Golden vectors (`tests/golden/*_ref_vectors.json`, produced by the SDKs themselves): every envelope parses, our
//!   `hmac-sha256` signing input and signature equal the SDK's, and their signatures verify with ours.
//! - In process against the Rust reference crate: envelopes we build and sign are accepted by
//!   `ldp_protocol::signing::verify_envelope`, and envelopes it builds and signs verify here (with and without nonce).
//! - Tampering with a signed TASK_SUBMIT's input or contract passes `hmac-sha256` (which does not cover the body) but
//!   fails `hmac-sha256-jcs` and `ed25519-jcs`.

use std::path::Path;

use ldp_protocol::types::messages::{LdpEnvelope, LdpMessageBody};
use ldp_protocol::types::payload::PayloadMode as RefPayloadMode;
use ldp_types::signing::{self, SignatureAlgorithm, SigningKey, VerifyingKey, legacy_signing_input};
use ldp_types::{
    Attestation, Body, Budget, Capability, CapabilityManifest, DelegationContract, Envelope, FailurePolicy, Hello,
    IdentityCard, LdpError, PayloadMode, Provenance, SessionAccept, SessionClose, SessionConfig, SessionPropose,
    SessionReject, TaskCancel, TaskFailed, TaskResult, TaskSubmit, TaskUpdate, codes,
};
use serde_json::{Value, json};

const FILES: [&str; 2] = ["python_ref_vectors.json", "rust_ref_vectors.json"];

fn golden(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn legacy_key(secret: &str) -> SigningKey {
    SigningKey::shared_secret(SignatureAlgorithm::HmacSha256, secret).unwrap()
}

/// The vectors of one file with the secret they were signed with.
fn vectors(file: &str) -> (String, Vec<Value>) {
    let doc = golden(file);
    let secret = doc["secret"].as_str().unwrap().to_owned();
    (secret, doc["vectors"].as_array().unwrap().clone())
}

#[test]
fn every_vector_parses_and_its_signature_is_reproduced() {
    let mut checked = 0;
    for file in FILES {
        let (secret, vectors) = vectors(file);
        let key = legacy_key(&secret);
        let verifying = key.verifying_key();
        for v in vectors {
            let name = format!("{file}:{}", v["name"].as_str().unwrap());
            let wire = v["wire"].as_str().unwrap();
            let env = Envelope::from_json(wire).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(env.body.type_name(), v["type"].as_str().unwrap(), "{name}");
            assert!(env.body.message_type().is_some(), "{name}");

            // The signing input is byte-for-byte the SDK's.
            let input = legacy_signing_input(&env);
            assert_eq!(String::from_utf8(input).unwrap(), v["signing_input"].as_str().unwrap(), "{name}");

            // Their signature verifies with ours, from the decoded envelope and from the JSON as received.
            let expected = match v["envelope"]["signature"].as_str() {
                Some(sig) => {
                    signing::verify(&env, &verifying).unwrap_or_else(|e| panic!("{name}: {e}"));
                    let raw: Value = serde_json::from_str(wire).unwrap();
                    signing::verify_value(&raw, &verifying).unwrap_or_else(|e| panic!("{name}: {e}"));
                    sig.to_owned()
                }
                None => {
                    assert!(matches!(signing::verify(&env, &verifying), Err(ldp_types::Error::MissingSignature)));
                    v["signature_if_signed"].as_str().unwrap().to_owned()
                }
            };

            // Our signature of the same envelope equals theirs.
            let mut ours = env.clone();
            ours.signature = None;
            ours.signature_algorithm = None;
            signing::sign(&mut ours, &key).unwrap();
            assert_eq!(ours.signature.as_deref(), Some(expected.as_str()), "{name}");
            assert_eq!(ours.signature_algorithm.as_deref(), Some("hmac-sha256"), "{name}");

            // A wrong secret does not verify.
            if env.signature.is_some() {
                let wrong = legacy_key("not-the-secret").verifying_key();
                assert!(matches!(signing::verify(&env, &wrong), Err(ldp_types::Error::BadSignature)), "{name}");
            }

            // What the SDK's server was sent parses too, and verifies when signed.
            if let Some(input) = v.get("sdk_input").filter(|i| i.is_object()) {
                let req = Envelope::from_value(input.clone()).unwrap_or_else(|e| panic!("{name} input: {e}"));
                let verdict = req.signature.as_ref().map(|_| signing::verify_value(input, &verifying));
                if name.ends_with("reply_to_bad_signature") {
                    // The request of this vector is deliberately signed wrongly.
                    assert!(matches!(verdict, Some(Err(ldp_types::Error::BadSignature))), "{name}: {verdict:?}");
                } else if let Some(verdict) = verdict {
                    verdict.unwrap_or_else(|e| panic!("{name} input: {e}"));
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 80, "only {checked} vectors");
}

#[test]
fn pipe_collisions_and_uncovered_bodies_behave_as_documented() {
    // The legacy scheme does not escape `|` and does not cover the body: pairs of different messages share a signature.
    for file in FILES {
        let (secret, vectors) = vectors(file);
        let find = |n: &str| {
            let v = vectors.iter().find(|v| v["name"] == n).unwrap_or_else(|| panic!("{file}: no {n}"));
            Envelope::from_json(v["wire"].as_str().unwrap()).unwrap()
        };
        let (a, b) = (find("pipe_collision_a"), find("pipe_collision_b"));
        assert_ne!(a, b);
        assert_eq!(legacy_signing_input(&a), legacy_signing_input(&b));
        assert_eq!(a.signature, b.signature);
        // The body-covering algorithm tells them apart.
        let jcs = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, &secret).unwrap();
        let (mut a, mut b) = (a, b);
        signing::sign(&mut a, &jcs).unwrap();
        signing::sign(&mut b, &jcs).unwrap();
        assert_ne!(a.signature, b.signature);
    }
    let (_, vectors) = vectors("python_ref_vectors.json");
    let sig = |n: &str| vectors.iter().find(|v| v["name"] == n).unwrap()["envelope"]["signature"].clone();
    assert_eq!(sig("body_not_covered_a"), sig("body_not_covered_b"));
}

#[test]
fn identity_cards_and_capabilities_parse() {
    for file in FILES {
        let doc = golden(file);
        let card = IdentityCard::from_json(&doc["identity_card"].to_string()).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(card.delegate_id.as_str(), doc["identity_card"]["delegate_id"].as_str().unwrap());
        assert_eq!(card.capabilities.len(), doc["identity_card"]["capabilities"].as_array().unwrap().len());
        if let Some(wire) = doc["identity_card_wire"].as_str() {
            assert_eq!(IdentityCard::from_json(wire).unwrap(), card, "{file}: wire and parsed card differ");
        }
        for c in doc["capabilities_response"]["capabilities"].as_array().unwrap() {
            serde_json::from_value::<Capability>(c.clone()).unwrap_or_else(|e| panic!("{file}: {e}: {c}"));
        }
    }
    // The Python card's capability quality claims keep their claim type.
    let py = IdentityCard::from_json(&golden("python_ref_vectors.json")["identity_card"].to_string()).unwrap();
    let reasoning = py.capability("reasoning").unwrap();
    assert_eq!(reasoning.claim_type(), ldp_types::ClaimType::ExternallyBenchmarked);
    assert_eq!(reasoning.quality_score().map(|s| s.get()), Some(0.87));
}

// ---------------------------------------------------------------------------------------------------------------
// In process against the Rust reference crate

const SECRET: &str = "in-process-secret";

fn contract() -> DelegationContract {
    let mut c = DelegationContract::new("ctr-7f3a", "Summarize the quarterly report")
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_budget(Budget { max_tokens: Some(6000), max_cost_usd: Some(0.05) })
        .with_deadline("2026-03-15T18:00:00Z")
        .with_max_delegation_depth(2);
    c.success_criteria = vec!["<=300 words".into(), "include revenue figures".into()];
    c.policy.safety_constraints = vec!["no speculative projections".into()];
    // The reference crate requires `created_at`.
    c.created_at = Some("2026-03-15T10:00:00Z".into());
    c
}

fn provenance() -> Provenance {
    let mut p = Provenance::new("ldp:delegate:bob", "1.0", PayloadMode::SemanticFrame);
    p.confidence = Some(ldp_types::Score::new(0.82).unwrap());
    p.session_id = Some("s-1".into());
    p.timestamp = Some("2026-03-09T12:00:05Z".into());
    p.lineage.push(hop_with_facts());
    p
}

/// A lineage entry with every fact of a hop (the extension members next to the RFC's).
fn hop_with_facts() -> ldp_types::LineageEntry {
    let mut hop = ldp_types::LineageEntry::new("ldp:delegate:carol", "carol-1", "delegated")
        .with_timestamp("2026-03-09T12:00:04Z")
        .with_verification_status(ldp_types::VerificationStatus::PeerVerified)
        .with_skill("summarize")
        .with_latency_ms(38);
    hop.confidence = Some(ldp_types::Score::new(0.9).unwrap());
    hop.tokens_used = Some(321);
    hop.cost_usd = Some(0.0042);
    hop
}

/// The reference crate reads a lineage entry carrying a hop's facts as its RFC entry (the extension members are
/// ignored there, not refused), and our decoder reads every fact back.
#[test]
fn lineage_entries_with_hop_facts_stay_readable_by_the_reference_crate() {
    let env = Envelope::new(
        "00000000-0000-4000-8000-000000000099",
        "2026-03-09T12:00:00+00:00",
        "s-1",
        "ldp:delegate:bob",
        "ldp:delegate:alice",
        TaskResult::new("task-1".into(), json!({"answer": "A"}), provenance()),
    );
    let wire = env.to_json().unwrap();
    let theirs: LdpEnvelope = serde_json::from_str(&wire).unwrap();
    let LdpMessageBody::TaskResult { provenance: theirs, .. } = theirs.body else { panic!("not a TASK_RESULT") };
    let ours = hop_with_facts();
    let entry = &theirs.lineage[0];
    assert_eq!(
        (entry.delegate_id.as_str(), entry.model_version.as_str(), entry.step.as_str(), entry.timestamp.as_deref()),
        (ours.delegate_id.as_str(), ours.model_version.as_str(), ours.step.as_str(), ours.timestamp.as_deref())
    );
    assert_eq!(serde_json::to_value(&entry.verification_status).unwrap(), json!("peer_verified"));
    let back = Envelope::from_json(&wire).unwrap();
    let Body::TaskResult(result) = back.body else { panic!("not a TASK_RESULT") };
    assert_eq!(result.provenance.lineage, vec![ours]);
}

/// One envelope of each of the twelve types, in shapes the reference crate can parse.
fn our_envelopes() -> Vec<Envelope> {
    let frame = json!({"task_type": "analysis", "instruction": "Compare two designs"});
    let bodies: Vec<Body> = vec![
        Hello::new("ldp:delegate:alice".into(), vec![PayloadMode::SemanticFrame, PayloadMode::Text]).into(),
        CapabilityManifest::new(json!({"capabilities": [], "supported_modes": ["semantic_frame", "text"]})).into(),
        SessionPropose::new(SessionConfig { payload_mode: Some(PayloadMode::SemanticFrame), ..Default::default() })
            .into(),
        SessionAccept::new("s-1".into(), PayloadMode::SemanticFrame, None).into(),
        SessionReject::new("untrusted | domain".into(), Some(LdpError::policy(codes::TRUST_VIOLATION, "no"))).into(),
        TaskSubmit::new("task-1".into(), "reasoning".into(), frame.clone(), None).into(),
        TaskSubmit::new("task-2".into(), "reasoning".into(), frame, Some(contract())).into(),
        TaskUpdate::new("task-1".into(), Some(0.5), Some("half way".into())).into(),
        TaskResult::new("task-1".into(), json!({"answer": "A"}), provenance()).into(),
        TaskFailed::new("task-1".into(), LdpError::runtime(codes::EXECUTION_FAILED, "boom")).into(),
        TaskCancel::new("task-1".into()).into(),
        Attestation::new(json!({"claim": "x"}), json!({"evidence": "y"})).into(),
        SessionClose::new(Some("done".into())).into(),
    ];
    bodies
        .into_iter()
        .enumerate()
        .map(|(i, body)| {
            Envelope::new(
                format!("00000000-0000-4000-8000-{i:012}"),
                "2026-03-09T12:00:00+00:00",
                "s-1",
                "ldp:delegate:alice",
                "ldp:delegate:bob",
                body,
            )
            .with_payload_mode(PayloadMode::SemanticFrame)
        })
        .collect()
}

#[test]
fn reference_crate_verifies_what_we_sign() {
    let key = legacy_key(SECRET);
    for nonce in [None, Some("00112233445566778899aabbccddeeff")] {
        for mut env in our_envelopes() {
            env.nonce = nonce.map(str::to_owned);
            signing::sign(&mut env, &key).unwrap();
            let theirs: LdpEnvelope = serde_json::from_str(&env.to_json().unwrap())
                .unwrap_or_else(|e| panic!("reference crate cannot parse our {}: {e}", env.body.type_name()));
            let sig = env.signature.as_deref().unwrap();
            assert!(
                ldp_protocol::signing::verify_envelope(&theirs, SECRET, sig),
                "reference crate rejects our {} (nonce {nonce:?})",
                env.body.type_name()
            );
            assert!(!ldp_protocol::signing::verify_envelope(&theirs, "other", sig));
            // And it computes the same signature.
            assert_eq!(ldp_protocol::signing::sign_envelope(&theirs, SECRET), sig);
        }
    }
}

fn their_envelopes() -> Vec<LdpEnvelope> {
    let frame = json!({"task_type": "analysis", "instruction": "Compare two designs"});
    let bodies = vec![
        LdpMessageBody::Hello {
            delegate_id: "ldp:delegate:alice".into(),
            supported_modes: vec![RefPayloadMode::SemanticFrame, RefPayloadMode::Text],
        },
        LdpMessageBody::SessionPropose { config: json!({"payload_mode": "semantic_frame", "ttl_secs": 60}) },
        LdpMessageBody::SessionAccept { session_id: "s-9".into(), negotiated_mode: RefPayloadMode::Text },
        LdpMessageBody::SessionReject { reason: "no".into(), error: None },
        LdpMessageBody::TaskSubmit { task_id: "t|1".into(), skill: "echo".into(), input: frame, contract: None },
        LdpMessageBody::TaskUpdate { task_id: "t1".into(), progress: Some(0.25), message: None },
        LdpMessageBody::TaskCancel { task_id: "t1".into() },
        LdpMessageBody::Attestation { claim: json!({}), evidence: Value::Null },
        LdpMessageBody::SessionClose { reason: None },
    ];
    bodies
        .into_iter()
        .map(|body| LdpEnvelope::new("s-1", "ldp:delegate:alice", "ldp:delegate:bob", body, RefPayloadMode::Text))
        .collect()
}

#[test]
fn we_verify_what_the_reference_crate_signs() {
    let key = legacy_key(SECRET);
    for nonce in [None, Some("ffeeddccbbaa99887766554433221100")] {
        for mut theirs in their_envelopes() {
            theirs.nonce = nonce.map(str::to_owned);
            ldp_protocol::signing::apply_signature(&mut theirs, SECRET);
            let wire = serde_json::to_string(&theirs).unwrap();
            let ours = Envelope::from_json(&wire).unwrap_or_else(|e| panic!("{e}: {wire}"));
            signing::verify(&ours, &key.verifying_key()).unwrap_or_else(|e| panic!("{e}: {wire}"));
            signing::verify_value(&serde_json::from_str(&wire).unwrap(), &key.verifying_key()).unwrap();
            assert!(signing::verify(&ours, &legacy_key("other").verifying_key()).is_err());
            // Dropping or adding the nonce breaks it, as it is part of the signed input.
            let mut renonced = ours.clone();
            renonced.nonce = if nonce.is_some() { None } else { Some("00".into()) };
            assert!(signing::verify(&renonced, &key.verifying_key()).is_err(), "{wire}");
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Tampering

fn keys() -> Vec<(SigningKey, VerifyingKey)> {
    let keys = vec![
        legacy_key(SECRET),
        SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, SECRET).unwrap(),
        SigningKey::ed25519_from_seed(&[42; 32]),
    ];
    keys.into_iter().map(|k| (k.clone(), k.verifying_key())).collect()
}

/// A change an attacker makes to a signed message.
type Tamper = fn(&mut Value);

#[test]
fn tampering_with_a_signed_task_submit_breaks_only_the_body_covering_algorithms() {
    // Message 5 of the RFC transcript with the paper's contract, as a peer would send it.
    let flow: Vec<Value> = serde_json::from_str(include_str!("fixtures/ldp-session-flow.json")).unwrap();
    let mut submit = flow[4].clone();
    submit.as_object_mut().unwrap().remove("_comment");
    submit["body"]["contract"] = serde_json::to_value(contract()).unwrap();
    submit["nonce"] = json!("9a8b7c6d5e4f30211203948576abcdef");
    let tampers: [(&str, Tamper); 4] = [
        ("input instruction", |v| v["body"]["input"]["instruction"] = json!("Exfiltrate the quarterly report")),
        ("contract budget", |v| v["body"]["contract"]["policy"]["budget"]["max_tokens"] = json!(600_000)),
        ("payload mode", |v| v["payload_mode"] = json!("text")),
        ("added input member", |v| v["body"]["input"]["x_extra"] = json!(true)),
    ];
    for (key, verifying) in keys() {
        let algorithm = key.algorithm();
        let mut env = Envelope::from_value(submit.clone()).unwrap();
        signing::sign(&mut env, &key).unwrap();
        let signed = env.to_value().unwrap();
        signing::verify_value(&signed, &verifying).unwrap_or_else(|e| panic!("{algorithm}: {e}"));
        for (what, tamper) in tampers {
            let mut raw = signed.clone();
            tamper(&mut raw);
            let by_value = signing::verify_value(&raw, &verifying);
            let by_envelope = signing::verify(&Envelope::from_value(raw.clone()).unwrap(), &verifying);
            match algorithm {
                SignatureAlgorithm::HmacSha256 => {
                    assert!(by_value.is_ok() && by_envelope.is_ok(), "{algorithm} covers {what}?");
                }
                _ => {
                    assert!(matches!(by_value, Err(ldp_types::Error::BadSignature)), "{algorithm}: {what}");
                    assert!(matches!(by_envelope, Err(ldp_types::Error::BadSignature)), "{algorithm}: {what}");
                }
            }
        }
        // Every algorithm covers the task id.
        let mut raw = signed.clone();
        raw["body"]["task_id"] = json!("task-002");
        assert!(signing::verify_value(&raw, &verifying).is_err(), "{algorithm}");
    }
}
