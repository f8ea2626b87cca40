//! The LLMX <-> LDP bridge: what each block becomes, and that the mapping round-trips through real envelope JSON.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp_llmx::bridge::{HEADER_EXTENSION, INPUT_REQUIRED, OBS_ERR_CODE, REQ_TASK_TYPE};
use ldp_llmx::{Block, BridgeConfig, LlmxError, Message, ObsStatus, from_ldp, parse, parse_all, to_ldp};
use ldp_types::{Body, Envelope, ErrorCategory, PayloadMode, SemanticFrame, TaskResult, TaskSubmit};
use serde_json::json;

fn cfg() -> BridgeConfig {
    BridgeConfig::new("sess-1", "2026-03-09T10:00:00Z")
}

/// Through the wire: envelopes are encoded to JSON and decoded again before coming back.
fn wire(envs: &[Envelope]) -> Vec<Envelope> {
    envs.iter().map(|e| Envelope::from_json(&e.to_json().unwrap()).unwrap()).collect()
}

fn round_trip(m: &Message, cfg: &BridgeConfig) -> Vec<Message> {
    from_ldp(&wire(&to_ldp(m, cfg).unwrap()), cfg).unwrap()
}

const DELEGATION: &str = r#"HEADER:{f:Claude,t:Gemini,s:1}
CTX:{p:myapp,f:["src/api.ts","src/db.ts"],st:{phase:"P1",env:"dev"},issue:"PROJ-123"}
REQ:{o:"implement user authentication",pr:2,d:["PROJ-100"],exp:["SECURITY-EXPERT"],x_team:"frontend"}
PLAN:[(i:1,t:"analyze requirements",s:C),(i:2,t:"implement core",s:I),(i:3,t:"write tests",s:P)]
"#;

#[test]
fn req_with_ctx_and_plan_is_one_task_submit_with_a_semantic_frame() {
    let m = parse(DELEGATION).unwrap();
    let envs = to_ldp(&m, &cfg()).unwrap();
    assert_eq!(envs.len(), 1);
    let e = &envs[0];
    assert_eq!((e.from.as_str(), e.to.as_str()), ("ldp:delegate:Claude", "ldp:delegate:Gemini"));
    assert_eq!(e.session_id, "sess-1");
    assert_eq!(e.payload_mode, PayloadMode::SemanticFrame);
    let Body::TaskSubmit(s) = &e.body else { panic!("not TASK_SUBMIT") };
    assert_eq!(s.task_id, "Claude-1");
    // The input is a valid RFC 4.4 semantic frame.
    SemanticFrame::validate(&s.input).unwrap();
    let frame = SemanticFrame::from_input(&s.input).unwrap();
    assert_eq!(frame.task_type, REQ_TASK_TYPE);
    assert_eq!(frame.instruction, "implement user authentication");
    assert_eq!(frame.fields["priority"], json!(2));
    assert_eq!(frame.fields["deps"], json!(["PROJ-100"]));
    assert_eq!(frame.fields["context"]["project"], json!("myapp"));
    assert_eq!(frame.fields["context"]["state"], json!({"phase": "P1", "env": "dev"}));
    assert_eq!(frame.fields["plan"]["steps"][1], json!({"id": 2, "task": "implement core", "status": "I"}));
    assert_eq!(frame.fields["custom"], json!({"x_team": "frontend"}));
    assert_eq!(e.extensions[HEADER_EXTENSION], json!({"from": "Claude", "to": "Gemini", "seq": 1}));
    assert_eq!(round_trip(&m, &cfg()), vec![m]);
}

#[test]
fn batch_id_names_the_task() {
    let m = parse("HEADER:{f:A,t:B,s:9,b:B7}\nREQ:{o:x,pr:1}").unwrap();
    let Body::TaskSubmit(s) = &to_ldp(&m, &cfg()).unwrap()[0].body else { panic!() };
    assert_eq!(s.task_id, "B7");
    let Body::TaskSubmit(s) = &to_ldp(&m, &cfg().with_task_id("task-001")).unwrap()[0].body else { panic!() };
    assert_eq!(s.task_id, "task-001");
}

