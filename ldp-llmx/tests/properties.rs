//! Properties: `parse(write(m)) == m` for arbitrary messages, and the parser never panics or hangs on arbitrary or
//! nearly valid input.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use ldp_llmx::*;
use proptest::prelude::*;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z][A-Za-z0-9_]{0,8}",
        Just("true".to_owned()),
        Just("false".to_owned()),
        Just(String::new()),
        "[a-z0-9 ./#:^@*~!?+-]{0,12}",
        any::<String>(),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![4 => "[a-z_][a-z0-9_]{0,6}", 1 => any::<String>()]
}

fn number() -> impl Strategy<Value = Number> {
    prop_oneof![
        any::<i64>().prop_map(Number::from_i64),
        any::<f64>().prop_filter_map("finite", Number::from_f64),
        (-1000i32..1000, 0u32..4).prop_map(|(m, e)| Number::from_f64(f64::from(m) / 10f64.powi(e as i32)).unwrap()),
    ]
}

/// Arbitrary values; `json_safe` leaves out what JSON cannot carry exactly (tuples, and decimals, which
/// `serde_json` without its `float_roundtrip` feature may read back one ulp off).
fn value(json_safe: bool) -> BoxedStrategy<Value> {
    if json_safe {
        let leaf = prop_oneof![
            text().prop_map(Value::Str),
            any::<i64>().prop_map(Value::from),
            any::<bool>().prop_map(Value::Bool),
        ];
        return leaf
            .prop_recursive(4, 48, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                    object_of(inner).prop_map(Value::Object),
                ]
            })
            .boxed();
    }
    let leaf = prop_oneof![
        text().prop_map(Value::Str),
        number().prop_map(Value::Number),
        any::<bool>().prop_map(Value::Bool),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            object_of(inner.clone()).prop_map(Value::Object),
            object_of(inner).prop_map(Value::Tuple),
        ]
    })
    .boxed()
}

fn object_of(v: impl Strategy<Value = Value>) -> impl Strategy<Value = Object> {
    prop::collection::vec((key(), v), 0..5).prop_map(|pairs| pairs.into_iter().collect())
}

fn object(j: bool) -> impl Strategy<Value = Object> {
    object_of(value(j))
}

fn custom(j: bool) -> impl Strategy<Value = CustomFields> {
    prop::collection::vec(
        (prop_oneof!["x_[a-z0-9_]{1,6}", any::<String>().prop_map(|s| format!("x_{s}"))], value(j)),
        0..3,
    )
    .prop_map(|pairs| {
        let mut c = CustomFields::new();
        for (k, v) in pairs {
            c.insert(k, v).unwrap();
        }
        c
    })
}

fn texts() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(text(), 0..4)
}

fn header(j: bool) -> impl Strategy<Value = Header> {
    (text(), text(), any::<u64>(), prop::option::of(text()), custom(j))
        .prop_map(|(from, to, seq, batch, custom)| Header { from, to, seq, batch, custom })
}

fn block(j: bool) -> impl Strategy<Value = Block> {
    let ctx = (text(), prop::option::of(texts()), prop::option::of(object(j)), prop::option::of(text()), custom(j))
        .prop_map(|(project, files, state, issue, custom)| Block::Ctx(Ctx { project, files, state, issue, custom }));
    let req = (text(), 1u8..=5, prop::option::of(texts()), prop::option::of(texts()), custom(j)).prop_map(
        |(objective, p, deps, experts, custom)| {
            Block::Req(Req { objective, priority: Priority::new(p).unwrap(), deps, experts, custom })
        },
    );
    let status = prop_oneof![
        Just(StepStatus::Pending),
        Just(StepStatus::InProgress),
        Just(StepStatus::Completed),
        Just(StepStatus::Cancelled)
    ];
    let step_id = prop_oneof![any::<u64>().prop_map(StepId::Num), text().prop_map(StepId::Name)];
    let plan = prop::collection::vec((step_id, text(), status, custom(j)), 0..4).prop_map(|steps| {
        Block::Plan(Plan {
            steps: steps.into_iter().map(|(id, task, status, custom)| PlanStep { id, task, status, custom }).collect(),
        })
    });
    let op = prop_oneof![
        Just(Operation::Read),
        Just(Operation::Write),
        Just(Operation::Edit),
        Just(Operation::Shell),
        Just(Operation::Search),
        Just(Operation::Spawn)
    ];
    let act = (prop::option::of(text()), op, text(), prop::option::of(object(j)), custom(j))
        .prop_map(|(id, op, tgt, args, custom)| Block::Act(Act { id, op, target: Target::from(tgt), args, custom }));
    let obs =
        (prop::option::of(text()), any::<bool>(), prop::option::of(object(j)), prop::option::of(text()), custom(j))
            .prop_map(|(action_id, ok, content, error, custom)| {
                // Content is required for OK (see the Obs docs).
                let (status, content) =
                    if ok { (ObsStatus::Ok, Some(content.unwrap_or_default())) } else { (ObsStatus::Err, content) };
                Block::Obs(Obs { action_id, status, content, error, custom })
            });
    let blk = (text(), texts(), prop::option::of(any::<bool>()), custom(j))
        .prop_map(|(why, alternatives, escalate, custom)| Block::Blk(Blk { why, alternatives, escalate, custom }));
    let ask = (text(), texts(), prop::option::of(text()), custom(j))
        .prop_map(|(question, options, default, custom)| Block::Ask(Ask { question, options, default, custom }));
    let end = (text(), prop::option::of(texts()), prop::option::of(texts()), texts(), custom(j)).prop_map(
        |(next, tests, risks, deliverables, custom)| Block::End(End { next, tests, risks, deliverables, custom }),
    );
    let res = (text(), prop::option::of(text()), custom(j))
        .prop_map(|(option, msg, custom)| Block::Res(Res { option, msg, custom }));
    let ext = (
        prop_oneof!["X_[A-Z0-9_]{1,6}", "[A-Z][A-Za-z0-9_]{0,6}"],
        prop_oneof![
            object(j).prop_map(BlockBody::Object),
            prop::collection::vec(value(j), 0..4).prop_map(BlockBody::Array)
        ],
    )
        .prop_filter_map("standard names are typed", |(name, body)| {
            ExtensionBlock::new(name, body).ok().map(Block::Extension)
        });
    prop_oneof![ctx, req, plan, act, obs, blk, ask, end, res, ext]
}

