#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! LCTL benchmarks: where the time of one hop goes. Parsing the spec's Example 2 from YAML is
//! the baseline; the same document from JSON (as it travels in a semantic frame), writing it,
//! the rules, the receiving protocol and rendering are measured against it, and a ten-hop
//! chain of 40-step traces is checked against parsing those ten hops.
//!
//! Run with: `cargo bench -p ldp-lctl --bench lctl`

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use ldp_lctl::{
    Confidence, Fact, FactId, LctlDocument, RenderFormat, TraceStep, check_chain, check_document, parse,
    receive_document, render,
};

const EXAMPLE_2: &str = include_str!("../tests/fixtures/spec-example2-parallel-merge.yaml");

/// Hop `hop` of a long sequential chain: 4 steps per hop, each adding one fact, all critical.
fn long_hop(hop: u32) -> LctlDocument {
    let mut doc = LctlDocument::default();
    let steps = hop * 4;
    doc.chain = Some(ldp_lctl::Chain { id: "bench-chain".into(), step: Some(steps), ..Default::default() });
    let mut critical = Vec::new();
    for number in 1..=steps {
        let agent = format!("agent-{}", number % 7);
        let id = FactId::new(format!("F{number}")).unwrap();
        let mut step = TraceStep::new(number, agent.clone());
        step.action = Some(format!("did step {number}"));
        step.confidence = Some(Confidence::new(0.9).unwrap());
        step.facts_added.push(id.clone());
        doc.trace.push(step);
        let mut fact = Fact::new(format!("fact established at step {number}"), Confidence::new(0.85).unwrap());
        fact.source = Some(agent);
        fact.step = Some(number);
        doc.facts.insert(id.clone(), fact);
        critical.push(id);
    }
    doc.handoff = Some(ldp_lctl::Handoff { critical_facts: critical, ..Default::default() });
    doc
}

fn bench(c: &mut Criterion) {
    let doc = parse(EXAMPLE_2).unwrap();
    let json = serde_json::to_string(&doc.to_value()).unwrap();

    let mut one_hop = c.benchmark_group("example2");
    one_hop.bench_function("parse_yaml", |b| b.iter(|| parse(black_box(EXAMPLE_2)).unwrap()));
    one_hop.bench_function("parse_json", |b| {
        b.iter(|| {
            let value: ldp_lctl::Value = serde_json::from_str(black_box(&json)).unwrap();
            LctlDocument::from_value(value).unwrap()
        })
    });
    one_hop.bench_function("write_yaml", |b| b.iter(|| black_box(&doc).to_yaml().unwrap()));
    one_hop.bench_function("check_document", |b| b.iter(|| check_document(black_box(&doc))));
    one_hop.bench_function("receive", |b| {
        b.iter(|| receive_document(black_box(doc.clone()), Some("integration-agent")).unwrap())
    });
    one_hop.bench_function("render_mermaid", |b| b.iter(|| render(black_box(&doc), RenderFormat::Mermaid)));
    one_hop.bench_function("render_timeline", |b| b.iter(|| render(black_box(&doc), RenderFormat::Timeline)));
    one_hop.finish();

    let hops: Vec<LctlDocument> = (1..=10).map(long_hop).collect();
    let hop_texts: Vec<String> = hops.iter().map(|d| d.to_yaml().unwrap()).collect();
    let mut chain = c.benchmark_group("ten_hops");
    chain.bench_function("parse_all", |b| {
        b.iter(|| hop_texts.iter().map(|t| parse(black_box(t)).unwrap()).collect::<Vec<_>>())
    });
    chain.bench_function("check_chain", |b| b.iter(|| check_chain(black_box(&hops))));
    chain.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
