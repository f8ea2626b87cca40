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

/// `ldp lctl fmt` prints canonical YAML that reads back as the same document and is its own canonical form, for every
/// spec example (and the standalone `lctl_ack` of the Receiving Protocol).
#[test]
fn fmt_is_canonical_and_idempotent_on_every_spec_example() {
    let dir = std::env::temp_dir().join(format!("ldp-lctl-fmt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in [
        "spec-minimal.yaml",
        "spec-example1-step1.yaml",
        "spec-example1-step2.yaml",
        "spec-example2-parallel-merge.yaml",
        "spec-example3-failed-chain.yaml",
        "spec-receiving-ack.yaml",
    ] {
        let first = ldp(&["lctl", "fmt", &fixture(name)]);
        assert_eq!(first.status.code(), Some(0), "{name}: {}", stderr(&first));
        let formatted = dir.join(name);
        std::fs::write(&formatted, &first.stdout).unwrap();
        let second = ldp(&["lctl", "fmt", formatted.to_str().unwrap()]);
        assert_eq!(stdout(&second), stdout(&first), "{name}: fmt is not idempotent");
        assert_eq!(ldp(&["lctl", "fmt", "--check", formatted.to_str().unwrap()]).status.code(), Some(0), "{name}");
        // The formatted text is the same document: the checks say the same about both.
        if name != "spec-receiving-ack.yaml" {
            let a = stdout(&ldp(&["lctl", "check", &fixture(name)]));
            let b = stdout(&ldp(&["lctl", "check", formatted.to_str().unwrap()]));
            assert_eq!(a.replace(&fixture(name), "F"), b.replace(formatted.to_str().unwrap(), "F"), "{name}");
        }
    }
    // The spec's own text is not canonical YAML (comments, flow style), and --check says so.
    assert_eq!(ldp(&["lctl", "fmt", "--check", &fixture("spec-example1-step2.yaml")]).status.code(), Some(1));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Receiving Protocol, step 4: "Acknowledge (recommended for chains)" with a standalone `lctl_ack:` block, which
/// `check` (after the document it acknowledges) and `ack` read.
#[test]
fn a_standalone_ack_is_read_by_check_and_ack() {
    let output = ldp(&["lctl", "check", &fixture("spec-example1-step2.yaml"), &fixture("spec-receiving-ack.yaml")]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}{}", stderr(&output));
    assert!(
        text.contains("lctl_ack of chain review-2024-001 step 3 by fix-implementer (received): loaded [F1, F4, F5]"),
        "{text}"
    );
    let alone = ldp(&["lctl", "check", &fixture("spec-receiving-ack.yaml")]);
    assert_eq!(alone.status.code(), Some(0), "{}", stderr(&alone));
    let ack = ldp(&["lctl", "ack", &fixture("spec-receiving-ack.yaml")]);
    assert_eq!(ack.status.code(), Some(0), "{}", stderr(&ack));
    assert!(stdout(&ack).starts_with("lctl_ack:\n"), "{}", stdout(&ack));
    assert!(stdout(&ack).contains("chain_id: review-2024-001"), "{}", stdout(&ack));
    // An ack of another chain, or of facts the document does not hold, is an error.
    let dir = std::env::temp_dir().join(format!("ldp-lctl-ack-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let wrong = dir.join("wrong-ack.yaml");
    let text = std::fs::read_to_string(fixture("spec-receiving-ack.yaml")).unwrap();
    std::fs::write(&wrong, text.replace("review-2024-001", "other-chain").replace("F5", "F9")).unwrap();
    let output = ldp(&["lctl", "check", &fixture("spec-example1-step2.yaml"), wrong.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    assert!(
        text.contains("acknowledges chain other-chain but the document before it is chain review-2024-001"),
        "{text}"
    );
    assert!(text.contains("F9 is not in the facts registry"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The chain of a delegated task, from the command line: `ldp serve --backend anthropic --delegate ...` in front of
/// an Anthropic Messages stub whose model calls two delegates in turn (each `tool_use` input streamed as
/// `input_json_delta` pieces), `ldp call --lctl FILE`, then `ldp lctl check FILE` and `ldp lctl render FILE`: each
/// hop is a step with the facts its delegate reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegated_tasks_chain_is_written_checked_and_drawn() {
    use ldp_llm::stub::{Flavor, Stub, StubConfig, StubTurn};
    use serde_json::json;

    // (delegate, skill, confidence, tokens, cost)
    let hops =
        [("ldp:delegate:extractor", "extract", 0.92, 150, 0.002), ("ldp:delegate:checker", "check", 0.81, 40, 0.0005)];
    let mut delegates = Vec::new();
    for (id, skill, confidence, tokens, cost) in hops {
        let server = ldp::Delegate::builder(id)
            .skill(skill, move |input: String, _cx: ldp::TaskContext| async move {
                let out = ldp::Output::new(input.to_uppercase().as_str()).confidence(confidence).tokens(tokens);
                Ok::<_, ldp::LdpError>(out.cost_usd(cost))
            })
            .spawn("127.0.0.1:0")
            .await
            .unwrap();
        delegates.push(server);
    }
    let script = vec![
        StubTurn::call(hops[0].1, &json!({"input": "figures"})),
        StubTurn::call(hops[1].1, &json!({"input": "totals"})),
        StubTurn::text("checked"),
    ];
    let stub = Stub::start(StubConfig::new(Flavor::Anthropic).with_script(script)).await.unwrap();
    let (base, first, second) = (stub.base_url(), delegates[0].url(), delegates[1].url());
    #[rustfmt::skip]
    let (_planner, url) = crate::support::serve(&[
        "--backend", "anthropic", "--base-url", &base, "--model", "stub-model",
        "--delegate", &first, "--delegate", &second,
    ], std::process::Stdio::null());
    let dir = crate::support::TempDir::new("lctl-chain");
    let file = dir.path("chain.yaml");
    let (url, file2) = (url.clone(), file.clone());
    let called = tokio::task::spawn_blocking(move || {
        ldp(&["call", &url, "chat", "check the figures", "--json", "--lctl", &file2])
    })
    .await
    .unwrap();
    assert_eq!(called.status.code(), Some(0), "{}", stderr(&called));
    let answer: serde_json::Value = serde_json::from_str(stdout(&called).trim()).unwrap();
    assert_eq!(answer["output"], "checked");
    let lineage = answer["provenance"]["lineage"].as_array().unwrap();
    assert_eq!(lineage.len(), hops.len(), "{lineage:?}");
    for (entry, (id, skill, confidence, tokens, cost)) in lineage.iter().zip(hops) {
        assert_eq!(
            (&entry["delegate_id"], &entry["skill"], &entry["confidence"], &entry["tokens_used"], &entry["cost_usd"]),
            (&json!(id), &json!(skill), &json!(confidence), &json!(tokens), &json!(cost)),
            "{entry}"
        );
        assert!(entry["latency_ms"].is_u64(), "{entry}");
    }

    let checked = ldp(&["lctl", "check", &file]);
    assert_eq!(checked.status.code(), Some(0), "{}{}", stdout(&checked), stderr(&checked));
    let drawn = stdout(&ldp(&["lctl", "render", &file, "--format", "mermaid"]));
    let timeline = stdout(&ldp(&["lctl", "render", &file, "--format", "timeline"]));
    for (step, entry) in lineage.iter().enumerate() {
        let title = format!("{}: {} ({} ms)", step + 1, entry["delegate_id"].as_str().unwrap(), entry["latency_ms"]);
        assert!(drawn.contains(&title), "{title} not in {drawn}");
        assert!(drawn.contains(&format!("delegated {}", entry["skill"].as_str().unwrap())), "{drawn}");
        assert!(timeline.contains(&entry["confidence"].to_string()), "{timeline}");
    }
    for server in delegates {
        server.shutdown().await.unwrap();
    }
}
