//! LCTL built from LDP provenance and contracts, and carried in TASK_SUBMIT semantic frames.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp_lctl::ldp::{
    CONTRACT_KEY, FRAME_KEY, attach_to_task, contract_of, document_from_ldp, read_from_envelope, read_from_task,
    receive_task,
};
use ldp_lctl::{Confidence, FactId, LctlDocument, LctlError, check_document, parse};
use ldp_types::{
    Body, DelegationContract, Envelope, LineageEntry, PayloadMode, Provenance, Score, TaskSubmit, VerificationStatus,
};

/// The contract of the paper's section 3.1.
const PAPER_CONTRACT: &str = r#"{
  "contract_id": "ctr-7f3a",
  "objective": "Summarize the quarterly report",
  "success_criteria": ["<=300 words", "include revenue figures"],
  "policy": {
    "failure_policy": "fail_closed",
    "budget": {"max_tokens": 6000, "max_cost_usd": 0.05},
    "safety_constraints": ["no speculative projections"],
    "max_delegation_depth": 2
  },
  "deadline": "2026-03-15T18:00:00Z"
}"#;

fn contract() -> DelegationContract {
    serde_json::from_str(PAPER_CONTRACT).unwrap()
}

fn lineage(delegate: &str, step: &str, status: VerificationStatus) -> LineageEntry {
    LineageEntry::new(delegate, format!("{delegate}-2026.01"), step)
        .with_timestamp("2026-03-09T10:00:00Z")
        .with_verification_status(status)
}

fn provenance(entries: Vec<LineageEntry>) -> Provenance {
    let mut provenance = Provenance::new("ldp:delegate:summarizer", "summarizer-2026.01", PayloadMode::SemanticFrame);
    provenance.confidence = Some(Score::new(0.84).unwrap());
    provenance.set_verification_status(VerificationStatus::PeerVerified);
    provenance.lineage = entries;
    provenance
}

fn submit_envelope() -> Envelope {
    Envelope::from_json(
        r#"{
  "message_id": "msg-1", "session_id": "s-1",
  "from": "ldp:delegate:router-alpha", "to": "ldp:delegate:summarizer",
  "body": {"type": "TASK_SUBMIT", "task_id": "task-001", "skill": "summarization",
           "input": {"task_type": "summarization", "instruction": "Summarize the quarterly report"}},
  "payload_mode": "semantic_frame", "timestamp": "2026-03-09T10:00:04Z", "provenance": null
}"#,
    )
    .unwrap()
}

fn submit() -> TaskSubmit {
    match submit_envelope().body {
        Body::TaskSubmit(submit) => submit,
        other => panic!("not a TASK_SUBMIT: {other:?}"),
    }
}

#[test]
fn lineage_becomes_the_trace_and_the_contract_the_handoff() {
    let provenance = provenance(vec![
        lineage("ldp:delegate:router-alpha", "routed to extractor", VerificationStatus::Unverified),
        lineage("ldp:delegate:extractor", "extracted revenue table", VerificationStatus::ToolVerified),
        lineage("ldp:delegate:summarizer", "summarized", VerificationStatus::SelfVerified),
    ]);
    let doc = document_from_ldp("task-001", Some(&provenance), Some(&contract())).unwrap();

    let agents: Vec<&str> = doc.trace.iter().map(|s| s.agent.as_str()).collect();
    assert_eq!(agents, ["ldp:delegate:router-alpha", "ldp:delegate:extractor", "ldp:delegate:summarizer"]);
    let steps: Vec<u32> = doc.trace.iter().map(|s| s.step).collect();
    assert_eq!(steps, [1, 2, 3]);
    assert_eq!(doc.trace[1].action.as_deref(), Some("extracted revenue table"));
    assert_eq!(doc.trace[1].extra.get("verification_status"), Some(&ldp_lctl::Value::String("tool_verified".into())));
    // The producer is the last lineage entry: it carries the result's confidence and status.
    let last = doc.trace.last().unwrap();
    assert_eq!(last.confidence, Some(Confidence::new(0.84).unwrap()));
    assert_eq!(last.extra.get("verification_status"), Some(&ldp_lctl::Value::String("peer_verified".into())));
    let chain = doc.chain.as_ref().unwrap();
    assert_eq!(chain.id, "task-001");
    assert_eq!(chain.step, Some(3));
    assert_eq!(chain.source.as_deref(), Some("ldp:delegate:summarizer"));

    assert_eq!(doc.instruction.as_deref(), Some("Summarize the quarterly report"));
    let c1 = doc.facts.get(&FactId::new("C1").unwrap()).unwrap();
    assert_eq!(c1.text, "Success criterion: <=300 words");
    assert_eq!(c1.confidence, Confidence::CERTAIN);
    let handoff = doc.handoff.as_ref().unwrap();
    assert_eq!(handoff.critical_facts.len(), 2);
    for expected in [
        "Safety constraint: no speculative projections",
        "Budget: at most 6000 tokens",
        "Budget: at most $0.05 USD",
        "Deadline: 2026-03-15T18:00:00Z",
    ] {
        assert!(handoff.warnings.iter().any(|w| w == expected), "{expected}: {:?}", handoff.warnings);
    }
    // Three lineage hops against a contract maximum of two.
    assert!(
        handoff.warnings.iter().any(|w| w.contains("Delegation depth 3 exceeds the contract's maximum of 2")),
        "{:?}",
        handoff.warnings
    );
    assert!(!check_document(&doc).has_errors(), "{:?}", check_document(&doc).findings);

    // The contract rides along and comes back intact, through YAML too.
    assert!(doc.extra.get(CONTRACT_KEY).is_some());
    let reparsed = parse(&doc.to_yaml().unwrap()).unwrap();
    assert_eq!(contract_of(&reparsed).unwrap(), Some(contract()));
}

