//! The receiving protocol and the renderers, on the spec's examples.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp_lctl::{
    Confidence, Fact, FactId, LctlDocument, LctlError, NewFact, NextStep, PropagationAdvice, RenderFormat, check_chain,
    parse, receive, render,
};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn doc(name: &str) -> LctlDocument {
    parse(&fixture(name)).unwrap()
}

fn id(text: &str) -> FactId {
    FactId::new(text).unwrap()
}

fn c(value: f64) -> Confidence {
    Confidence::new(value).unwrap()
}

#[test]
fn critical_facts_below_07_become_concerns() {
    let yaml = fixture("broken/critical-low-confidence.yaml");
    let reception = receive(&yaml, None).unwrap();
    assert_eq!(reception.ack.agent, "security-reviewer");
    assert_eq!(reception.ack.step, 2);
    assert_eq!(reception.ack.facts_loaded, vec![id("F1"), id("F2")]);
    assert_eq!(reception.ack.confidence_concerns, vec![id("F2")]);
    assert_eq!(reception.concerns[0].confidence, c(0.5));
    assert_eq!(reception.concerns[0].advice, PropagationAdvice::FlagForHumanReview);
}

#[test]
fn a_critical_fact_at_exactly_07_is_not_a_concern() {
    let yaml = fixture("spec-example1-step1.yaml").replace(
        "    text: \"No input validation detected on user_id parameter\"\n    confidence: 0.90",
        "    text: \"No input validation detected on user_id parameter\"\n    confidence: 0.70",
    );
    let reception = receive(&yaml, None).unwrap();
    assert!(reception.ack.confidence_concerns.is_empty());
    let lower = yaml.replace("confidence: 0.70", "confidence: 0.69");
    assert_eq!(receive(&lower, None).unwrap().ack.confidence_concerns, vec![id("F2")]);
}

#[test]
fn the_merge_receiver_of_example_2_acknowledges_step_4() {
    let reception = receive(&fixture("spec-example2-parallel-merge.yaml"), None).unwrap();
    assert_eq!(reception.ack.step, 4);
    assert_eq!(reception.ack.agent, "integration-agent");
    assert_eq!(reception.ack.facts_loaded, vec![id("F1"), id("F3"), id("F6")]);
}

#[test]
fn receiving_needs_a_receiver() {
    let yaml = "lctl: \"3.0\"\nchain: {id: c, step: 1}\n";
    assert!(matches!(receive(yaml, None), Err(LctlError::InvalidRequest(_))));
    assert_eq!(receive(yaml, Some("me")).unwrap().ack.agent, "me");
    assert!(matches!(receive("lctl: \"3.0\"\n", Some("me")), Err(LctlError::InvalidRequest(_))));
}

fn fix_step() -> NextStep {
    let mut step = NextStep::new("fix-implementer", "Replaced string SQL with bound parameters", c(0.9));
    step.target = Some("test-runner".into());
    step.new_facts.push(NewFact {
        id: id("F6"),
        fact: Fact::new("UserController.py:45-52 now uses parameterized queries", c(0.85)),
        derived_from: vec![id("F1"), id("F5")],
    });
    step.critical_facts.push(id("F6"));
    step.instruction = Some("Run the regression suite".into());
    step
}

#[test]
fn the_next_hop_extends_the_trace_and_keeps_the_chain_valid() {
    let step2 = doc("spec-example1-step2.yaml");
    let reception = ldp_lctl::receive_document(step2.clone(), None).unwrap();
    let step3 = reception.next_hop(fix_step()).unwrap();
    let chain = step3.chain.as_ref().unwrap();
    assert_eq!(chain.step, Some(3));
    assert_eq!(chain.source.as_deref(), Some("fix-implementer"));
    assert_eq!(chain.target.as_deref(), Some("test-runner"));
    assert_eq!(step3.trace.len(), 3);
    let last = step3.trace.last().unwrap();
    assert_eq!((last.step, last.agent.as_str()), (3, "fix-implementer"));
    assert_eq!(last.facts_added, vec![id("F6")]);
    let f6 = step3.facts.get(&id("F6")).unwrap();
    assert_eq!(f6.source.as_deref(), Some("fix-implementer"));
    assert_eq!(f6.step, Some(3));
    let handoff = step3.handoff.as_ref().unwrap();
    assert_eq!(handoff.critical_facts, vec![id("F1"), id("F4"), id("F5"), id("F6")]);
    let report = check_chain(&[doc("spec-example1-step1.yaml"), step2, step3.clone()]);
    assert!(!report.has_errors(), "{:?}", report.findings);
    assert_eq!(parse(&step3.to_yaml().unwrap()).unwrap(), step3);
}

