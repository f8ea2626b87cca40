//! Every example of `lctl-v3.md` (extracted verbatim into `fixtures/`) parses, round-trips and
//! passes or fails the rules as the spec's text implies.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp_lctl::{
    ChainStatus, Confidence, EndpointKeys, FactId, LctlAck, LctlDocument, LctlError, MergePoint, Purpose, Severity,
    check_chain, check_document, parse,
};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn doc(name: &str) -> LctlDocument {
    parse(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn id(text: &str) -> FactId {
    FactId::new(text).unwrap()
}

fn ids(texts: &[&str]) -> Vec<FactId> {
    texts.iter().map(|t| id(t)).collect()
}

const EXAMPLES: [&str; 5] = [
    "spec-minimal.yaml",
    "spec-example1-step1.yaml",
    "spec-example1-step2.yaml",
    "spec-example2-parallel-merge.yaml",
    "spec-example3-failed-chain.yaml",
];

#[test]
fn every_example_round_trips_through_yaml_and_json() {
    for name in EXAMPLES {
        let original = doc(name);
        let yaml = original.to_yaml().unwrap();
        assert_eq!(parse(&yaml).unwrap(), original, "{name} via YAML:\n{yaml}");
        let json = serde_json::to_string(&original.to_value()).unwrap();
        let value: ldp_lctl::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(LctlDocument::from_value(value).unwrap(), original, "{name} via JSON");
    }
}

#[test]
fn every_example_passes_the_rules() {
    for name in EXAMPLES {
        let report = check_document(&doc(name));
        let errors: Vec<_> = report.findings.iter().filter(|f| f.severity == Severity::Error).collect();
        assert!(errors.is_empty(), "{name}: {errors:?}");
    }
}

#[test]
fn example_1_is_a_valid_two_hop_chain() {
    let report = check_chain(&[doc("spec-example1-step1.yaml"), doc("spec-example1-step2.yaml")]);
    assert!(!report.has_errors(), "{:?}", report.findings);
}

#[test]
fn minimal_format_reads_from_and_to_as_source_and_target() {
    let minimal = doc("spec-minimal.yaml");
    let chain = minimal.chain.as_ref().unwrap();
    assert_eq!(chain.id, "auth-001");
    assert_eq!(chain.step, Some(2));
    assert_eq!(chain.source.as_deref(), Some("analyzer"));
    assert_eq!(chain.target.as_deref(), Some("fixer"));
    assert_eq!(chain.endpoint_keys, EndpointKeys::FromTo);
    let fact = minimal.facts.get(&id("F1")).unwrap();
    assert_eq!(fact.text, "SQL injection in UserController.py:45");
    assert_eq!(fact.confidence, Confidence::new(0.95).unwrap());
    assert_eq!(minimal.instruction.as_deref(), Some("Fix the SQL injection vulnerability"));
    // The short form is written back as the short form.
    let yaml = minimal.to_yaml().unwrap();
    assert!(yaml.contains("from: analyzer") && yaml.contains("to: fixer"), "{yaml}");
}

#[test]
fn example_1_step_2_reads_every_field() {
    let step2 = doc("spec-example1-step2.yaml");
    assert_eq!(step2.purpose, Some(Purpose::Observability));
    assert_eq!(step2.trace.len(), 2);
    let reviewer = &step2.trace[1];
    assert_eq!(reviewer.agent, "security-reviewer");
    assert_eq!(reviewer.facts_added, ids(&["F4", "F5"]));
    assert_eq!(reviewer.facts_modified, ids(&["F1"]));
    let handoff = step2.handoff.as_ref().unwrap();
    assert_eq!(handoff.critical_facts, ids(&["F1", "F4", "F5"]));
    assert_eq!(handoff.context_facts, ids(&["F2"]));
    assert_eq!(handoff.warnings, vec!["Production system - test thoroughly before deploy".to_owned()]);
    // The registry keeps document order, not sorted order.
    let order: Vec<&str> = step2.facts.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(order, ["F1", "F2", "F4", "F5"]);
    assert!(step2.instruction.as_deref().unwrap().starts_with("Implement the SQL injection fix"));
}

#[test]
fn example_2_has_three_parallel_branches_merged_at_step_3() {
    let merge_doc = doc("spec-example2-parallel-merge.yaml");
    let report = check_document(&merge_doc);
    assert_eq!(report.parallel_groups.len(), 1);
    let (_, group) = &report.parallel_groups[0];
    assert_eq!(group.step, 2);
    let agents: Vec<&str> = group.branches.iter().map(|b| b.agent.as_str()).collect();
    assert_eq!(agents, ["frontend-dev", "backend-dev", "test-writer"]);
    match &group.merge {
        Some(MergePoint::TraceStep { step, agent, conflicts, .. }) => {
            assert_eq!(*step, 3);
            assert_eq!(agent, "orchestrator");
            // F6 is the spec's "CONFLICT: Frontend expects different format ..." fact.
            assert_eq!(conflicts, &ids(&["F6"]));
        }
        other => panic!("expected a merge step, got {other:?}"),
    }
    let chain = merge_doc.chain.as_ref().unwrap();
    assert_eq!(chain.parallel_merge, Some(true));
    assert_eq!(chain.target.as_deref(), Some("integration-agent"));
}

#[test]
fn example_3_reports_the_failed_step_its_error_facts_and_analysis() {
    let failed = doc("spec-example3-failed-chain.yaml");
    assert_eq!(failed.purpose, Some(Purpose::Debugging));
    assert_eq!(failed.chain.as_ref().unwrap().status, Some(ChainStatus::Failed));
    let report = check_document(&failed);
    assert!(!report.has_errors(), "{:?}", report.findings);
    assert_eq!(report.failures.len(), 1);
    let (_, failure) = &report.failures[0];
    assert_eq!(failure.failed_at_step, 4);
    assert_eq!(failure.agent.as_deref(), Some("deploy-agent"));
    assert_eq!(failure.error.as_deref(), Some("ConnectionRefused: kubectl cannot reach api-server"));
    assert_eq!(failure.facts_at_failure, ids(&["F1", "F2", "F3", "F4", "F5"]));
    let analysis = failure.analysis.as_ref().unwrap();
    assert_eq!(
        analysis.root_cause.as_deref(),
        Some("environment-checker verified wrong environment (staging vs production)")
    );
    assert_eq!(analysis.confidence_in_analysis, Some(Confidence::new(0.85).unwrap()));
    assert_eq!(analysis.recommendation.as_deref(), Some("Add explicit environment parameter validation at step 2"));
    let durations: Vec<_> = failed.trace.iter().map(|s| s.duration_ms).collect();
    assert_eq!(durations, [Some(2340), Some(1820), Some(45200), Some(5000)]);
    let f3 = failed.facts.get(&id("F3")).unwrap();
    assert_eq!(f3.note.as_deref(), Some("ISSUE: Checked staging, not production"));
}

#[test]
fn the_core_structure_template_is_rejected_at_its_first_placeholder() {
    // The template's placeholders (`id: [unique workflow id]`) are YAML lists, not values.
    let err = parse(&fixture("spec-core-structure-template.yaml")).unwrap_err();
    assert_eq!(err, LctlError::Schema { path: "chain.id".into(), expected: "a string".into() });
}

#[test]
fn the_spec_ack_parses_and_round_trips() {
    let ack = LctlAck::from_yaml(&fixture("spec-receiving-ack.yaml")).unwrap();
    assert_eq!(ack.chain_id, "review-2024-001");
    assert_eq!(ack.step, 3);
    assert_eq!(ack.agent, "fix-implementer");
    assert_eq!(ack.facts_loaded, ids(&["F1", "F4", "F5"]));
    assert!(ack.confidence_concerns.is_empty());
    assert_eq!(LctlAck::from_yaml(&ack.to_yaml().unwrap()).unwrap(), ack);
}

#[test]
fn receiving_example_1_step_2_produces_the_spec_ack() {
    let expected = LctlAck::from_yaml(&fixture("spec-receiving-ack.yaml")).unwrap();
    let reception = ldp_lctl::receive(&fixture("spec-example1-step2.yaml"), None).unwrap();
    assert_eq!(reception.ack, expected);
    assert!(reception.concerns.is_empty());
}

#[test]
fn unknown_keys_survive_in_order_at_every_level() {
    let yaml = r#"
lctl: "3.0"
x-run: {host: ci-7, attempt: 2}
chain: {id: c1, step: 1, from: a, to: b, priority: high}
trace:
  - {step: 1, agent: a, action: go, confidence: 0.9, tokens: 1200, model: m-1}
facts:
  F1: {text: t, confidence: 0.9, evidence: [log-1, log-2]}
handoff: {critical_facts: [F1], ttl: 30}
analysis: {root_cause: none, owner: sre}
zz-last: ~
"#;
    let parsed = parse(yaml).unwrap();
    let keys: Vec<&str> = parsed.extra.iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["x-run", "zz-last"]);
    assert!(parsed.chain.as_ref().unwrap().extra.get("priority").is_some());
    let step_keys: Vec<&str> = parsed.trace[0].extra.iter().map(|(k, _)| k).collect();
    assert_eq!(step_keys, ["tokens", "model"]);
    assert!(parsed.facts.get(&id("F1")).unwrap().extra.get("evidence").is_some());
    assert!(parsed.handoff.as_ref().unwrap().extra.get("ttl").is_some());
    assert!(parsed.analysis.as_ref().unwrap().extra.get("owner").is_some());
    let written = parsed.to_yaml().unwrap();
    assert!(written.contains("x-run") && written.contains("evidence"), "{written}");
    assert_eq!(parse(&written).unwrap(), parsed);
}