#[test]
fn a_producer_missing_from_the_lineage_gets_its_own_step() {
    let provenance = provenance(vec![lineage("ldp:delegate:router-alpha", "routed", VerificationStatus::Unverified)]);
    let doc = document_from_ldp("task-002", Some(&provenance), None).unwrap();
    assert_eq!(doc.trace.len(), 2);
    assert_eq!(doc.trace[1].agent, "ldp:delegate:summarizer");
    assert_eq!(doc.trace[1].confidence, Some(Confidence::new(0.84).unwrap()));
    // Within the depth limit: no depth warning, and no contract means no handoff at all.
    assert!(doc.handoff.is_none());
}

#[test]
fn each_hops_facts_become_its_step_and_a_fact_handed_off() {
    let hop = |delegate: &str, skill: &str, confidence: f64, tokens: u64, cost: f64, ms: u64| {
        let mut entry =
            lineage(delegate, "delegated", VerificationStatus::PeerVerified).with_skill(skill).with_latency_ms(ms);
        entry.confidence = Some(Score::new(confidence).unwrap());
        entry.tokens_used = Some(tokens);
        entry.cost_usd = Some(cost);
        entry
    };
    let hops = vec![
        hop("ldp:delegate:extractor", "extract", 0.9, 120, 0.0012, 35),
        hop("ldp:delegate:translator", "translate", 0.7, 80, 0.0008, 21),
        // A hop that reported nothing but who it was: a step, and no fact invented for it.
        lineage("ldp:delegate:mute", "delegated", VerificationStatus::Unverified),
    ];
    let doc = document_from_ldp("task-003", Some(&provenance(hops.clone())), Some(&contract())).unwrap();
    for (index, entry) in hops.iter().enumerate() {
        let step = &doc.trace[index];
        assert_eq!(step.agent, entry.delegate_id);
        assert_eq!(step.confidence.map(|c| c.value()), entry.confidence.map(|s| s.get()));
        assert_eq!(step.duration_ms, entry.latency_ms);
        assert_eq!(step.extra.get("skill").cloned(), entry.skill.clone().map(ldp_lctl::Value::String));
        assert_eq!(
            step.extra.get("tokens_used").cloned(),
            entry.tokens_used.map(|t| ldp_lctl::Value::Integer(i64::try_from(t).unwrap()))
        );
        assert_eq!(step.extra.get("cost_usd").cloned(), entry.cost_usd.map(ldp_lctl::Value::Float));
        match entry.confidence {
            Some(confidence) => {
                let id = FactId::new(format!("H{}", step.step)).unwrap();
                assert_eq!(step.facts_added, vec![id.clone()]);
                let fact = doc.facts.get(&id).unwrap();
                assert_eq!(fact.confidence.value(), confidence.get());
                assert_eq!(fact.source.as_deref(), Some(entry.delegate_id.as_str()));
                for part in [entry.skill.clone().unwrap(), format!("{} tokens", entry.tokens_used.unwrap())] {
                    assert!(fact.text.contains(&part), "{part} not in {:?}", fact.text);
                }
                assert!(doc.handoff.as_ref().unwrap().context_facts.contains(&id));
            }
            None => assert!(step.facts_added.is_empty()),
        }
    }
    let report = check_document(&doc);
    assert!(!report.has_errors(), "{:?}", report.findings);
    // Drawn: each hop with its time and confidence, through YAML and back.
    let reparsed = parse(&doc.to_yaml().unwrap()).unwrap();
    let drawn = ldp_lctl::render_mermaid(&reparsed);
    for entry in &hops[..2] {
        assert!(drawn.contains(&format!("({} ms)", entry.latency_ms.unwrap())), "{drawn}");
        assert!(drawn.contains(&format!("delegated {}", entry.skill.as_deref().unwrap())), "{drawn}");
    }
}

