#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! The responder machine's handling cost of one TASK_SUBMIT: bytes in through `Responder::handle` (decode, checks,
//! payload validation) and the TASK_RESULT out through `complete_task` (provenance, envelope, signature), with the
//! delegate's own work reduced to nothing. Unsigned, and with `hmac-sha256-jcs` signatures and replay protection.
//!
//! Run with: `cargo bench -p ldp-session --bench responder`

mod round;

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use ldp_types::Body;
use ldp_types::signing::{SignatureAlgorithm, SigningKey};
use round::setup;

fn task_submit(c: &mut Criterion) {
    let mut group = c.benchmark_group("responder_task_submit");
    let variants = [
        ("unsigned", None),
        ("hmac-sha256-jcs+replay", Some(SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "k").unwrap())),
    ];
    for (name, key) in variants {
        let (mut peer, mut server) = setup(key);
        // Sanity: a full round produces a (signed, when keyed) TASK_RESULT.
        let bytes = peer.submit();
        let result = server.round(&bytes);
        assert!(matches!(result.body, Body::TaskResult(_)));
        assert_eq!(result.signature.is_some(), peer.key.is_some());
        group.bench_function(name, |b| {
            b.iter_batched(|| peer.submit(), |bytes| black_box(server.round(&bytes)), BatchSize::SmallInput)
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5)).sample_size(50);
    targets = task_submit
}
criterion_main!(benches);
