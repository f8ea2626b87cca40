#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! A loop over one codec operation, for instruction counts under callgrind (steadier than wall time on a shared
//! machine). Run:
//!
//! `cargo build --release -p ldp-types --example codec_loop && valgrind --tool=callgrind
//!  target/release/examples/codec_loop ours flow 20000`
//!
//! Operations: `ours` (decode + encode), `decode`, `encode`, `reference` (ldp-protocol 0.2.0 decode + encode),
//! `ignored` (IgnoredAny), `value` (serde_json `Value` decode + encode), `sign_verify` (hmac-sha256-jcs sign, then
//! verify from the received bytes). Inputs: `flow` (501 B), `flow_contract`, `972`, `1497`.

use std::hint::black_box;

use ldp_protocol::types::messages::LdpEnvelope;
use ldp_types::Envelope;
use ldp_types::signing::{self, SignatureAlgorithm, SigningKey};
use serde::de::IgnoredAny;
use serde_json::{Value, json};

fn flow_submit() -> Value {
    let flow: Vec<Value> = serde_json::from_str(include_str!("../tests/fixtures/ldp-session-flow.json")).unwrap();
    let mut submit = flow[4].clone();
    submit.as_object_mut().unwrap().remove("_comment");
    submit
}

fn paper_contract() -> Value {
    json!({
        "contract_id": "ctr-7f3a9c2e-4b1d-4e8a-9f6c-2d5e8a1b3c7f",
        "objective": "Summarize the quarterly report",
        "success_criteria": ["<=300 words", "include revenue figures"],
        "policy": {
            "failure_policy": "fail_closed",
            "budget": {"max_tokens": 6000, "max_cost_usd": 0.05},
            "safety_constraints": ["no speculative projections"],
            "max_delegation_depth": 2
        },
        "deadline": "2026-03-15T18:00:00Z",
        "created_at": "2026-03-15T10:00:00Z"
    })
}

/// The bench's padded TASK_SUBMIT (same construction as `benches/codec.rs`).
fn sized_submit(size: usize, contract: bool) -> Vec<u8> {
    let mut v = flow_submit();
    v["message_id"] = json!("5f0c6f1e-8d2a-4c1b-9e3f-7a6b5c4d3e2f");
    v["nonce"] = json!("9a8b7c6d5e4f30211203948576abcdef");
    v["signature"] = json!("3f1e5d7c9b2a4f6e8d0c1b3a5f7e9d2c4b6a8f0e1d3c5b7a9f2e4d6c8b0a1f3e");
    v["signature_algorithm"] = json!("hmac-sha256");
    v["body"]["input"]["labels"] = json!(["scalability", "team-size", "operational-cost", "deployment"]);
    v["body"]["input"]["context"] = json!("");
    if contract {
        v["body"]["contract"] = paper_contract();
    }
    let base = serde_json::to_vec(&v).unwrap().len();
    let filler = "The team ships weekly, runs on one cloud region and has no dedicated ops engineer. ";
    v["body"]["input"]["context"] = json!(filler.repeat(size).chars().take(size - base).collect::<String>());
    serde_json::to_vec(&v).unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let op = args.get(1).map_or("ours", String::as_str);
    let input = args.get(2).map_or("flow", String::as_str);
    let iters: usize = args.get(3).map_or(20_000, |n| n.parse().unwrap());
    let bytes = match input {
        "flow" => serde_json::to_vec(&flow_submit()).unwrap(),
        "flow_contract" => {
            let mut v = flow_submit();
            v["body"]["contract"] = paper_contract();
            serde_json::to_vec(&v).unwrap()
        }
        "972" => sized_submit(972, false),
        "1497" => sized_submit(1497, true),
        other => panic!("unknown input {other}"),
    };
    let key = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "bench-secret").unwrap();
    let verifying = key.verifying_key();
    let decoded = Envelope::from_slice(&bytes).unwrap();
    for _ in 0..iters {
        match op {
            "ours" => {
                let env = Envelope::from_slice(black_box(&bytes)).unwrap();
                black_box(env.to_vec().unwrap());
            }
            "decode" => {
                black_box(Envelope::from_slice(black_box(&bytes)).unwrap());
            }
            "encode" => {
                black_box(black_box(&decoded).to_vec().unwrap());
            }
            "reference" => {
                let env: LdpEnvelope = serde_json::from_slice(black_box(&bytes)).unwrap();
                black_box(serde_json::to_vec(&env).unwrap());
            }
            "ignored" => {
                black_box(serde_json::from_slice::<IgnoredAny>(black_box(&bytes)).unwrap());
            }
            "value" => {
                let v: Value = serde_json::from_slice(black_box(&bytes)).unwrap();
                black_box(serde_json::to_vec(&v).unwrap());
            }
            "sign_verify" => {
                let mut env = black_box(&decoded).clone();
                signing::sign(&mut env, &key).unwrap();
                signing::verify(&env, &verifying).unwrap();
            }
            other => panic!("unknown op {other}"),
        }
    }
}
