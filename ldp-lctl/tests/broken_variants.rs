//! One broken variant of a spec example per rule: each must trip exactly the rule it breaks,
//! so dropping a rule fails its test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp_lctl::{LctlDocument, Report, Rule, Severity, check_chain, check_document, parse};

fn doc(name: &str) -> LctlDocument {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn error_rules(report: &Report) -> Vec<Rule> {
    report.findings.iter().filter(|f| f.severity == Severity::Error).map(|f| f.rule).collect()
}

/// Checks `broken/<name>` alone and returns the (rule, path) of each error.
fn single(name: &str) -> Vec<(Rule, String)> {
    check_document(&doc(&format!("broken/{name}")))
        .findings
        .into_iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| (f.rule, f.path))
        .collect()
}

#[test]
fn handoff_must_name_existing_facts() {
    assert_eq!(
        single("handoff-unknown-fact.yaml"),
        [(Rule::HandoffUnknownFact, "handoff.critical_facts[3]".to_owned())]
    );
}

#[test]
fn step_numbers_must_increase() {
    assert_eq!(single("step-order.yaml"), [(Rule::StepOrder, "trace[1].step".to_owned())]);
}

#[test]
fn step_numbers_must_not_skip() {
    assert_eq!(single("step-gap.yaml"), [(Rule::StepGap, "trace[3].step".to_owned())]);
}

#[test]
fn steps_sharing_a_number_must_be_marked_parallel() {
    assert_eq!(single("parallel-not-marked.yaml"), [(Rule::ParallelSharing, "trace[2].step".to_owned())]);
}

#[test]
fn a_lone_parallel_step_is_reported() {
    let yaml = r#"
lctl: "3.0"
chain: {id: c, step: 2}
trace:
  - {step: 1, agent: a, confidence: 0.9}
  - {step: 2, agent: b, parallel: true, confidence: 0.9}
  - {step: 3, agent: c, confidence: 0.9}
"#;
    let report = check_document(&parse(yaml).unwrap());
    let mut rules = error_rules(&report);
    rules.sort_by_key(|r| r.name());
    // chain.step 2 is behind the trace's step 3 as well.
    assert_eq!(rules, [Rule::ParallelSharing, Rule::StepOrder]);
}

#[test]
fn parallel_branches_must_be_merged() {
    let errors = single("parallel-unmerged.yaml");
    assert_eq!(errors, [(Rule::ParallelUnmerged, "trace[3]".to_owned())]);
    // The same trace is fine once the receiver is declared the merge agent.
    let mut fixed = doc("broken/parallel-unmerged.yaml");
    fixed.chain.as_mut().unwrap().parallel_merge = Some(true);
    assert!(!check_document(&fixed).has_errors());
}

#[test]
fn a_merge_flag_needs_parallel_branches() {
    assert_eq!(
        single("merge-without-parallel.yaml"),
        [(Rule::MergeWithoutParallel, "chain.parallel_merge".to_owned())]
    );
}

#[test]
fn merge_conflicts_must_be_handed_off_as_critical() {
    let errors = single("conflict-not-handed-off.yaml");
    assert_eq!(errors, [(Rule::ConflictNotHandedOff, "handoff.critical_facts".to_owned())]);
}

#[test]
fn facts_below_040_must_not_propagate() {
    assert_eq!(single("do-not-propagate.yaml"), [(Rule::DoNotPropagate, "facts.F3.confidence".to_owned())]);
}

#[test]
fn low_critical_facts_are_flagged_but_do_not_fail() {
    let report = check_document(&doc("broken/critical-low-confidence.yaml"));
    assert!(!report.has_errors());
    let flagged: Vec<_> = report.by_rule(Rule::FlagForReview).collect();
    assert_eq!(flagged.len(), 1);
    assert_eq!(flagged[0].severity, Severity::Warning);
    assert_eq!(flagged[0].path, "facts.F2.confidence");
}

#[test]
fn fact_sources_must_appear_in_the_trace() {
    assert_eq!(single("unknown-fact-source.yaml"), [(Rule::UnknownFactSource, "facts.F4.source".to_owned())]);
}

#[test]
fn failed_at_step_must_point_into_the_trace() {
    assert_eq!(single("failed-step-unknown.yaml"), [(Rule::FailedStepUnknown, "chain.failed_at_step".to_owned())]);
}

/// Checks hop 1 of Example 1 followed by `broken/<name>` and returns the errors as
/// (document index, rule, path).
fn chain_after_example_1(name: &str) -> Vec<(usize, Rule, String)> {
    let docs = [doc("spec-example1-step1.yaml"), doc(&format!("broken/{name}"))];
    check_chain(&docs)
        .findings
        .into_iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| (f.document, f.rule, f.path))
        .collect()
}

