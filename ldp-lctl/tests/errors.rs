//! Malformed input of every kind yields an error that names where the problem is.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp_lctl::{LctlAck, LctlError, parse};

fn schema_error(yaml: &str) -> (String, String) {
    match parse(yaml) {
        Err(LctlError::Schema { path, expected }) => (path, expected),
        other => panic!("expected a schema error, got {other:?}"),
    }
}

const HEAD: &str = "lctl: \"3.0\"\n";

#[test]
fn out_of_range_fact_confidence_names_its_path() {
    let yaml = format!("{HEAD}facts:\n  F1: {{text: a, confidence: 0.9}}\n  F2: {{text: b, confidence: 1.5}}\n");
    let err = parse(&yaml).unwrap_err();
    assert_eq!(err.to_string(), "facts.F2.confidence: expected 0.0-1.0");
}

#[test]
fn each_malformed_field_is_reported_at_its_path() {
    let cases: &[(&str, &str, &str)] = &[
        ("facts: {F1: {text: a, confidence: high}}", "facts.F1.confidence", "0.0-1.0"),
        ("facts: {F1: {text: a, confidence: -0.1}}", "facts.F1.confidence", "0.0-1.0"),
        ("facts: {F1: {text: a}}", "facts.F1.confidence", "0.0-1.0 (missing)"),
        ("facts: {F1: {confidence: 0.5}}", "facts.F1.text", "a string (missing)"),
        ("facts: {\"F 1\": {text: a, confidence: 0.5}}", "facts.F 1", "a fact id such as F1"),
        ("facts: [F1]", "facts", "a mapping, found a sequence"),
        ("chain: main", "chain", "a mapping, found a string"),
        ("chain: {step: 1}", "chain.id", "a string (missing)"),
        ("chain: {id: c, step: two}", "chain.step", "a non-negative step number"),
        ("chain: {id: c, step: -1}", "chain.step", "a non-negative step number"),
        ("chain: {id: c, source: a, from: b}", "chain.from", "only one of source and from"),
        ("chain: {id: c, source: a, to: b}", "chain", "either source/target or from/to, not a mix"),
        ("chain: {id: c, parallel_merge: maybe}", "chain.parallel_merge", "true or false"),
        ("trace: {step: 1}", "trace", "a mapping, found a mapping"),
        ("trace: [{agent: a}]", "trace[0].step", "a step number (missing)"),
        ("trace: [{step: 1}]", "trace[0].agent", "a string (missing)"),
        ("trace: [{step: 1, agent: a}, {step: 2.5, agent: b}]", "trace[1].step", "a non-negative step number"),
        ("trace: [{step: 1, agent: a, confidence: 2}]", "trace[0].confidence", "0.0-1.0"),
        ("trace: [{step: 1, agent: a, facts_added: F1}]", "trace[0].facts_added", "a list, found a string"),
        (
            "trace: [{step: 1, agent: a, facts_modified: [\"F 1\"]}]",
            "trace[0].facts_modified[0]",
            "a fact id such as F1",
        ),
        ("trace: [{step: 1, agent: a, parallel: yes}]", "trace[0].parallel", "true or false"),
        ("trace: [{step: 1, agent: a, duration_ms: -5}]", "trace[0].duration_ms", "a non-negative integer"),
        ("trace: [{step: 1, agent: [a, b]}]", "trace[0].agent", "a string"),
        ("handoff: {critical_facts: [[F1]]}", "handoff.critical_facts[0]", "a fact id such as F1"),
        ("handoff: {warnings: [{a: b}]}", "handoff.warnings[0]", "a string"),
        ("analysis: {confidence_in_analysis: 9}", "analysis.confidence_in_analysis", "0.0-1.0"),
        ("lctl_ack: {step: 3, agent: a, status: received}", "lctl_ack.chain_id", "a string (missing)"),
    ];
    for (body, path, expected) in cases {
        let yaml = format!("{HEAD}{body}\n");
        let got = schema_error(&yaml);
        // "trace: {step: 1}" is a mapping where a list belongs.
        let expected = if *path == "trace" { "a list, found a mapping" } else { expected };
        assert_eq!(got, ((*path).to_owned(), expected.to_owned()), "input: {body}");
    }
}

#[test]
fn the_version_is_required_and_must_be_3_0() {
    assert_eq!(schema_error("chain: {id: c}\n"), ("lctl".to_owned(), "a value (missing)".to_owned()));
    assert_eq!(schema_error("lctl: \"2.0\"\n"), ("lctl".to_owned(), "\"3.0\"".to_owned()));
    // YAML reads an unquoted 3.0 as a number; it still means version 3.0.
    assert!(parse("lctl: 3.0\n").is_ok());
}

#[test]
fn a_document_must_be_a_mapping() {
    assert_eq!(schema_error("- lctl\n"), ("(document)".to_owned(), "a mapping, found a sequence".to_owned()));
    assert_eq!(schema_error(""), ("(document)".to_owned(), "a mapping, found null".to_owned()));
}

#[test]
fn yaml_syntax_errors_carry_a_location() {
    match parse("lctl: \"3.0\"\nchain: {id: c\n") {
        Err(LctlError::Syntax { line, .. }) => assert!(line.is_some()),
        other => panic!("expected a syntax error, got {other:?}"),
    }
    match parse("lctl: \"3.0\"\npurpose: a\npurpose: b\n") {
        Err(LctlError::Syntax { message, line, .. }) => {
            assert!(message.contains("duplicate"), "{message}");
            assert_eq!(line, Some(3));
        }
        other => panic!("expected a duplicate-key error, got {other:?}"),
    }
    match parse("lctl: \"3.0\"\n  bad indentation: [\n") {
        Err(LctlError::Syntax { .. }) => {}
        other => panic!("expected a syntax error, got {other:?}"),
    }
}

#[test]
fn duplicate_fact_ids_are_rejected() {
    let yaml = format!("{HEAD}facts:\n  F1: {{text: a, confidence: 0.5}}\n  F1: {{text: b, confidence: 0.5}}\n");
    assert!(matches!(parse(&yaml), Err(LctlError::Syntax { .. })));
}

#[test]
fn a_standalone_ack_needs_its_block() {
    match LctlAck::from_yaml("chain_id: c\n") {
        Err(LctlError::Schema { path, .. }) => assert_eq!(path, "lctl_ack"),
        other => panic!("expected a schema error, got {other:?}"),
    }
}
