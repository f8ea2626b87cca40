//! Every fenced block of lctl-v3.md (a verbatim copy in `data/`): each example parses, passes `check`, and is
//! written by `fmt` (`to_yaml`) as text that reads back as the same document and formats to itself. The blocks that
//! are templates or diagrams are listed below, so that none is skipped silently.
//!
//! Also the propagation rule inside one document.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp_lctl::{LctlAck, Rule, Severity, check_document, parse};

const SPEC: &str = include_str!("data/lctl-v3.md");

/// The fenced blocks that are not documents: the Core Structure (a template whose values are placeholders such as
/// `[unique workflow id]`) and the Claude Code integration diagram.
const NOT_EXAMPLES: [&str; 2] =
    ["lctl: \"3.0\"\npurpose: observability\n\n# Chain tracking - WHO is involved", "Parent Agent"];

/// The fenced blocks, dedented (the `lctl_ack` example sits inside a numbered list).
fn fenced_blocks() -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<(usize, Vec<String>)> = None;
    for line in SPEC.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            match current.take() {
                Some((_, lines)) => out.push(lines.join("\n") + "\n"),
                None => current = Some((line.len() - trimmed.len(), Vec::new())),
            }
        } else if let Some((indent, lines)) = &mut current {
            lines.push(line.get(*indent..).unwrap_or("").to_owned());
        }
    }
    out
}

fn is_listed(block: &str) -> bool {
    NOT_EXAMPLES.iter().any(|head| block.starts_with(head))
}

/// Every example is read, checked without errors, and formatted canonically (idempotent, same document).
#[test]
fn every_spec_example_parses_checks_and_formats_to_itself() {
    let blocks = fenced_blocks();
    assert_eq!(blocks.len(), 8);
    let (mut documents, mut acks, mut listed) = (0, 0, 0);
    for block in &blocks {
        if is_listed(block) {
            listed += 1;
            continue;
        }
        if block.starts_with("lctl_ack:") {
            // Receiving Protocol, step 4: the acknowledgement is a block of its own.
            let ack = LctlAck::from_yaml(block).unwrap_or_else(|e| panic!("{e}\n{block}"));
            let formatted = ack.to_yaml().unwrap();
            assert_eq!(LctlAck::from_yaml(&formatted).unwrap(), ack);
            assert_eq!(LctlAck::from_yaml(&formatted).unwrap().to_yaml().unwrap(), formatted);
            acks += 1;
            continue;
        }
        let doc = parse(block).unwrap_or_else(|e| panic!("{e}\n{block}"));
        let report = check_document(&doc);
        assert!(!report.has_errors(), "{block}\n{:#?}", report.findings);
        let formatted = doc.to_yaml().unwrap();
        let again = parse(&formatted).unwrap_or_else(|e| panic!("{e}\n{formatted}"));
        assert_eq!(again, doc, "{formatted}");
        assert_eq!(again.to_yaml().unwrap(), formatted, "fmt is not idempotent");
        documents += 1;
    }
    assert_eq!((documents, acks, listed), (5, 1, 2));
}

/// The template of the Core Structure is not a document: its placeholders are YAML lists of words.
#[test]
fn the_core_structure_template_is_not_a_document() {
    let template = fenced_blocks().into_iter().find(|b| b.starts_with(NOT_EXAMPLES[0])).unwrap();
    assert!(parse(&template).is_err());
}

/// "Propagation rule: Child confidence ≤ min(parent confidence, own confidence)", applied within a document: a fact
/// that names its parents in `derived_from` may not be more confident than any of them (an error).
#[test]
fn a_derived_fact_is_no_more_confident_than_its_parents() {
    let yaml = r#"
lctl: "3.0"
chain: {id: c, step: 2, source: a, target: b}
trace:
  - {step: 1, agent: a, action: "looked", confidence: 0.9, facts_added: [F1, F2, F3]}
facts:
  F1: {text: "base", confidence: 0.7, source: a}
  F2: {text: "derived too surely", confidence: 0.8, source: a, derived_from: [F1]}
  F3: {text: "derived fine", confidence: 0.6, source: a, derived_from: F1}
"#;
    let report = check_document(&parse(yaml).unwrap());
    let found: Vec<_> = report.by_rule(Rule::FactAboveParent).collect();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].severity, Severity::Error);
    assert_eq!(found[0].path, "facts.F2.confidence");
    assert!(found[0].message.contains("derived from F1 at 0.70"), "{}", found[0].message);

    let unknown = yaml.replace("derived_from: F1}", "derived_from: F9}");
    let report = check_document(&parse(&unknown).unwrap());
    assert!(report.by_rule(Rule::FactAboveParent).any(|f| f.path == "facts.F3.derived_from[0]"));
}

/// The same rule between a step and the facts it added or modified: a warning, since the spec's own Example 1 has
/// step 1 at 0.85 add F1 at 0.95 (so an error would refuse the spec's example).
#[test]
fn a_fact_above_the_step_that_produced_it_is_warned_about() {
    let step1 = fenced_blocks().into_iter().find(|b| b.contains("step: 1\n  source: code-analyzer")).unwrap();
    let report = check_document(&parse(&step1).unwrap());
    let found: Vec<_> = report.by_rule(Rule::FactAboveStep).collect();
    // F1 0.95, F2 0.90 and F3 1.0 were added by step 1 at 0.85.
    let paths: Vec<&str> = found.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["facts.F1.confidence", "facts.F2.confidence", "facts.F3.confidence"]);
    assert!(found.iter().all(|f| f.severity == Severity::Warning));
    assert!(!report.has_errors());

    // The producing step is the last one that touched the fact: F1 modified by step 2 at 0.92 is compared with 0.92.
    let yaml = r#"
lctl: "3.0"
trace:
  - {step: 1, agent: a, confidence: 0.99, facts_added: [F1]}
  - {step: 2, agent: b, confidence: 0.5, facts_modified: [F1]}
facts:
  F1: {text: "x", confidence: 0.6, source: b}
"#;
    let report = check_document(&parse(yaml).unwrap());
    let found: Vec<_> = report.by_rule(Rule::FactAboveStep).collect();
    assert_eq!(found.len(), 1);
    assert!(found[0].message.contains("step 2 (b) that produced it has 0.50"), "{}", found[0].message);
}