#[test]
fn a_contract_alone_describes_a_task_before_it_runs() {
    let doc = document_from_ldp("ctr-7f3a", None, Some(&contract())).unwrap();
    assert!(doc.trace.is_empty());
    assert_eq!(doc.facts.len(), 2);
    assert!(!doc.handoff.as_ref().unwrap().warnings.iter().any(|w| w.contains("Delegation depth")));
}

#[test]
fn lctl_travels_in_a_task_submit_and_is_read_back_by_the_delegate() {
    let doc = parse(
        &std::fs::read_to_string(format!("{}/tests/fixtures/spec-example1-step2.yaml", env!("CARGO_MANIFEST_DIR")))
            .unwrap(),
    )
    .unwrap();
    let mut envelope = submit_envelope();
    let Body::TaskSubmit(submit) = &mut envelope.body else { panic!() };
    attach_to_task(submit, &doc).unwrap();
    assert_eq!(submit.input.to_value().unwrap()["task_type"], "summarization");
    assert!(submit.input.to_value().unwrap()[FRAME_KEY].is_object());

    // Across the wire and back.
    let received = Envelope::from_json(&envelope.to_json().unwrap()).unwrap();
    let read: LctlDocument = read_from_envelope(&received).unwrap().unwrap();
    assert_eq!(read, doc);

    let Body::TaskSubmit(submit) = &received.body else { panic!() };
    let reception = receive_task(submit, "fix-implementer").unwrap().unwrap();
    assert_eq!(reception.ack.step, 3);
    assert_eq!(reception.ack.chain_id, "review-2024-001");
}

#[test]
fn a_task_without_lctl_reads_as_none() {
    assert_eq!(read_from_task(&submit()).unwrap(), None);
    assert!(receive_task(&submit(), "me").unwrap().is_none());
}

#[test]
fn lctl_may_also_travel_as_yaml_text() {
    let mut submit = submit();
    let mut input = submit.input.to_value().unwrap();
    input[FRAME_KEY] =
        serde_json::Value::String("lctl: \"3.0\"\nchain: {id: auth-001, step: 2, from: analyzer, to: fixer}\n".into());
    submit.input = input.into();
    let doc = read_from_task(&submit).unwrap().unwrap();
    assert_eq!(doc.chain_id(), Some("auth-001"));
}

#[test]
fn broken_lctl_in_a_frame_names_its_path_in_the_task() {
    let mut submit = submit();
    let mut input = submit.input.to_value().unwrap();
    input[FRAME_KEY] = serde_json::json!({
        "lctl": "3.0",
        "facts": {"F1": {"text": "x", "confidence": 7}}
    });
    submit.input = input.into();
    assert_eq!(
        read_from_task(&submit).unwrap_err(),
        LctlError::Schema { path: "input.lctl.facts.F1.confidence".into(), expected: "0.0-1.0".into() }
    );
}

#[test]
fn text_mode_input_cannot_carry_lctl() {
    let mut submit = submit();
    submit.input = serde_json::Value::String("Summarize the quarterly report".into()).into();
    let doc = document_from_ldp("t", None, None).unwrap();
    match attach_to_task(&mut submit, &doc) {
        Err(LctlError::Schema { path, .. }) => assert_eq!(path, "input"),
        other => panic!("expected a schema error, got {other:?}"),
    }
}
