#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! A loop over one codec operation, for instruction counts under callgrind (steadier than wall time on a shared
//! machine). Run:
//!
//! `cargo build --release -p ldp-types --example codec_loop && valgrind --tool=callgrind
//!  target/release/examples/codec_loop ours flow 20000`
//!
//! Operations: `ours` (decode + encode), `decode`, `encode`, `reference` (ldp-protocol 0.2.0 decode + encode),
//! `ignored` (IgnoredAny), `value` (serde_json `Value` decode + encode), `sign_verify` (hmac-sha256-jcs sign, then
//! verify from the received bytes). Inputs: `flow` (501 B), `flow_contract`, `flow_result` (the transcript's TASK_RESULT), `972`, `1497`.

use std::hint::black_box;

use ldp_protocol::types::messages::LdpEnvelope;
use ldp_types::Envelope;
use ldp_types::signing::{self, SignatureAlgorithm, SigningKey};
use serde::de::IgnoredAny;
use serde_json::Value;

#[path = "../benches/inputs/mod.rs"]
mod inputs;

use inputs::{flow_submit, paper_contract, sized_submit};

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
        "flow_result" => serde_json::to_vec(&inputs::flow_result()).unwrap(),
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
