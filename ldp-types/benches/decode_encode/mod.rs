//! The decode + encode comparison, shared by the `codec` bench (system allocator) and `codec_mimalloc`.

use std::hint::black_box;

use criterion::{Criterion, Throughput};
use ldp_protocol::types::messages::LdpEnvelope;
use ldp_types::{Body, Envelope};
use serde::de::IgnoredAny;
use serde_json::Value;

use crate::inputs::{flow_result, flow_submit, paper_contract, sized_submit};

/// Decode + encode of the four TASK_SUBMITs and the transcript's TASK_RESULT by this crate, the reference crate,
/// `IgnoredAny` and `Value`, on the same bytes, in groups named `{prefix}/{input}`.
pub fn compare(c: &mut Criterion, prefix: &str) {
    let flow = serde_json::to_vec(&flow_submit()).unwrap();
    let mut flow_contract = flow_submit();
    flow_contract["body"]["contract"] = paper_contract();
    let flow_contract = serde_json::to_vec(&flow_contract).unwrap();
    let inputs = [
        ("flow_submit", flow),
        ("flow_submit_contract", flow_contract),
        ("submit_972B", sized_submit(972, false)),
        ("submit_contract_1497B", sized_submit(1497, true)),
        // Not among the targets, but what every client decodes: the transcript's TASK_RESULT.
        ("flow_result", serde_json::to_vec(&flow_result()).unwrap()),
    ];
    for (name, bytes) in &inputs {
        // Both decoders must accept the bytes, or the comparison is meaningless.
        let ours = Envelope::from_slice(bytes).unwrap();
        assert!(matches!(ours.body, Body::TaskSubmit(_) | Body::TaskResult(_)));
        serde_json::from_slice::<LdpEnvelope>(bytes).unwrap();

        let mut group = c.benchmark_group(format!("{prefix}/{name}"));
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function("ldp_types_decode_encode", |b| {
            b.iter(|| {
                let env = Envelope::from_slice(black_box(bytes)).unwrap();
                black_box(env.to_vec().unwrap())
            })
        });
        group.bench_function("ldp_protocol_decode_encode", |b| {
            b.iter(|| {
                let env: LdpEnvelope = serde_json::from_slice(black_box(bytes)).unwrap();
                black_box(serde_json::to_vec(&env).unwrap())
            })
        });
        group.bench_function("ignored_any", |b| {
            b.iter(|| black_box(serde_json::from_slice::<IgnoredAny>(black_box(bytes)).unwrap()))
        });
        // The floor for any decoder producing owned strings and `Value`s: serde_json's own `Value`.
        group.bench_function("serde_json_value_decode_encode", |b| {
            b.iter(|| {
                let v: Value = serde_json::from_slice(black_box(bytes)).unwrap();
                black_box(serde_json::to_vec(&v).unwrap())
            })
        });
        group.bench_function("ldp_types_decode", |b| b.iter(|| black_box(Envelope::from_slice(black_box(bytes)))));
        group.bench_function("ldp_types_encode", |b| b.iter(|| black_box(black_box(&ours).to_vec().unwrap())));
        group.finish();
    }
}
