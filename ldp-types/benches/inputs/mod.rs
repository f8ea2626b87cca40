//! The messages measured by the `codec` bench and looped by the `codec_loop` example.
#![allow(dead_code)]

use serde_json::{Value, json};

/// Message 5 of the RFC transcript (the TASK_SUBMIT), without the fixture's `_comment`.
pub fn flow_submit() -> Value {
    let flow: Vec<Value> = serde_json::from_str(include_str!("../../tests/fixtures/ldp-session-flow.json")).unwrap();
    let mut submit = flow[4].clone();
    submit.as_object_mut().unwrap().remove("_comment");
    submit
}

/// Message 6 of the RFC transcript (the TASK_RESULT with provenance), without the fixture's `_comment`.
pub fn flow_result() -> Value {
    let flow: Vec<Value> = serde_json::from_str(include_str!("../../tests/fixtures/ldp-session-flow.json")).unwrap();
    let mut result = flow[5].clone();
    result.as_object_mut().unwrap().remove("_comment");
    assert_eq!(result["body"]["type"], "TASK_RESULT");
    result
}

/// The paper's contract example (section 3.1), with the `created_at` the reference crate requires.
pub fn paper_contract() -> Value {
    json!({
        "contract_id": "ctr-7f3a9c2e-4b1d-4e8a-9f6c-2d5e8a1b3c7f",
        "objective": "Summarize the quarterly report",
        "success_criteria": ["<=300 words", "include revenue figures"],
        "policy": {
            "failure_policy": "fail_closed",
            "budget": {"max_tokens": 6000, "max_cost_usd": 0.05},
            "safety_constraints": ["no speculative projections"],
            "max_delegation_depth": 2
        },
        "deadline": "2026-03-15T18:00:00Z",
        "created_at": "2026-03-15T10:00:00Z"
    })
}

/// A signed, realistic TASK_SUBMIT padded (through the frame's `context`) to exactly `size` compact bytes.
pub fn sized_submit(size: usize, contract: bool) -> Vec<u8> {
    let mut v = flow_submit();
    v["message_id"] = json!("5f0c6f1e-8d2a-4c1b-9e3f-7a6b5c4d3e2f");
    v["nonce"] = json!("9a8b7c6d5e4f30211203948576abcdef");
    v["signature"] = json!("3f1e5d7c9b2a4f6e8d0c1b3a5f7e9d2c4b6a8f0e1d3c5b7a9f2e4d6c8b0a1f3e");
    v["signature_algorithm"] = json!("hmac-sha256");
    v["body"]["input"]["labels"] = json!(["scalability", "team-size", "operational-cost", "deployment"]);
    v["body"]["input"]["context"] = json!("");
    if contract {
        v["body"]["contract"] = paper_contract();
    }
    let base = serde_json::to_vec(&v).unwrap().len();
    assert!(base <= size, "base message is {base} bytes, above {size}");
    let filler = "The team ships weekly, runs on one cloud region and has no dedicated ops engineer. ";
    v["body"]["input"]["context"] = json!(filler.repeat(size).chars().take(size - base).collect::<String>());
    let bytes = serde_json::to_vec(&v).unwrap();
    assert_eq!(bytes.len(), size);
    bytes
}
