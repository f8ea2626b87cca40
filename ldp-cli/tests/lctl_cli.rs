//! `ldp lctl ...` run as a real binary against the spec's examples and their broken variants.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Output};

fn fixture(name: &str) -> String {
    format!("{}/../ldp-lctl/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn ldp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ldp")).args(args).output().unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

#[test]
fn check_passes_every_spec_example() {
    for name in [
        "spec-minimal.yaml",
        "spec-example1-step1.yaml",
        "spec-example1-step2.yaml",
        "spec-example2-parallel-merge.yaml",
        "spec-example3-failed-chain.yaml",
    ] {
        let output = ldp(&["lctl", "check", &fixture(name)]);
        assert_eq!(output.status.code(), Some(0), "{name}: {}", stdout(&output));
        assert!(stdout(&output).contains("0 error(s)"), "{name}");
    }
}

#[test]
fn check_reports_example_3_failure_with_its_analysis() {
    let output = ldp(&["lctl", "check", &fixture("spec-example3-failed-chain.yaml")]);
    let text = stdout(&output);
    assert!(text.contains("chain FAILED at step 4 (deploy-agent)"), "{text}");
    assert!(text.contains("error: ConnectionRefused: kubectl cannot reach api-server"), "{text}");
    assert!(text.contains("facts at failure: F1, F2, F3, F4, F5"), "{text}");
    assert!(
        text.contains("root cause: environment-checker verified wrong environment (staging vs production)"),
        "{text}"
    );
    assert!(text.contains("recommendation: Add explicit environment parameter validation at step 2"), "{text}");
}

#[test]
fn check_identifies_example_2_branches_and_merge() {
    let output = ldp(&["lctl", "check", &fixture("spec-example2-parallel-merge.yaml")]);
    let text = stdout(&output);
    assert!(
        text.contains(
            "parallel step 2: 3 branches (frontend-dev, backend-dev, test-writer); merged at step 3 by orchestrator (conflicts: F6)"
        ),
        "{text}"
    );
}

#[test]
fn check_fails_with_a_diagnostic_naming_file_rule_and_path() {
    let file = fixture("broken/handoff-unknown-fact.yaml");
    let output = ldp(&["lctl", "check", &file]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    assert!(
        text.contains(&format!(
            "{file}: error [handoff-unknown-fact] handoff.critical_facts[3]: F9 is not in the facts registry"
        )),
        "{text}"
    );
}

#[test]
fn check_runs_the_chain_checker_over_several_files() {
    let first = fixture("spec-example1-step1.yaml");
    let good = ldp(&["lctl", "check", &first, &fixture("spec-example1-step2.yaml")]);
    assert_eq!(good.status.code(), Some(0), "{}", stdout(&good));
    // F2 changed wording between the spec's two hops: a warning, not a failure.
    assert!(stdout(&good).contains("warning [fact-changed-unrecorded] facts.F2.text"), "{}", stdout(&good));

    let lost = fixture("broken/chain-critical-fact-lost.yaml");
    let bad = ldp(&["lctl", "check", &first, &lost]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        stdout(&bad).contains(&format!("{lost}: error [critical-fact-lost] facts: critical fact F2")),
        "{}",
        stdout(&bad)
    );
    // Alone, the same file breaks no single-document rule.
    assert_eq!(ldp(&["lctl", "check", &lost]).status.code(), Some(0));
}

#[test]
fn check_fails_on_malformed_yaml_with_the_path() {
    let dir = std::env::temp_dir().join(format!("ldp-lctl-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.yaml");
    std::fs::write(&file, "lctl: \"3.0\"\nfacts:\n  F2: {text: x, confidence: 1.5}\n").unwrap();
    let output = ldp(&["lctl", "check", file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("facts.F2.confidence: expected 0.0-1.0"), "{}", stderr(&output));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_distinguishes_an_unreadable_file() {
    let output = ldp(&["lctl", "check", "/nonexistent/trace.yaml"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("cannot read"), "{}", stderr(&output));
}

#[test]
fn render_writes_each_format() {
    let failed = fixture("spec-example3-failed-chain.yaml");
    let mermaid = ldp(&["lctl", "render", &failed, "--format", "mermaid"]);
    assert_eq!(mermaid.status.code(), Some(0));
    assert!(stdout(&mermaid).starts_with("flowchart TD"));
    assert!(stdout(&mermaid).contains("class s3 failed"), "{}", stdout(&mermaid));

    let dot = ldp(&["lctl", "render", &failed, "--format", "dot"]);
    assert!(stdout(&dot).starts_with("digraph \"deploy-2024-042\""), "{}", stdout(&dot));

    let timeline = ldp(&["lctl", "render", &failed, "--format", "timeline"]);
    assert!(
        stdout(&timeline).contains("step 4 deploy-agent: 0.92 -> 0.00 (high confidence -> uncertain)"),
        "{}",
        stdout(&timeline)
    );

    let parallel = ldp(&["lctl", "render", &fixture("spec-example2-parallel-merge.yaml"), "--format", "dot"]);
    assert!(stdout(&parallel).contains("subgraph cluster_parallel_2"), "{}", stdout(&parallel));

    let unknown = ldp(&["lctl", "render", &failed, "--format", "svg"]);
    assert_eq!(unknown.status.code(), Some(2), "clap rejects an unknown format");
}

#[test]
fn ack_prints_the_spec_acknowledgement() {
    let output = ldp(&["lctl", "ack", &fixture("spec-example1-step2.yaml")]);
    assert_eq!(output.status.code(), Some(0));
    let ack = ldp_lctl::LctlAck::from_yaml(&stdout(&output)).unwrap();
    let expected =
        ldp_lctl::LctlAck::from_yaml(&std::fs::read_to_string(fixture("spec-receiving-ack.yaml")).unwrap()).unwrap();
    assert_eq!(ack, expected);
}

#[test]
fn ack_lists_low_confidence_critical_facts() {
    let output = ldp(&["lctl", "ack", &fixture("broken/critical-low-confidence.yaml"), "--agent", "reviewer-2"]);
    assert_eq!(output.status.code(), Some(0));
    let ack = ldp_lctl::LctlAck::from_yaml(&stdout(&output)).unwrap();
    assert_eq!(ack.agent, "reviewer-2");
    assert_eq!(ack.confidence_concerns, vec![ldp_lctl::FactId::new("F2").unwrap()]);
    assert!(stderr(&output).contains("concern: F2 has confidence 0.50 (flag for human review)"), "{}", stderr(&output));
}

#[test]
fn ack_fails_without_a_receiver() {
    let output = ldp(&["lctl", "ack", &fixture("spec-example3-failed-chain.yaml")]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("chain.target is not set"), "{}", stderr(&output));
}
