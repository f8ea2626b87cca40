//! Parse throughput: LLMX text against `serde_json` reading the JSON document of the same messages.
//!
//! Run with: `cargo bench -p ldp-llmx --bench parse`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ldp_llmx::Message;

mod corpus;

/// The same messages in JSON with LLMX's own short field names (`{"HEADER":{"f":..},"blocks":[{"REQ":{"o":..}}]}`),
/// read into mirror structs: the closest JSON equivalent of the LLMX text.
mod short {
    use ldp_llmx::{Block as B, Message, Object, Value};
    use serde::{Deserialize, Serialize};

    type Custom = Object;

    #[derive(Serialize, Deserialize)]
    pub struct Msg {
        #[serde(rename = "HEADER")]
        h: Header,
        blocks: Vec<Block>,
    }
    #[derive(Serialize, Deserialize)]
    struct Header {
        f: String,
        t: String,
        s: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        b: Option<String>,
    }
    #[derive(Serialize, Deserialize)]
    #[allow(clippy::upper_case_acronyms)]
    enum Block {
        CTX {
            p: String,
            #[serde(default)]
            f: Option<Vec<String>>,
            #[serde(default)]
            st: Option<Object>,
            #[serde(default)]
            issue: Option<String>,
        },
        REQ {
            o: String,
            pr: u8,
            #[serde(default)]
            d: Option<Vec<String>>,
            #[serde(default)]
            exp: Option<Vec<String>>,
            #[serde(default, skip_serializing_if = "Object::is_empty")]
            x: Custom,
        },
        PLAN(Vec<Step>),
        ACT {
            #[serde(default)]
            i: Option<String>,
            op: String,
            tgt: String,
            #[serde(default)]
            args: Option<Object>,
        },
        OBS {
            #[serde(default)]
            ai: Option<String>,
            s: String,
            #[serde(default)]
            c: Option<Object>,
            #[serde(default)]
            e: Option<String>,
        },
        BLK {
            w: String,
            a: Vec<String>,
            #[serde(default)]
            esc: Option<bool>,
        },
        ASK {
            q: String,
            o: Vec<String>,
            #[serde(default)]
            def: Option<String>,
        },
        END {
            n: String,
            #[serde(default)]
            t: Option<Vec<String>>,
            #[serde(default)]
            r: Option<Vec<String>>,
            del: Vec<String>,
        },
        RES {
            o: String,
            #[serde(default)]
            msg: Option<String>,
        },
    }
    #[derive(Serialize, Deserialize)]
    struct Step {
        i: Value,
        t: String,
        s: String,
    }

    pub fn from(m: &Message) -> Msg {
        let h = &m.header;
        let blocks = m
            .blocks
            .iter()
            .map(|b| match b.clone() {
                B::Ctx(c) => Block::CTX { p: c.project, f: c.files, st: c.state, issue: c.issue },
                B::Req(r) => Block::REQ {
                    o: r.objective,
                    pr: r.priority.get(),
                    d: r.deps,
                    exp: r.experts,
                    x: r.custom.as_object().clone(),
                },
                B::Plan(p) => Block::PLAN(
                    p.steps
                        .into_iter()
                        .map(|s| Step {
                            i: match s.id {
                                ldp_llmx::StepId::Num(n) => Value::from(i64::try_from(n).unwrap()),
                                ldp_llmx::StepId::Name(n) => Value::Str(n),
                            },
                            t: s.task,
                            s: s.status.code().to_owned(),
                        })
                        .collect(),
                ),
                B::Act(a) => {
                    Block::ACT { i: a.id, op: a.op.as_str().to_owned(), tgt: a.target.to_string(), args: a.args }
                }
                B::Obs(o) => Block::OBS {
                    ai: o.action_id,
                    s: if o.status == ldp_llmx::ObsStatus::Ok { "OK" } else { "ERR" }.to_owned(),
                    c: o.content,
                    e: o.error,
                },
                B::Blk(b) => Block::BLK { w: b.why, a: b.alternatives, esc: b.escalate },
                B::Ask(a) => Block::ASK { q: a.question, o: a.options, def: a.default },
                B::End(e) => Block::END { n: e.next, t: e.tests, r: e.risks, del: e.deliverables },
                B::Res(r) => Block::RES { o: r.option, msg: r.msg },
                other => panic!("not in the corpus: {}", other.type_name()),
            })
            .collect();
        Msg { h: Header { f: h.from.clone(), t: h.to.clone(), s: h.seq, b: h.batch.clone() }, blocks }
    }
}

/// The spec's example messages repeated into one document of about 256 KiB of LLMX.
fn documents() -> (String, String, String, usize) {
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
    let short_json = serde_json::to_string(&parsed.iter().map(short::from).collect::<Vec<_>>()).unwrap();
    assert_eq!(serde_json::from_str::<Vec<short::Msg>>(&short_json).unwrap().len(), n);
    (llmx, json, short_json, n)
}

fn bench(c: &mut Criterion) {
    let (llmx, json, short_json, n) = documents();
    eprintln!(
        "document: {n} messages, LLMX {} bytes, JSON view {} bytes, short-key JSON {} bytes",
        llmx.len(),
        json.len(),
        short_json.len()
    );
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

    g.throughput(Throughput::Bytes(short_json.len() as u64));
    g.bench_function("serde_json_short_keys_typed", |b| {
        b.iter(|| serde_json::from_str::<Vec<short::Msg>>(black_box(&short_json)).unwrap())
    });
    g.bench_function("serde_json_short_keys_value", |b| {
        b.iter(|| serde_json::from_str::<serde_json::Value>(black_box(&short_json)).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
