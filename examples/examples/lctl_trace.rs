//! Run with: cargo run -p ldp-examples --example lctl_trace
//!
//! A three-hop review chain traced with LCTL: the analyzer hands off to the reviewer, the
//! reviewer runs the receiving protocol and emits the next hop, the chain checker vouches for
//! the whole sequence, and the trace is rendered as a timeline and as Mermaid.

use ldp_lctl::{
    Confidence, Fact, FactId, LctlError, NewFact, NextStep, RenderFormat, check_chain, parse, receive, render,
};

const FIRST_HOP: &str = r#"
lctl: "3.0"
purpose: observability
chain: {id: review-2024-001, step: 1, source: code-analyzer, target: security-reviewer}
trace:
  - step: 1
    agent: code-analyzer
    action: "Analyzed UserController.py, found potential issues"
    confidence: 0.85
    facts_added: [F1, F2]
facts:
  F1: {text: "UserController.py:45-52 constructs SQL from user input", confidence: 0.95, source: code-analyzer, step: 1}
  F2: {text: "No input validation detected on user_id parameter", confidence: 0.65, source: code-analyzer, step: 1}
handoff:
  critical_facts: [F1, F2]
instruction: Assess whether the SQL construction is exploitable.
"#;

fn main() -> Result<(), LctlError> {
    let first = parse(FIRST_HOP)?;

    // The reviewer receives the block: F2 is critical but only 0.65, so the ack raises it.
    let reception = receive(FIRST_HOP, None)?;
    println!("{}", reception.ack.to_yaml()?);
    for concern in &reception.concerns {
        println!("# concern: {} at {} -> {}", concern.fact, concern.confidence, concern.advice);
    }

    // It confirms the injection and derives a severity from F1; the propagation rule caps the
    // new fact at min(F1's 0.95, the step's own 0.90).
    let mut step =
        NextStep::new("security-reviewer", "Confirmed SQL injection, rated Critical", Confidence::new(0.90)?);
    step.target = Some("fix-implementer".into());
    step.new_facts.push(NewFact {
        id: FactId::new("F3")?,
        fact: Fact::new("CVSS 9.8: unauthenticated remote exploitation", Confidence::new(0.88)?),
        derived_from: vec![FactId::new("F1")?],
    });
    step.critical_facts.push(FactId::new("F3")?);
    step.instruction = Some("Implement parameterized queries in UserController.py.".into());
    let second = reception.next_hop(step)?;

    let report = check_chain(&[first, second.clone()]);
    println!("# chain check: {} finding(s), errors: {}", report.findings.len(), report.has_errors());
    for finding in &report.findings {
        println!("#   hop {}: {finding}", finding.document + 1);
    }

    println!("\n{}", second.to_yaml()?);
    println!("{}", render(&second, RenderFormat::Timeline));
    println!("{}", render(&second, RenderFormat::Mermaid));
    Ok(())
}
