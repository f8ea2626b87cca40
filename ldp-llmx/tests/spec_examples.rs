//! Every example block of llmx-v1.md, parsed and checked against what the spec says it means.
//!
//! Example blocks that are not headers are parsed under a fixed header, since the spec shows them on their own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp_llmx::{
    Block, Lines, Message, Number, ObsStatus, OpShortcut, Operation, PathRef, Resource, StepId, StepStatus, Target,
    Value, parse, parse_all, write,
};

const H: &str = "HEADER:{f:A,t:B,s:1}\n";

fn block(text: &str) -> Block {
    let mut m = parse(&format!("{H}{text}")).unwrap_or_else(|e| panic!("{text}: {e}"));
    assert_eq!(m.blocks.len(), 1, "{text}");
    m.blocks.remove(0)
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

fn assert_round_trip(m: &Message) {
    assert_eq!(&parse(&write(m)).unwrap(), m);
}

#[test]
fn section_3_1_header_examples() {
    let m = parse("HEADER:{f:Claude,t:Gemini,s:1}\nRES:{o:ACK}").unwrap();
    assert_eq!((m.header.from.as_str(), m.header.to.as_str(), m.header.seq), ("Claude", "Gemini", 1));
    assert_eq!(m.header.batch, None);

    let m = parse("HEADER:{f:Orchestrator,t:ALL,s:42,b:B1}\nRES:{o:ACK}").unwrap();
    assert_eq!((m.header.from.as_str(), m.header.to.as_str(), m.header.seq), ("Orchestrator", "ALL", 42));
    assert_eq!(m.header.batch.as_deref(), Some("B1"));
}

#[test]
fn section_3_2_ctx_example() {
    let Block::Ctx(c) =
        block(r#"CTX:{p:myapp,f:["src/api.ts","src/db.ts"],st:{phase:"P1",env:"dev"},issue:"PROJ-123"}"#)
    else {
        panic!("not CTX")
    };
    assert_eq!(c.project, "myapp");
    assert_eq!(c.files, Some(strs(&["src/api.ts", "src/db.ts"])));
    let st = c.state.unwrap();
    assert_eq!(st.get("phase"), Some(&Value::from("P1")));
    assert_eq!(st.get("env"), Some(&Value::from("dev")));
    assert_eq!(st.len(), 2);
    assert_eq!(c.issue.as_deref(), Some("PROJ-123"));
}

#[test]
fn section_3_3_req_example() {
    let Block::Req(r) = block(r#"REQ:{o:"implement user authentication",pr:2,d:["PROJ-100"],exp:["SECURITY-EXPERT"]}"#)
    else {
        panic!("not REQ")
    };
    assert_eq!(r.objective, "implement user authentication");
    assert_eq!(r.priority.get(), 2);
    assert_eq!(r.deps, Some(strs(&["PROJ-100"])));
    assert_eq!(r.experts, Some(strs(&["SECURITY-EXPERT"])));
    assert!(r.custom.is_empty());
}

#[test]
fn section_3_4_plan_example() {
    let Block::Plan(p) =
        block(r#"PLAN:[(i:1,t:"analyze requirements",s:C),(i:2,t:"implement core",s:I),(i:3,t:"write tests",s:P)]"#)
    else {
        panic!("not PLAN")
    };
    let got: Vec<_> = p.steps.iter().map(|s| (s.id.clone(), s.task.as_str(), s.status)).collect();
    assert_eq!(
        got,
        vec![
            (StepId::Num(1), "analyze requirements", StepStatus::Completed),
            (StepId::Num(2), "implement core", StepStatus::InProgress),
            (StepId::Num(3), "write tests", StepStatus::Pending),
        ]
    );
}

#[test]
fn section_3_4_plan_status_x_and_string_ids() {
    let Block::Plan(p) = block(r#"PLAN:[(i:s1,t:"drop",s:X)]"#) else { panic!("not PLAN") };
    assert_eq!(p.steps[0].id, StepId::Name("s1".into()));
    assert_eq!(p.steps[0].status, StepStatus::Cancelled);
}

#[test]
fn section_3_5_act_examples() {
    let Block::Act(a) = block(r#"ACT:{i:A1,op:edit,tgt:"p:src/auth.ts#L42",args:{action:"add validation"}}"#) else {
        panic!("not ACT")
    };
    assert_eq!(a.id.as_deref(), Some("A1"));
    assert_eq!(a.op, Operation::Edit);
    assert_eq!(a.target.path(), Some(PathRef { path: "src/auth.ts", lines: Some(Lines::Line(42)) }));
    assert_eq!(a.args.unwrap().get("action"), Some(&Value::from("add validation")));

    let Block::Act(a) = block(r#"ACT:{op:shell,tgt:"npm test"}"#) else { panic!("not ACT") };
    assert_eq!((a.id, a.op), (None, Operation::Shell));
    assert_eq!(a.target.resource(), Resource::Other("npm test"));
}

#[test]
fn section_3_5_every_operation() {
    for (name, op) in [
        ("read", Operation::Read),
        ("write", Operation::Write),
        ("edit", Operation::Edit),
        ("shell", Operation::Shell),
        ("search", Operation::Search),
        ("spawn", Operation::Spawn),
    ] {
        let Block::Act(a) = block(&format!("ACT:{{op:{name},tgt:x}}")) else { panic!("not ACT") };
        assert_eq!(a.op, op);
    }
}

#[test]
fn section_3_6_obs_examples() {
    let Block::Obs(o) = block("OBS:{ai:A1,s:OK,c:{lines:45,modified:true}}") else { panic!("not OBS") };
    assert_eq!((o.action_id.as_deref(), o.status), (Some("A1"), ObsStatus::Ok));
    let c = o.content.unwrap();
    assert_eq!(c.get("lines"), Some(&Value::Number(Number::from_i64(45))));
    assert_eq!(c.get("modified"), Some(&Value::Bool(true)));

    let Block::Obs(o) = block(r#"OBS:{ai:A2,s:ERR,e:"file not found: src/missing.ts"}"#) else { panic!("not OBS") };
    assert_eq!((o.action_id.as_deref(), o.status), (Some("A2"), ObsStatus::Err));
    assert_eq!(o.content, None);
    assert_eq!(o.error.as_deref(), Some("file not found: src/missing.ts"));
}

#[test]
fn section_3_7_blk_example() {
    let Block::Blk(b) =
        block(r#"BLK:{w:"missing API credentials",a:["use mock","wait for config","skip feature"],esc:true}"#)
    else {
        panic!("not BLK")
    };
    assert_eq!(b.why, "missing API credentials");
    assert_eq!(b.alternatives, strs(&["use mock", "wait for config", "skip feature"]));
    assert_eq!(b.escalate, Some(true));
}

#[test]
fn section_3_8_ask_example() {
    let Block::Ask(a) = block(r#"ASK:{q:"which auth method?",o:["JWT","session","OAuth2"],def:"JWT"}"#) else {
        panic!("not ASK")
    };
    assert_eq!(a.question, "which auth method?");
    assert_eq!(a.options, strs(&["JWT", "session", "OAuth2"]));
    assert_eq!(a.default.as_deref(), Some("JWT"));
}

#[test]
fn section_3_9_end_example() {
    let Block::End(e) = block(
        r#"END:{n:"security review",t:["npm test","npm run lint"],r:["needs load testing"],del:["src/auth.ts","src/auth.test.ts"]}"#,
    ) else {
        panic!("not END")
    };
    assert_eq!(e.next, "security review");
    assert_eq!(e.tests, Some(strs(&["npm test", "npm run lint"])));
    assert_eq!(e.risks, Some(strs(&["needs load testing"])));
    assert_eq!(e.deliverables, strs(&["src/auth.ts", "src/auth.test.ts"]));
}

#[test]
fn section_3_10_res_examples() {
    let Block::Res(r) = block(r#"RES:{o:"ACK",msg:"proceeding with implementation"}"#) else { panic!("not RES") };
    assert_eq!((r.option.as_str(), r.msg.as_deref()), ("ACK", Some("proceeding with implementation")));
    let Block::Res(r) = block(r#"RES:{o:"JWT",msg:"will use RS256 signing"}"#) else { panic!("not RES") };
    assert_eq!((r.option.as_str(), r.msg.as_deref()), ("JWT", Some("will use RS256 signing")));
}

#[test]
fn section_4_1_path_shortcuts() {
    assert_eq!(PathRef::parse("p:src/api.ts"), PathRef { path: "src/api.ts", lines: None });
    assert_eq!(PathRef::parse("p:file.ts#L42"), PathRef { path: "file.ts", lines: Some(Lines::Line(42)) });
    let r = PathRef::parse("p:file.ts#L10-25");
    assert_eq!(r, PathRef { path: "file.ts", lines: Some(Lines::Range(10, 25)) });
    assert_eq!((r.lines.unwrap().start(), r.lines.unwrap().end()), (10, 25));
    assert_eq!(Target::from("^/src").path().unwrap().expanded(), "../src");
    assert_eq!(PathRef::parse("^/^/lib").expanded(), "../../lib");
}

#[test]
fn section_4_2_operation_shortcuts() {
    let expected = [
        ('+', OpShortcut::Add),
        ('-', OpShortcut::Remove),
        ('~', OpShortcut::Modify),
        ('?', OpShortcut::Query),
        ('!', OpShortcut::Force),
        ('*', OpShortcut::All),
        ('@', OpShortcut::Reference),
    ];
    for (c, op) in expected {
        let t = Target::from(format!("{c}p:src/x.ts"));
        assert_eq!(t.shortcuts(), vec![op], "{c}");
        assert_eq!(t.path().unwrap().path, "src/x.ts");
        assert_eq!(op.as_char(), c);
    }
    let t = Target::from("!+p:new.ts#L3");
    assert_eq!(t.shortcuts(), vec![OpShortcut::Force, OpShortcut::Add]);
    assert_eq!(t.path().unwrap().lines, Some(Lines::Line(3)));
    assert_eq!(Target::from("*").resource(), Resource::Empty);
    assert_eq!(Target::from("*").shortcuts(), vec![OpShortcut::All]);
}

#[test]
fn section_5_1_batch_request() {
    let m = parse(
        r#"HEADER:{f:Claude,t:ALL,s:1,b:B1}
ACT:{i:A1,op:read,tgt:"p:file1.ts"}
ACT:{i:A2,op:read,tgt:"p:file2.ts"}
ACT:{i:A3,op:search,tgt:"p:src/",args:{q:"TODO"}}"#,
    )
    .unwrap();
    assert_eq!(m.header.batch.as_deref(), Some("B1"));
    let ids: Vec<_> = m
        .blocks
        .iter()
        .map(|b| match b {
            Block::Act(a) => (a.id.clone().unwrap(), a.op, a.target.path().unwrap().path.to_owned()),
            _ => panic!("not ACT"),
        })
        .collect();
    assert_eq!(
        ids,
        vec![
            ("A1".into(), Operation::Read, "file1.ts".into()),
            ("A2".into(), Operation::Read, "file2.ts".into()),
            ("A3".into(), Operation::Search, "src/".into()),
        ]
    );
    assert_round_trip(&m);
}

#[test]
fn section_5_2_batch_response_out_of_order() {
    let req = parse(
        "HEADER:{f:Claude,t:ALL,s:1,b:B1}\nACT:{i:A1,op:read,tgt:\"p:file1.ts\"}\nACT:{i:A2,op:read,tgt:\"p:file2.ts\"}\nACT:{i:A3,op:search,tgt:\"p:src/\",args:{q:\"TODO\"}}",
    )
    .unwrap();
    let resp = parse(
        "HEADER:{f:Gemini,t:Claude,s:2,b:B1}\nOBS:{ai:A1,s:OK,c:{lines:100}}\nOBS:{ai:A3,s:OK,c:{matches:5}}\nOBS:{ai:A2,s:OK,c:{lines:50}}",
    )
    .unwrap();
    let mut t = ldp_llmx::BatchTracker::new(&req).unwrap();
    let r = t.observe(&resp).unwrap();
    assert_eq!(r.matched, vec!["A1", "A3", "A2"]);
    assert!(r.unknown.is_empty() && r.duplicates.is_empty());
    assert!(t.is_complete());
    // Pairs come back in request order, whatever the arrival order.
    let lines: Vec<_> = t
        .pairs()
        .map(|(a, o)| {
            let c = o.unwrap().content.as_ref().unwrap();
            (a.id.clone().unwrap(), c.iter().next().map(|(k, v)| (k.to_owned(), v.clone())).unwrap())
        })
        .collect();
    assert_eq!(lines[0], ("A1".into(), ("lines".into(), Value::from(100))));
    assert_eq!(lines[1], ("A2".into(), ("lines".into(), Value::from(50))));
    assert_eq!(lines[2], ("A3".into(), ("matches".into(), Value::from(5))));
}

#[test]
fn section_6_task_delegation_flow_as_one_file() {
    // Section 6.2: orchestrator sends HEADER + CTX + REQ + PLAN; the worker answers with a PLAN update and an END.
    let ms = parse_all(
        r#"HEADER:{f:Orchestrator,t:Worker,s:1}
CTX:{p:myapp}
REQ:{o:"implement auth",pr:2}
PLAN:[(i:1,t:"analyze",s:P)]

HEADER:{f:Worker,t:Orchestrator,s:2}
PLAN:[(i:1,t:"analyze",s:C)]

HEADER:{f:Worker,t:Orchestrator,s:3}
END:{n:"review",del:["src/auth.ts"]}
"#,
    )
    .unwrap();
    let types: Vec<Vec<&str>> = ms.iter().map(|m| m.blocks.iter().map(Block::type_name).collect()).collect();
    assert_eq!(types, vec![vec!["CTX", "REQ", "PLAN"], vec!["PLAN"], vec!["END"]]);
    assert_eq!(ms.iter().map(|m| m.header.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
}

#[test]
fn section_7_1_error_observation() {
    let Block::Obs(o) = block(r#"OBS:{ai:A1,s:ERR,e:"permission denied"}"#) else { panic!("not OBS") };
    assert_eq!((o.status, o.error.as_deref()), (ObsStatus::Err, Some("permission denied")));
}

#[test]
fn section_7_2_nack_for_missing_field() {
    let err = parse(&format!("{H}REQ:{{pr:2}}")).unwrap_err();
    let nack = ldp_llmx::Res::nack(&err);
    assert_eq!(nack.option, "NACK");
    let msg = nack.msg.unwrap();
    assert!(msg.starts_with("parse error: missing required field 'o' in REQ"), "{msg}");
    assert!(msg.ends_with("at line 2, column 1"), "{msg}");
    // The NACK itself is the spec's example block.
    let Block::Res(r) = block(r#"RES:{o:"NACK",msg:"parse error: missing required field 'o' in REQ"}"#) else {
        panic!("not RES")
    };
    assert_eq!(r.option, "NACK");
}

#[test]
fn section_7_3_unknown_type_gets_warning() {
    let m = parse(&format!("{H}CUSTOM:{{a:1}}\nRES:{{o:ACK}}")).unwrap();
    let w = m.warnings();
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].option, "WARN");
    assert_eq!(w[0].msg.as_deref(), Some("unknown message type: CUSTOM ignored"));
    // The spec's example warning parses too.
    let Block::Res(r) = block(r#"RES:{o:"WARN",msg:"unknown message type: CUSTOM ignored"}"#) else {
        panic!("not RES")
    };
    assert_eq!(r, w[0]);
}

#[test]
fn section_8_1_custom_type_kept_without_warning() {
    let Block::Extension(e) = block(r#"X_METRICS:{tokens:1200,model:"gpt",tags:[a,b]}"#) else { panic!("not ext") };
    assert_eq!(e.name(), "X_METRICS");
    assert!(e.is_custom());
    let ldp_llmx::BlockBody::Object(o) = e.body() else { panic!("not object") };
    assert_eq!(o.get("tokens"), Some(&Value::from(1200)));
    assert_eq!(o.get("tags"), Some(&Value::Array(vec![Value::from("a"), Value::from("b")])));
    let m = parse(&format!("{H}X_METRICS:{{tokens:1}}")).unwrap();
    assert!(m.warnings().is_empty());
}

#[test]
fn section_8_2_custom_fields() {
    let Block::Req(r) = block(r#"REQ:{o:"task",pr:2,x_team:"frontend",x_deadline:"2024-01-15"}"#) else {
        panic!("not REQ")
    };
    assert_eq!((r.objective.as_str(), r.priority.get()), ("task", 2));
    let custom: Vec<_> = r.custom.iter().map(|(k, v)| (k.to_owned(), v.clone())).collect();
    assert_eq!(
        custom,
        vec![("x_team".into(), Value::from("frontend")), ("x_deadline".into(), Value::from("2024-01-15"))]
    );
}

#[test]
fn section_9_2_path_traversal() {
    let root = ldp_llmx::SafeRoot::new("/repo");
    assert_eq!(root.resolve("p:src/api.ts#L42").unwrap(), std::path::PathBuf::from("/repo/src/api.ts"));
    assert_eq!(root.resolve("src/../lib/a.ts").unwrap(), std::path::PathBuf::from("/repo/lib/a.ts"));
    for bad in ["../etc/passwd", "p:../../x", "^/x", "/etc/passwd", "src/../../x", "..\\x", "C:\\x", "a\0b"] {
        assert!(
            matches!(root.resolve(bad), Err(ldp_llmx::LlmxError::PathEscapesRoot { .. })),
            "{bad:?} should be rejected"
        );
    }
    // `^` climbs out of a base directory but not out of the root.
    assert_eq!(root.resolve_from("src/auth", "^/util.ts").unwrap(), std::path::PathBuf::from("/repo/src/util.ts"));
    assert!(root.resolve_from("src", "^/^/x").is_err());
}

#[test]
fn all_examples_round_trip_through_the_writer() {
    let text = include_str!("data/llmx-v1.md");
    let mut n = 0;
    for line in text.lines() {
        let l = line.trim();
        let is_block = l.split_once(':').is_some_and(|(t, rest)| {
            !t.is_empty()
                && t.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
                && (rest.starts_with('{') || rest.starts_with('['))
        });
        // Skip the schematic lines (`REQ:{o:OBJECTIVE,...}`) that describe shapes rather than messages.
        if !is_block || l.contains("...") || l.contains("?:") || l.contains("X_TYPENAME") {
            continue;
        }
        let src = if l.starts_with("HEADER:") { format!("{l}\nRES:{{o:ACK}}") } else { format!("{H}{l}") };
        let m = parse(&src).unwrap_or_else(|e| panic!("{l}: {e}"));
        assert_round_trip(&m);
        n += 1;
    }
    // 2 HEADER + CTX + REQ + PLAN + 2 ACT + 2 OBS + BLK + ASK + END + 2 RES + 4 + 3 batch + OBS + NACK + WARN + REQ.
    assert!(n >= 25, "only {n} example lines found");
}

#[test]
fn section_2_3_data_types() {
    let Block::Extension(e) = block(
        r#"X_TYPES:{s:"review code",n:42,neg:-7,dec:-2.5,b:true,f:false,a:["file1","file2"],o:{status:"ok"},e:P}"#,
    ) else {
        panic!("not an extension block")
    };
    let ldp_llmx::BlockBody::Object(o) = e.body() else { panic!("not an object") };
    assert_eq!(o.get("s"), Some(&Value::from("review code")));
    assert_eq!(o.get("n"), Some(&Value::from(42)));
    assert_eq!(o.get("neg"), Some(&Value::from(-7)));
    assert_eq!(o.get("dec"), Some(&Value::Number(Number::from_f64(-2.5).unwrap())));
    assert_eq!((o.get("b"), o.get("f")), (Some(&Value::Bool(true)), Some(&Value::Bool(false))));
    assert_eq!(o.get("a"), Some(&Value::Array(vec![Value::from("file1"), Value::from("file2")])));
    let Some(Value::Object(inner)) = o.get("o") else { panic!("not an object") };
    assert_eq!(inner.get("status"), Some(&Value::from("ok")));
    // An enum value is a bare identifier.
    assert_eq!(o.get("e"), Some(&Value::from("P")));
}

#[test]
fn section_2_2_whitespace_and_line_breaks_between_blocks() {
    let tight = parse("HEADER:{f:A,t:B,s:1}REQ:{o:x,pr:1}RES:{o:ACK}").unwrap();
    let loose = parse("\r\n  HEADER:{f:A,t:B,s:1}\n\n\t REQ:{ o : x , pr : 1 }\r\n\nRES:{o:ACK}\n\n").unwrap();
    assert_eq!(tight, loose);
    assert_eq!(tight.blocks.len(), 2);
}

#[test]
fn section_5_batch_reports_unknown_duplicate_and_missing_ids() {
    let req = parse(
        "HEADER:{f:Claude,t:ALL,s:1,b:B1}\nACT:{i:A1,op:read,tgt:\"p:a.ts\"}\nACT:{i:A2,op:read,tgt:\"p:b.ts\"}\n\
         ACT:{i:A3,op:read,tgt:\"p:c.ts\"}",
    )
    .unwrap();
    let mut t = ldp_llmx::BatchTracker::new(&req).unwrap();
    assert_eq!(t.batch_id(), Some("B1"));
    let r = t
        .observe(
            &parse(
                "HEADER:{f:Gemini,t:Claude,s:2,b:B1}\nOBS:{ai:A3,s:OK,c:{}}\nOBS:{ai:A9,s:OK,c:{}}\n\
                 OBS:{s:ERR,e:\"which one?\"}\nOBS:{ai:A3,s:ERR,e:again}",
            )
            .unwrap(),
        )
        .unwrap();
    assert_eq!(r.matched, vec!["A3"]);
    assert_eq!(r.unknown, vec!["A9"]);
    assert_eq!(r.duplicates, vec!["A3"]);
    assert_eq!(r.unattributed, 1);
    // The first answer is kept; the others are still missing, in request order.
    assert_eq!(t.pairs().nth(2).unwrap().1.unwrap().status, ObsStatus::Ok);
    assert_eq!(t.missing(), vec!["A1", "A2"]);
    assert!(!t.is_complete());

    // A response from another batch is refused whole.
    let other = parse("HEADER:{f:Gemini,t:Claude,s:3,b:B2}\nOBS:{ai:A1,s:OK,c:{}}").unwrap();
    assert!(matches!(t.observe(&other), Err(ldp_llmx::LlmxError::Batch(_))));
    assert_eq!(t.missing(), vec!["A1", "A2"]);

    // ACTs in a batch need unique ids.
    for bad in [
        "HEADER:{f:A,t:ALL,s:1,b:B}\nACT:{op:read,tgt:x}",
        "HEADER:{f:A,t:ALL,s:1,b:B}\nACT:{i:A1,op:read,tgt:x}\nACT:{i:A1,op:read,tgt:y}",
    ] {
        assert!(matches!(ldp_llmx::BatchTracker::new(&parse(bad).unwrap()), Err(ldp_llmx::LlmxError::Batch(_))));
    }
}
