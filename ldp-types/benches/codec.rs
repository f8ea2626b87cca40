#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! Codec benchmarks: decode + encode of TASK_SUBMIT envelopes against the reference crate `ldp-protocol` 0.2.0 and
//! against `serde_json::IgnoredAny` on the same bytes; contract validation; `hmac-sha256-jcs` sign + verify.
//!
//! Run with: `cargo bench -p ldp-types --bench codec` (the system allocator; `--bench codec_mimalloc` runs the
//! decode + encode comparison under mimalloc, the allocator the `ldp` binary ships with).

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use ldp_types::signing::{self, SignatureAlgorithm, SigningKey};
use ldp_types::time::parse_timestamp;
use ldp_types::{Envelope, PayloadMode, Provenance};

mod decode_encode;
mod inputs;

use inputs::{paper_contract, sized_submit};

fn codec(c: &mut Criterion) {
    decode_encode::compare(c, "codec");
}

fn contract_check(c: &mut Criterion) {
    let contract: ldp_types::DelegationContract = serde_json::from_value(paper_contract()).unwrap();
    let limits = contract.limits().unwrap();
    let mut provenance = Provenance::new("ldp:delegate:qwen3-8b-reasoning", "qwen3-8b-2026.01", PayloadMode::Text);
    provenance.tokens_used = Some(8200);
    provenance.cost_usd = Some(0.01);
    let received = parse_timestamp("2026-03-15T12:00:00Z").unwrap();
    assert!(!limits.check(&provenance, received).satisfied());
    c.bench_function("contract/limits_check", |b| {
        b.iter(|| black_box(black_box(&limits).check(black_box(&provenance), black_box(received))))
    });
}

fn jcs_signing(c: &mut Criterion) {
    let bytes = sized_submit(1497, true);
    let mut env = Envelope::from_slice(&bytes).unwrap();
    env.signature = None;
    env.signature_algorithm = None;
    let key = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "bench-secret").unwrap();
    let verifying = key.verifying_key();
    let mut signed = env.clone();
    signing::sign(&mut signed, &key).unwrap();
    let signed_value = signed.to_value().unwrap();
    signing::verify_value(&signed_value, &verifying).unwrap();

    let mut group = c.benchmark_group("signing/hmac-sha256-jcs_1497B");
    // Signing overwrites `signature`, which the JCS input excludes, so re-signing the same envelope is the real work.
    let mut work = env.clone();
    group.bench_function("sign_verify", |b| {
        b.iter(|| {
            signing::sign(black_box(&mut work), &key).unwrap();
            signing::verify(black_box(&work), &verifying).unwrap();
        })
    });
    group.bench_function("sign", |b| b.iter(|| signing::sign(black_box(&mut work), &key).unwrap()));
    group.bench_function("canonical_input", |b| b.iter(|| signing::canonical_signing_input(black_box(&env)).unwrap()));
    group.bench_function("canonical_input_serde_json_canonicalizer", |b| {
        b.iter(|| serde_json_canonicalizer::to_vec(&black_box(&signed_value)).unwrap())
    });
    group.bench_function("verify", |b| b.iter(|| signing::verify(black_box(&signed), &verifying).unwrap()));
    group.bench_function("verify_value", |b| {
        b.iter(|| signing::verify_value(black_box(&signed_value), &verifying).unwrap())
    });
    // What a receiver runs: verification of the bytes as received, without a `Value` tree.
    let signed_bytes = signed.to_vec().unwrap();
    group.bench_function("verify_slice", |b| {
        b.iter(|| signing::verify_slice(black_box(&signed_bytes), &verifying).unwrap())
    });
    group.bench_function("sign_verify_slice", |b| {
        b.iter(|| {
            signing::sign(black_box(&mut work), &key).unwrap();
            signing::verify_slice(black_box(&signed_bytes), &verifying).unwrap();
        })
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = codec, contract_check, jcs_signing
}
criterion_main!(benches);