#[test]
fn end_is_task_result_with_provenance() {
    let m = parse(
        r#"HEADER:{f:Gemini,t:Claude,s:6}
END:{n:"security review",t:["npm test","npm run lint"],r:["needs load testing"],del:["src/auth.ts","src/auth.test.ts"]}"#,
    )
    .unwrap();
    let cfg = cfg().with_task_id("Claude-1");
    let envs = to_ldp(&m, &cfg).unwrap();
    let Body::TaskResult(r) = &envs[0].body else { panic!("not TASK_RESULT") };
    assert_eq!(r.task_id, "Claude-1");
    assert_eq!(r.output.to_value().unwrap()["next"], json!("security review"));
    assert_eq!(r.output.to_value().unwrap()["deliverables"], json!(["src/auth.ts", "src/auth.test.ts"]));
    assert_eq!(r.provenance.produced_by, "ldp:delegate:Gemini");
    assert_eq!(r.provenance.session_id.as_deref(), Some("sess-1"));
    assert_eq!(round_trip(&m, &cfg), vec![m]);
}

#[test]
fn end_without_a_task_id_is_refused() {
    let m = parse("HEADER:{f:Gemini,t:Claude,s:6}\nEND:{n:x,del:[]}").unwrap();
    let e = to_ldp(&m, &cfg()).unwrap_err();
    assert!(matches!(&e, LlmxError::Bridge(msg) if msg.contains("no task id")), "{e}");
}

#[test]
fn obs_ok_and_err_become_result_and_failed_per_action() {
    let m = parse(
        r#"HEADER:{f:Gemini,t:Claude,s:2,b:B1}
OBS:{ai:A1,s:OK,c:{lines:45,modified:true}}
OBS:{ai:A2,s:ERR,e:"file not found: src/missing.ts"}"#,
    )
    .unwrap();
    let envs = to_ldp(&m, &cfg()).unwrap();
    assert_eq!(envs.len(), 2);
    let Body::TaskResult(r) = &envs[0].body else { panic!("not TASK_RESULT") };
    assert_eq!(
        (r.task_id.as_str(), &r.output.to_value().unwrap()["content"]),
        ("A1", &json!({"lines": 45, "modified": true}))
    );
    let Body::TaskFailed(f) = &envs[1].body else { panic!("not TASK_FAILED") };
    assert_eq!(f.task_id, "A2");
    assert_eq!(f.error.code, OBS_ERR_CODE);
    assert_eq!(f.error.category, ErrorCategory::Runtime);
    assert_eq!(f.error.message, "file not found: src/missing.ts");
    // Both envelopes come back as one message, as they were sent.
    assert_eq!(round_trip(&m, &cfg()), vec![m]);
}

#[test]
fn blk_and_ask_are_updates_that_ask_for_input() {
    let m = parse(
        r#"HEADER:{f:Worker,t:Orchestrator,s:5}
BLK:{w:"missing API credentials",a:["use mock","wait for config","skip feature"],esc:true}
ASK:{q:"which auth method?",o:["JWT","session","OAuth2"],def:"JWT"}"#,
    )
    .unwrap();
    let cfg = cfg().with_task_id("Orchestrator-1");
    let envs = to_ldp(&m, &cfg).unwrap();
    let updates: Vec<_> = envs
        .iter()
        .map(|e| match &e.body {
            Body::TaskUpdate(u) => u.clone(),
            other => panic!("not TASK_UPDATE: {other:?}"),
        })
        .collect();
    assert_eq!(updates[0].message.as_deref(), Some("missing API credentials"));
    assert_eq!(updates[0].extra["status"], json!(INPUT_REQUIRED));
    assert_eq!(updates[0].extra["escalate"], json!(true));
    assert_eq!(updates[1].message.as_deref(), Some("which auth method?"));
    assert_eq!(updates[1].extra["options"], json!(["JWT", "session", "OAuth2"]));
    assert_eq!(updates[1].extra["status"], json!(INPUT_REQUIRED));
    assert_eq!(round_trip(&m, &cfg), vec![m]);
}

#[test]
fn lone_plan_reports_progress() {
    let m = parse("HEADER:{f:W,t:O,s:2}\nPLAN:[(i:1,t:a,s:C),(i:2,t:b,s:C),(i:3,t:c,s:I),(i:4,t:d,s:P)]").unwrap();
    let cfg = cfg().with_task_id("O-1");
    let Body::TaskUpdate(u) = &to_ldp(&m, &cfg).unwrap()[0].body else { panic!() };
    assert_eq!(u.progress, Some(0.5));
    assert_eq!(round_trip(&m, &cfg), vec![m]);
}