#[test]
fn the_next_hop_enforces_the_propagation_rule_on_derived_facts() {
    let reception = receive(&fixture("spec-example1-step2.yaml"), None).unwrap();
    // F5 is 0.85, so a fact derived from it cannot claim 0.88 even with own confidence 0.9.
    let mut step = fix_step();
    step.new_facts[0].fact.confidence = c(0.88);
    let err = reception.next_hop(step).unwrap_err();
    assert!(err.to_string().contains("caps it at 0.85"), "{err}");
    // Own confidence caps it too.
    let mut step = fix_step();
    step.confidence = c(0.6);
    assert!(reception.next_hop(step).is_err());
}

#[test]
fn the_next_hop_drops_uncertain_context_facts() {
    let yaml = fixture("spec-example1-step2.yaml").replace(
        "    text: \"No input validation on user_id parameter\"\n    confidence: 0.90",
        "    text: \"No input validation on user_id parameter\"\n    confidence: 0.20",
    );
    let reception = receive(&yaml, None).unwrap();
    let next = reception.next_hop(fix_step()).unwrap();
    assert!(!next.facts.contains(&id("F2")));
    assert!(next.handoff.as_ref().unwrap().context_facts.is_empty());
}

#[test]
fn mermaid_shows_branches_merge_confidence_and_the_receiver() {
    let mermaid = render(&doc("spec-example2-parallel-merge.yaml"), RenderFormat::Mermaid);
    assert!(mermaid.starts_with("flowchart TD\n"), "{mermaid}");
    assert!(mermaid.contains("subgraph parallel_2"), "{mermaid}");
    // Step 1 (confidence 1.00) fans out to the three branches.
    for branch in ["s1", "s2", "s3"] {
        assert!(mermaid.contains(&format!("s0 -->|\"1.00\"| {branch}")), "{mermaid}");
    }
    // Each branch feeds the merge with its own confidence.
    assert!(mermaid.contains("s1 -->|\"0.88\"| s4"), "{mermaid}");
    assert!(mermaid.contains("s2 -->|\"0.85\"| s4"), "{mermaid}");
    assert!(mermaid.contains("s3 -->|\"0.92\"| s4"), "{mermaid}");
    assert!(mermaid.contains("class s4 merge"), "{mermaid}");
    assert!(mermaid.contains("s4 -->|\"0.80\"| next"), "{mermaid}");
    assert!(mermaid.contains("integration-agent (merge)"), "{mermaid}");
}

#[test]
fn mermaid_and_dot_mark_the_failed_step() {
    let failed = doc("spec-example3-failed-chain.yaml");
    let mermaid = render(&failed, RenderFormat::Mermaid);
    assert!(mermaid.contains("class s3 failed"), "{mermaid}");
    assert!(mermaid.contains("4: deploy-agent (5000 ms) [FAILED]"), "{mermaid}");
    assert!(mermaid.contains("s2 -->|\"0.92\"| s3"), "{mermaid}");
    let dot = render(&failed, RenderFormat::Dot);
    assert!(dot.starts_with("digraph \"deploy-2024-042\" {"), "{dot}");
    assert!(dot.contains("s3 [label=\"4: deploy-agent (5000 ms) [FAILED]"), "{dot}");
    assert!(dot.contains("color=red"), "{dot}");
    assert!(dot.contains("s0 -> s1 [label=\"0.95\"]"), "{dot}");
    assert!(dot.trim_end().ends_with('}'));
}

#[test]
fn dot_clusters_parallel_branches() {
    let dot = render(&doc("spec-example2-parallel-merge.yaml"), RenderFormat::Dot);
    assert!(dot.contains("subgraph cluster_parallel_2"), "{dot}");
    assert!(dot.contains("s4 [label=\"3: orchestrator [merge]"), "{dot}");
    assert!(dot.contains("peripheries=2"), "{dot}");
    assert!(dot.contains("s3 -> s4 [label=\"0.92\"]"), "{dot}");
}

#[test]
fn labels_are_escaped() {
    let yaml = "lctl: \"3.0\"\nchain: {id: 'a\"b', step: 1}\ntrace:\n  - {step: 1, agent: 'x\"y', action: 'say \"hi\" <b>', confidence: 0.5}\n";
    let parsed = parse(yaml).unwrap();
    let dot = render(&parsed, RenderFormat::Dot);
    assert!(dot.contains("digraph \"a\\\"b\""), "{dot}");
    assert!(dot.contains("say \\\"hi\\\""), "{dot}");
    let mermaid = render(&parsed, RenderFormat::Mermaid);
    assert!(mermaid.contains("say #quot;hi#quot; #lt;b#gt;"), "{mermaid}");
}

