//! Parse throughput: LLMX text against `serde_json` reading the JSON document of the same messages.
//!
//! Run with: `cargo bench -p ldp-llmx --bench parse`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ldp_llmx::Message;

mod corpus;

/// The spec's example messages repeated into one document of about 256 KiB of LLMX.
fn documents() -> (String, String, usize) {
    let mut llmx = String::new();
    let mut n = 0;
    while llmx.len() < 256 * 1024 {
        for (_, m) in corpus::MESSAGES {
            llmx.push_str(m);
            n += 1;
        }
    }
    let parsed = ldp_llmx::parse_all(&llmx).unwrap();
    assert_eq!(parsed.len(), n);
    let json = serde_json::to_string(&parsed).unwrap();
    // The JSON document must hold the same messages, or the comparison means nothing.
    assert_eq!(serde_json::from_str::<Vec<Message>>(&json).unwrap(), parsed);
    (llmx, json, n)
}

fn bench(c: &mut Criterion) {
    let (llmx, json, n) = documents();
    eprintln!("document: {n} messages, LLMX {} bytes, JSON {} bytes", llmx.len(), json.len());
    let mut g = c.benchmark_group("parse");
    g.sample_size(30).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));

    g.throughput(Throughput::Bytes(llmx.len() as u64));
    g.bench_function("llmx_typed", |b| b.iter(|| ldp_llmx::parse_all(black_box(&llmx)).unwrap()));

    g.throughput(Throughput::Bytes(json.len() as u64));
    g.bench_function("serde_json_typed", |b| {
        b.iter(|| serde_json::from_str::<Vec<Message>>(black_box(&json)).unwrap())
    });
    g.bench_function("serde_json_value", |b| {
        b.iter(|| serde_json::from_str::<serde_json::Value>(black_box(&json)).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
