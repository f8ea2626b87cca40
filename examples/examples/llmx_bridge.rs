//! Run with: cargo run -p ldp-examples --example llmx_bridge
//!
//! An orchestrator that speaks LLMX delegates to an LDP worker: its REQ (with CTX and PLAN) becomes a
//! `TASK_SUBMIT`, the worker's LDP answers come back as LLMX, a malformed message gets the spec's NACK, and a batch
//! of ACTs is matched to OBS blocks that arrive out of order.

use ldp_llmx::{BatchTracker, Block, BridgeConfig, LlmxError, Res, from_ldp, parse, to_ldp, write};
use ldp_types::{Body, Envelope, PayloadMode, Provenance, TaskResult};

const DELEGATION: &str = r#"HEADER:{f:Orchestrator,t:Worker,s:1}
CTX:{p:myapp, f:["src/api.ts","src/db.ts"], issue:"PROJ-123"}
REQ:{o:"implement user authentication", pr:2, exp:["SECURITY-EXPERT"]}
PLAN:[(i:1,t:"analyze requirements",s:C),(i:2,t:"implement core",s:P)]
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. LLMX in, canonical LLMX out.
    let request = parse(DELEGATION)?;
    println!("canonical LLMX ({} bytes):\n{}", write(&request).len(), write(&request));

    // 2. Into the LDP session: one TASK_SUBMIT whose input is a semantic frame.
    let cfg = BridgeConfig::new("550e8400-e29b-41d4-a716-446655440000", "2026-03-09T10:00:00Z");
    let envelopes = to_ldp(&request, &cfg)?;
    let Body::TaskSubmit(submit) = &envelopes[0].body else { return Err("expected TASK_SUBMIT".into()) };
    println!("LDP envelope:\n{}\n", serde_json::to_string_pretty(&envelopes[0].to_value()?)?);

    // 3. A worker that only speaks LDP answers; the orchestrator reads the answer as LLMX.
    let result = Envelope::new(
        "msg-2",
        "2026-03-09T10:00:05Z",
        cfg.session_id.clone(),
        "ldp:delegate:Worker",
        "ldp:delegate:Orchestrator",
        TaskResult::new(
            submit.task_id.clone(),
            serde_json::json!({"summary": "JWT with RS256", "files_changed": 3}),
            Provenance::new("ldp:delegate:Worker", "worker-1", PayloadMode::SemanticFrame),
        ),
    );
    let answer = from_ldp(&[result], &cfg)?;
    println!("the worker's TASK_RESULT as LLMX:\n{}", write(&answer[0]));

    // 4. The LLMX round trip is exact.
    assert_eq!(from_ldp(&envelopes, &cfg)?, vec![request]);

    // 5. A malformed message is answered with the spec's NACK, position included.
    let err: LlmxError = parse("HEADER:{f:Worker,t:Orchestrator,s:2}\nREQ:{pr:2}").err().ok_or("should fail")?;
    let nack = Res::nack(&err);
    println!("NACK for a REQ without o: RES:{{o:{},msg:{:?}}}\n", nack.option, nack.msg.unwrap_or_default());

    // 6. A batch: OBS blocks answer ACTs out of order.
    let batch = parse(
        "HEADER:{f:Orchestrator,t:ALL,s:3,b:B1}\n\
         ACT:{i:A1,op:read,tgt:\"p:src/api.ts#L10-25\"}\n\
         ACT:{i:A2,op:search,tgt:\"p:src/\",args:{q:\"TODO\"}}",
    )?;
    let mut tracker = BatchTracker::new(&batch)?;
    let report =
        tracker.observe(&parse("HEADER:{f:Worker,t:Orchestrator,s:4,b:B1}\nOBS:{ai:A2,s:OK,c:{matches:5}}")?)?;
    println!("matched {:?}, still waiting for {:?}", report.matched, tracker.missing());
    for block in &batch.blocks {
        if let Block::Act(act) = block
            && let Some(path) = act.target.path()
        {
            println!("  {} targets {} lines {:?}", act.id.as_deref().unwrap_or("?"), path.path, path.lines);
        }
    }
    Ok(())
}