#[test]
fn the_timeline_shows_where_confidence_degrades() {
    let timeline = render(&doc("spec-example3-failed-chain.yaml"), RenderFormat::Timeline);
    assert!(timeline.starts_with("chain deploy-2024-042 (debugging) status FAILED"), "{timeline}");
    assert!(timeline.contains("error: ConnectionRefused: kubectl cannot reach api-server"), "{timeline}");
    assert!(timeline.contains("facts at failure: F1, F2, F3, F4, F5"), "{timeline}");
    // 0.95 -> 0.90 degrades within the "high" band; 0.92 -> 0.00 drops to "uncertain".
    assert!(timeline.contains("step 2 environment-checker: 0.95 -> 0.90"), "{timeline}");
    assert!(timeline.contains("step 4 deploy-agent: 0.92 -> 0.00 (high confidence -> uncertain)"), "{timeline}");
    assert!(timeline.contains("v -0.92"), "{timeline}");
    assert!(timeline.contains("^ +0.02"), "{timeline}");

    let steady = render(&doc("spec-example1-step2.yaml"), RenderFormat::Timeline);
    assert!(steady.contains("confidence never degrades"), "{steady}");
}

#[test]
fn the_timeline_compares_a_merge_with_its_weakest_branch() {
    let timeline = render(&doc("spec-example2-parallel-merge.yaml"), RenderFormat::Timeline);
    // The branches' weakest input is backend-dev at 0.85; the merge is at 0.80.
    assert!(timeline.contains("step 3 orchestrator: 0.85 -> 0.80"), "{timeline}");
    assert!(timeline.contains("[merge] Collected parallel results"), "{timeline}");
    assert!(timeline.contains("->  integration-agent (merge)"), "{timeline}");
}

/// Best practices, "For Debugging": "Include duration_ms for performance analysis": every format shows it.
#[test]
fn every_format_shows_duration_ms() {
    let failed = doc("spec-example3-failed-chain.yaml");
    let timeline = render(&failed, RenderFormat::Timeline);
    assert!(timeline.contains("Built Docker image successfully (45200 ms)"), "{timeline}");
    let dot = render(&failed, RenderFormat::Dot);
    assert!(dot.contains("s2 [label=\"3: build-agent (45200 ms)\\nBuilt Docker image successfully"), "{dot}");
    let mermaid = render(&failed, RenderFormat::Mermaid);
    assert!(mermaid.contains("s0[\"1: requirement-analyzer (2340 ms)<br/>"), "{mermaid}");
    // A step without duration_ms gets no parentheses.
    let plain = render(&doc("spec-example1-step1.yaml"), RenderFormat::Dot);
    assert!(plain.contains("s0 [label=\"1: code-analyzer\\n"), "{plain}");
}

/// Minimal Format: `chain: {id: auth-001, step: 2, from: analyzer, to: fixer}` and fact F1: the drawing keeps the
/// sending agent and its facts, not only "next: fixer".
#[test]
fn the_minimal_format_renders_its_source_and_facts() {
    let minimal = doc("spec-minimal.yaml");
    let mermaid = render(&minimal, RenderFormat::Mermaid);
    assert!(mermaid.contains("s0[\"2: analyzer<br/>+F1 0.95: SQL injection in UserController.py:45\"]"), "{mermaid}");
    assert!(mermaid.contains("s0 -->|\"?\"| next"), "{mermaid}");
    assert!(mermaid.contains("next([\"next: fixer\"])"), "{mermaid}");
    let dot = render(&minimal, RenderFormat::Dot);
    assert!(dot.contains("s0 [label=\"2: analyzer\\n+F1 0.95: SQL injection in UserController.py:45\"]"), "{dot}");
    assert!(dot.contains("s0 -> next"), "{dot}");
    let timeline = render(&minimal, RenderFormat::Timeline);
    assert!(timeline.contains("  2   analyzer"), "{timeline}");
    assert!(timeline.contains("+F1 0.95: SQL injection in UserController.py:45"), "{timeline}");
    assert!(timeline.contains("->  fixer"), "{timeline}");
}

/// Facts added and modified by a step are listed in its node, with their confidence.
#[test]
fn nodes_list_the_facts_their_step_added_and_modified() {
    let dot = render(&doc("spec-example1-step2.yaml"), RenderFormat::Dot);
    assert!(dot.contains("+F4 0.88\\n+F5 0.85\\n~F1 0.95"), "{dot}");
}