fn message() -> impl Strategy<Value = Message> {
    (header(false), prop::collection::vec(block(false), 1..5)).prop_map(|(header, blocks)| Message { header, blocks })
}

/// Parses with a generous wall-clock bound, so a hang shows up as a failure rather than a stuck test.
fn parse_bounded(bytes: &[u8]) -> Result<Vec<Message>, LlmxError> {
    let start = Instant::now();
    let r = Parser::new().parse_bytes(bytes);
    assert!(start.elapsed() < Duration::from_secs(2), "parse took {:?} on {} bytes", start.elapsed(), bytes.len());
    r
}

const SEEDS: &[&str] = &[
    "HEADER:{f:Claude,t:Gemini,s:1}\nREQ:{o:\"implement auth\",pr:2,d:[\"PROJ-100\"]}",
    "HEADER:{f:A,t:ALL,s:1,b:B1}\nACT:{i:A1,op:edit,tgt:\"p:src/auth.ts#L42\",args:{action:\"add\"}}",
    "HEADER:{f:A,t:B,s:2}\nPLAN:[(i:1,t:\"analyze\",s:C),(i:2,t:\"impl\",s:I)]\nOBS:{ai:A1,s:OK,c:{lines:45,ok:true}}",
    "HEADER:{f:A,t:B,s:3}\nX_M:{a:[1,-2.5,(k:v)],\"q k\":\"\\u00e9\\n\"}\nEND:{n:x,del:[]}",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn write_then_parse_is_identity(m in message()) {
        let text = write(&m);
        let back = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(&back, &m, "{}", text);
        // Canonical text is a fixed point.
        prop_assert_eq!(write(&back), text);
    }

    #[test]
    fn compact_style_round_trips_too(m in message()) {
        let text = ldp_llmx::write_with(&m, ldp_llmx::WriteStyle::Compact);
        let back = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(&back, &m, "{}", text);
    }

    /// The streaming reader, fed in arbitrary read sizes, gives exactly what `parse_all` gives on the whole text.
    #[test]
    fn reader_matches_parse_all(ms in proptest::collection::vec(message(), 0..4), sep in "[ \n]{0,2}", cut in 1usize..9) {
        let text: String = ms.iter().map(|m| write(m) + &sep).collect();
        let streamed: Vec<Message> = ldp_llmx::Parser::new()
            .reader(Chunked(text.as_bytes(), cut))
            .collect::<Result<_, _>>()
            .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(&streamed, &ms);
    }

    #[test]
    fn json_view_round_trips_typed_fields(m in message()) {
        // The JSON view drops only the tuple/object distinction inside generic values; typed fields survive.
        let json = serde_json::to_string(&m).unwrap();
        let back: Message = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(
            (&back.header.from, &back.header.to, back.header.seq, &back.header.batch),
            (&m.header.from, &m.header.to, m.header.seq, &m.header.batch)
        );
        let names = |m: &Message| m.blocks.iter().map(|b| b.type_name().to_owned()).collect::<Vec<_>>();
        prop_assert_eq!(names(&back), names(&m));
    }

    #[test]
    fn never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_bounded(&bytes);
    }

    #[test]
    fn never_panics_on_near_valid_input(
        seed in 0..SEEDS.len(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..4, any::<u8>()), 1..6),
    ) {
        let mut bytes = SEEDS[seed].as_bytes().to_vec();
        for (at, kind, b) in edits {
            if bytes.is_empty() { break; }
            let i = at.index(bytes.len());
            match kind {
                0 => { bytes.remove(i); }
                1 => bytes.insert(i, b),
                2 => bytes[i] = b,
                // Punctuation is where the grammar branches.
                _ => bytes.insert(i, b"{}[]():,\"\\-."[usize::from(b) % 12]),
            }
        }
        if let Err(e) = parse_bounded(&bytes) {
            // Every parse error carries a position inside the text (or just past its end).
            let p = e.position().unwrap();
            prop_assert!(p.line as usize <= bytes.iter().filter(|&&b| b == b'\n').count() + 1);
            let nack = Res::nack(&e);
            prop_assert!(nack.msg.unwrap().starts_with("parse error: "));
        }
    }

    #[test]
    fn never_hangs_on_large_repetitive_input(unit in "[\\[({\"a:,0-]{1,3}", n in 1000usize..20000) {
        let text = format!("HEADER:{{f:A,t:B,s:1}}\nX_A:{{v:{}", unit.repeat(n));
        let _ = parse_bounded(text.as_bytes());
    }

    #[test]
    fn targets_decode_without_panicking(s in any::<String>()) {
        let t = Target::from(s.clone());
        let _ = t.shortcuts();
        let _ = t.resource();
        prop_assert_eq!(t.as_str(), s.as_str());
        let _ = SafeRoot::new("/r").resolve(&s);
    }

    #[test]
    fn resolved_paths_stay_under_root(segs in prop::collection::vec(prop_oneof!["\\.\\.", "\\^", "[a-z]{1,3}", "\\."], 0..8)) {
        let path = segs.join("/");
        if let Ok(p) = SafeRoot::new("/root").resolve(&path) {
            prop_assert!(p.starts_with("/root"));
            prop_assert!(p.components().all(|c| !matches!(c, std::path::Component::ParentDir)));
        }
    }
}