#[test]
fn act_batch_is_one_submit_per_action() {
    let m = parse(
        r#"HEADER:{f:Claude,t:ALL,s:1,b:B1}
ACT:{i:A1,op:read,tgt:"p:file1.ts"}
ACT:{i:A3,op:search,tgt:"p:src/",args:{q:"TODO"}}"#,
    )
    .unwrap();
    let envs = to_ldp(&m, &cfg()).unwrap();
    let subs: Vec<(String, String)> = envs
        .iter()
        .map(|e| match &e.body {
            Body::TaskSubmit(s) => (s.task_id.clone(), s.skill.clone()),
            _ => panic!(),
        })
        .collect();
    assert_eq!(subs, vec![("A1".into(), "llmx.read".into()), ("A3".into(), "llmx.search".into())]);
    assert_eq!(round_trip(&m, &cfg()), vec![m]);
}

#[test]
fn whole_delegation_flow_round_trips() {
    let ms = parse_all(&format!(
        "{DELEGATION}HEADER:{{f:Gemini,t:Claude,s:2,b:Claude-1}}\nPLAN:[(i:1,t:\"analyze requirements\",s:C)]\n\
         HEADER:{{f:Gemini,t:Claude,s:3,b:Claude-1}}\nEND:{{n:review,del:[\"src/auth.ts\"]}}\n"
    ))
    .unwrap();
    let envs: Vec<Envelope> = ms.iter().flat_map(|m| to_ldp(m, &cfg()).unwrap()).collect();
    let types: Vec<&str> = envs.iter().map(|e| e.body.message_type().unwrap().as_str()).collect();
    assert_eq!(types, vec!["TASK_SUBMIT", "TASK_UPDATE", "TASK_RESULT"]);
    assert_eq!(from_ldp(&wire(&envs), &cfg()).unwrap(), ms);
}

#[test]
fn res_and_lone_ctx_have_no_counterpart() {
    for text in ["HEADER:{f:A,t:B,s:1}\nRES:{o:ACK}", "HEADER:{f:A,t:B,s:1}\nCTX:{p:x}"] {
        assert!(matches!(to_ldp(&parse(text).unwrap(), &cfg()), Err(LlmxError::Bridge(_))), "{text}");
    }
    let two = parse("HEADER:{f:A,t:B,s:1}\nREQ:{o:a,pr:1}\nREQ:{o:b,pr:1}").unwrap();
    assert!(to_ldp(&two, &cfg()).is_err());
}

#[test]
fn envelopes_from_plain_ldp_peers_map_to_the_nearest_block() {
    let submit = Envelope::new(
        "msg-005",
        "2026-03-09T10:00:04Z",
        "sess-1",
        "ldp:delegate:router-alpha",
        "ldp:delegate:qwen3-8b",
        TaskSubmit::new(
            "task-001".into(),
            "reasoning".into(),
            json!({"task_type": "analysis", "instruction": "Compare the tradeoffs", "labels": ["a", null]}),
            None,
        ),
    );
    // A null inside an array has no LLMX form.
    assert!(from_ldp(std::slice::from_ref(&submit), &cfg()).is_err());

    let mut submit = submit;
    let Body::TaskSubmit(s) = &mut submit.body else { panic!() };
    s.input = json!({"task_type": "analysis", "instruction": "Compare the tradeoffs", "hint": null}).into();
    let prov = ldp_types::Provenance::new("ldp:delegate:qwen3-8b", "qwen3-8b-2026.01", PayloadMode::SemanticFrame);
    let result = Envelope::new(
        "msg-006",
        "2026-03-09T10:00:09Z",
        "sess-1",
        "ldp:delegate:qwen3-8b",
        "ldp:delegate:router-alpha",
        TaskResult::new("task-001".into(), json!({"analysis": "monolith first"}), prov),
    );
    let ms = from_ldp(&[submit, result], &cfg()).unwrap();
    assert_eq!(ms.len(), 2);
    assert_eq!(
        (ms[0].header.from.as_str(), ms[0].header.to.as_str(), ms[0].header.seq),
        ("router-alpha", "qwen3-8b", 1)
    );
    let Block::Req(r) = &ms[0].blocks[0] else { panic!("not REQ") };
    assert_eq!(r.objective, "Compare the tradeoffs");
    assert_eq!(r.custom.get("x_skill"), Some(&"reasoning".into()));
    assert_eq!(r.custom.get("x_task_id"), Some(&"task-001".into()));
    let Block::Obs(o) = &ms[1].blocks[0] else { panic!("not OBS") };
    assert_eq!((o.status, o.action_id.as_deref()), (ObsStatus::Ok, Some("task-001")));
    assert_eq!(o.content.as_ref().unwrap().get("analysis"), Some(&"monolith first".into()));
    // Whatever came from LDP can be written and read as LLMX.
    for m in &ms {
        assert_eq!(&parse(&m.to_string()).unwrap(), m);
    }
}