#[test]
fn a_critical_fact_may_not_disappear() {
    assert_eq!(
        chain_after_example_1("chain-critical-fact-lost.yaml"),
        [(1, Rule::CriticalFactLost, "facts".to_owned())]
    );
}

#[test]
fn a_critical_fact_must_survive_every_later_hop() {
    // F2 stays (as context) at hop 2 but is gone at hop 3: still lost.
    let hop3 = doc("broken/chain-critical-fact-lost.yaml");
    let mut hop3 = hop3;
    hop3.chain.as_mut().unwrap().step = Some(3);
    let report = check_chain(&[doc("spec-example1-step1.yaml"), doc("spec-example1-step2.yaml"), hop3]);
    let lost: Vec<_> = report.by_rule(Rule::CriticalFactLost).collect();
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].document, 2);
    assert!(lost[0].message.contains("F2"), "{}", lost[0].message);
}

#[test]
fn confidence_may_not_rise_without_a_verifying_step() {
    assert_eq!(
        chain_after_example_1("chain-confidence-rose.yaml"),
        [(1, Rule::ConfidenceRoseUnverified, "facts.F2.confidence".to_owned())]
    );
}

#[test]
fn a_verifying_step_may_raise_confidence() {
    // Example 1 itself: F1 is rewritten and listed in facts_modified by step 2.
    let mut step2 = doc("spec-example1-step2.yaml");
    let f1 = ldp_lctl::FactId::new("F1").unwrap();
    let mut fact = step2.facts.get(&f1).unwrap().clone();
    fact.confidence = ldp_lctl::Confidence::new(0.99).unwrap();
    step2.facts.insert(f1, fact);
    let report = check_chain(&[doc("spec-example1-step1.yaml"), step2]);
    assert!(!report.has_errors(), "{:?}", report.findings);
}

#[test]
fn a_fact_modified_by_an_absent_agent_is_reported() {
    assert_eq!(
        chain_after_example_1("chain-modified-by-unknown-agent.yaml"),
        [(1, Rule::FactModifiedByUnknownAgent, "facts.F2.source".to_owned())]
    );
}

#[test]
fn a_fact_reworded_without_a_step_is_a_warning() {
    let docs = [doc("spec-example1-step1.yaml"), doc("broken/chain-fact-changed-unrecorded.yaml")];
    let report = check_chain(&docs);
    assert!(!report.has_errors());
    let changed: Vec<_> = report.by_rule(Rule::FactChangedUnrecorded).collect();
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].severity, Severity::Warning);
    assert_eq!(changed[0].path, "facts.F2.text");
}

#[test]
fn a_fact_changing_hands_without_a_step_is_an_error() {
    let mut step2 = doc("spec-example1-step2.yaml");
    let f2 = ldp_lctl::FactId::new("F2").unwrap();
    let mut fact = step2.facts.get(&f2).unwrap().clone();
    fact.source = Some("security-reviewer".into());
    step2.facts.insert(f2, fact);
    let report = check_chain(&[doc("spec-example1-step1.yaml"), step2]);
    let errors: Vec<_> =
        report.findings.iter().filter(|f| f.severity == Severity::Error).map(|f| (f.rule, f.path.as_str())).collect();
    assert_eq!(errors, [(Rule::FactChangedUnrecorded, "facts.F2.source")]);
}

#[test]
fn hops_must_not_skip_steps() {
    assert_eq!(chain_after_example_1("chain-hop-step-gap.yaml"), [(1, Rule::HopStepGap, "chain.step".to_owned())]);
}

#[test]
fn trace_history_must_be_preserved() {
    let errors = chain_after_example_1("chain-trace-history-lost.yaml");
    assert!(errors.contains(&(1, Rule::TraceHistoryLost, "trace".to_owned())), "{errors:?}");
}

#[test]
fn hops_must_share_a_chain_id() {
    assert_eq!(chain_after_example_1("chain-id-mismatch.yaml"), [(1, Rule::ChainIdMismatch, "chain.id".to_owned())]);
}

#[test]
fn every_broken_single_document_fixture_fails_on_its_own() {
    let dir = format!("{}/tests/fixtures/broken", env!("CARGO_MANIFEST_DIR"));
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.starts_with("chain-") || name == "critical-low-confidence.yaml" {
            continue;
        }
        let report = check_document(&doc(&format!("broken/{name}")));
        assert!(report.has_errors(), "{name} passed");
    }
}