#[test]
fn wide_objects_stay_linear_in_both_parsers() {
    let n = 50_000;
    let llmx =
        format!("HEADER:{{f:A,t:B,s:1}}\nX_W:{{{}}}", (0..n).map(|i| format!("k{i}:1")).collect::<Vec<_>>().join(","));
    let json = format!("{{{}}}", (0..n).map(|i| format!("\"k{i}\":1")).collect::<Vec<_>>().join(","));
    let start = Instant::now();
    assert!(parse(&llmx).is_ok());
    let v: Value = serde_json::from_str(&json).unwrap();
    assert!(matches!(v, Value::Object(o) if o.len() == n));
    let dup = format!("{{{},\"k7\":2}}", (0..n).map(|i| format!("\"k{i}\":1")).collect::<Vec<_>>().join(","));
    assert!(serde_json::from_str::<Value>(&dup).is_err());
    assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
}

fn only(kind: &'static str) -> impl Strategy<Value = Block> {
    block(true).prop_filter(kind, move |b| b.type_name() == kind)
}

/// Messages of the shapes the bridge maps: a REQ with its CTX and PLAN, or answers (ACT, END, OBS, BLK, ASK, PLAN).
fn bridgeable() -> impl Strategy<Value = Message> {
    let req = (header(true), prop::option::of(only("CTX")), only("REQ"), prop::option::of(only("PLAN"))).prop_map(
        |(header, ctx, req, plan)| Message { header, blocks: ctx.into_iter().chain([req]).chain(plan).collect() },
    );
    let answers = (
        header(true),
        prop::collection::vec(
            block(true)
                .prop_filter("answers", |b| ["ACT", "END", "OBS", "BLK", "ASK", "PLAN"].contains(&b.type_name())),
            1..4,
        ),
    )
        .prop_map(|(header, blocks)| Message { header, blocks });
    prop_oneof![req, answers]
}

#[test]
fn bridge_round_trips_through_envelope_json() {
    // Building these nested strategies takes more than the 2 MiB test-thread stack in unoptimised builds.
    let run = || {
        let mut runner =
            proptest::test_runner::TestRunner::new(ProptestConfig { cases: 256, ..ProptestConfig::default() });
        let result = runner.run(&bridgeable(), |m| {
            let cfg = BridgeConfig::new("s-1", "2026-03-09T10:00:00Z").with_task_id("task-1");
            let envelopes = to_ldp(&m, &cfg).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let wire: Vec<ldp_types::Envelope> =
                envelopes.iter().map(|e| ldp_types::Envelope::from_json(&e.to_json().unwrap()).unwrap()).collect();
            let back = from_ldp(&wire, &cfg).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(back, vec![m]);
            Ok(())
        });
        if let Err(e) = result {
            panic!("{e}");
        }
    };
    std::thread::Builder::new().stack_size(64 << 20).spawn(run).unwrap().join().unwrap();
}

/// A reader that hands out at most `.1` bytes per read.
struct Chunked<'a>(&'a [u8], usize);

impl std::io::Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.1.min(buf.len()).min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}
