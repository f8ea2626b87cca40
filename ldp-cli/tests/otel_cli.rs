//! The `ldp` binary's OpenTelemetry export, received by a real OTLP/HTTP receiver (`ldp-otlp-receiver`: an axum
//! route at `/v1/traces` decoding `ExportTraceServiceRequest` with `opentelemetry-proto`'s prost types): `ldp lctl export --otlp`, and
//! `ldp serve` / `ldp call` with `OTEL_EXPORTER_OTLP_ENDPOINT` / `--otlp-endpoint` joining one trace across two
//! processes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::collections::HashMap;
use std::process::{Command, Output, Stdio};

use ldp_lctl::LctlDocument;
use ldp_otlp_receiver::{Receiver, Span, SpanStatus, f64_attr, str_attr};

/// A receiver (on a thread of its own) for one test; its base URL and the receiver.
fn receiver() -> (String, Receiver) {
    let receiver = Receiver::start();
    (receiver.url().to_owned(), receiver)
}

fn fixture(name: &str) -> String {
    format!("{}/../ldp-lctl/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn ldp(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ldp"));
    command.args(args).env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

#[test]
fn lctl_export_sends_a_chain_as_one_trace_of_steps_with_facts_and_confidence() {
    let (url, store) = receiver();
    let files = [fixture("spec-example1-step1.yaml"), fixture("spec-example1-step2.yaml")];
    let out = ldp(&["lctl", "export", "--otlp", &url, &files[0], &files[1]], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // The exporter flushed before the process exited: everything is there already.
    let spans: Vec<Span> = store.spans();
    let last = LctlDocument::from_yaml(&std::fs::read_to_string(&files[1]).unwrap()).unwrap();
    let chain_id = &last.chain.as_ref().unwrap().id;
    let root = spans.iter().find(|s| s.name == format!("lctl.chain {chain_id}")).expect("the chain's span");
    assert!(root.parent_span_id.is_empty());
    assert_eq!(spans.len(), 1 + last.trace.len(), "the chain and one span per step");
    for step in &last.trace {
        let span = spans
            .iter()
            .find(|s| s.name == format!("lctl.step {} {}", step.step, step.agent))
            .unwrap_or_else(|| panic!("step {}", step.step));
        assert_eq!(span.trace_id, root.trace_id, "one trace");
        assert_eq!(span.parent_span_id, root.span_id, "a child of the chain");
        assert_eq!(str_attr(span, "lctl.agent"), Some(step.agent.as_str()));
        assert_eq!(f64_attr(span, "lctl.confidence"), step.confidence.map(|c| c.value()));
        assert_eq!(str_attr(span, "lctl.action"), step.action.as_deref());
        // The facts this step produced carry their text and confidence.
        for (id, fact) in last.facts.iter().filter(|(_, f)| f.step == Some(step.step)) {
            assert_eq!(f64_attr(span, &format!("lctl.fact.{}.confidence", id.as_str())), Some(fact.confidence.value()));
            assert_eq!(str_attr(span, &format!("lctl.fact.{}.text", id.as_str())), Some(fact.text.as_str()));
        }
    }
    assert!(spans.iter().all(|s| s.end_time_unix_nano >= s.start_time_unix_nano));
}

#[test]
fn lctl_export_marks_a_failed_chain_and_its_failed_step() {
    let (url, store) = receiver();
    let file = fixture("spec-example3-failed-chain.yaml");
    let out = ldp(&["lctl", "export", "--otlp", &url, &file], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = LctlDocument::from_yaml(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let spans: Vec<Span> = store.spans();
    let is_error = |s: &Span| s.status.as_ref().is_some_and(|st| st.code == SpanStatus::Error as i32);
    let root = spans.iter().find(|s| s.parent_span_id.is_empty()).unwrap();
    assert!(is_error(root), "the failed chain's span is an error");
    for step in &doc.trace {
        let span = spans.iter().find(|s| s.name == format!("lctl.step {} {}", step.step, step.agent)).unwrap();
        assert_eq!(is_error(span), step.error.is_some(), "step {}", step.step);
    }
    // An unreachable or malformed endpoint is a usage error, before anything is sent.
    let out = ldp(&["lctl", "export", "--otlp", "localhost:4318", &file], &[]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn serve_and_call_export_one_trace_across_two_processes() {
    let (url, store) = receiver();
    // The server takes the standard variable; a short batch delay so its spans arrive while it runs.
    let mut command = Command::new(env!("CARGO_BIN_EXE_ldp"));
    command
        .args(["serve", "--bind", "127.0.0.1:0"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &url)
        .env("OTEL_SERVICE_NAME", "ldp-serve-test")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let (_server, server_url) = support::serve_command(command);
    // The client takes the flag.
    let out = ldp(
        &["--otlp-endpoint", &url, "call", &server_url, "echo", "7", "--json"],
        &[("OTEL_SERVICE_NAME", "ldp-call-test")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // The server span closes after the handling span, and may be exported in a later batch: wait for both.
    let spans = store.wait_for(|spans| {
        spans.iter().any(|(service, handled)| {
            service == "ldp-serve-test"
                && handled.name == "ldp.handle TASK_SUBMIT"
                && spans.iter().any(|(_, server)| server.span_id == handled.parent_span_id)
        })
    });
    let by_id: HashMap<&[u8], &(String, Span)> = spans.iter().map(|e| (e.1.span_id.as_slice(), e)).collect();
    let (_, call) =
        spans.iter().find(|(svc, s)| svc == "ldp-call-test" && s.name == "ldp.call").expect("ldp call's span");
    let (_, handled) =
        spans.iter().find(|(svc, s)| svc == "ldp-serve-test" && s.name == "ldp.handle TASK_SUBMIT").unwrap();
    assert_eq!(handled.trace_id, call.trace_id, "the server's handling is in the client's trace");
    assert_eq!(str_attr(handled, "ldp.skill"), Some("echo"));
    // server span <- the client's send span (another process) <- ldp.call
    let (server_svc, server) = by_id[handled.parent_span_id.as_slice()];
    assert_eq!((server_svc.as_str(), server.name.as_str()), ("ldp-serve-test", "POST /ldp/messages"));
    let (send_svc, send) = by_id[server.parent_span_id.as_slice()];
    assert_eq!((send_svc.as_str(), send.name.as_str()), ("ldp-call-test", "ldp.send TASK_SUBMIT"));
    assert_eq!(send.parent_span_id, call.span_id);

    // A malformed endpoint is a usage error.
    let out = ldp(&["--otlp-endpoint", "not a url", "call", &server_url, "echo", "7"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A delegate that delegates: the sub-task its model's tool call becomes is handled in the caller's trace, below
/// the planner's own handling of the task (issue 52: the hops are child spans of the task's trace), across three
/// processes (the caller, the planner, the sub-delegate).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegated_hop_is_a_child_span_of_the_planners_task() {
    use ldp_llm::stub::{Flavor, Stub, StubConfig, StubTurn};

    let (url, store) = receiver();
    let serve = |service: &str, args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ldp"));
        command
            .args(["serve", "--bind", "127.0.0.1:0"])
            .args(args)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &url)
            .env("OTEL_SERVICE_NAME", service)
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        support::serve_command(command)
    };
    let (_sub, sub_url) = serve("ldp-sub", &["--delegate-id", "ldp:delegate:sub"]);
    let script = vec![StubTurn::call("echo", &serde_json::json!({"input": "7"})), StubTurn::text("it echoed 7")];
    let stub = Stub::start(StubConfig::new(Flavor::OpenAi).with_script(script)).await.unwrap();
    let base = stub.base_url();
    #[rustfmt::skip]
    let (_planner, planner_url) = serve("ldp-planner", &[
        "--backend", "openai", "--base-url", &base, "--model", "stub", "--skill", "chat", "--delegate", &sub_url,
    ]);
    let out = tokio::task::spawn_blocking(move || {
        ldp(&["--otlp-endpoint", &url, "call", &planner_url, "chat", "echo 7"], &[("OTEL_SERVICE_NAME", "ldp-call")])
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("it echoed 7"));

    let spans = store.wait_for(|spans| {
        spans.iter().any(|(service, s)| service == "ldp-sub" && s.name == "ldp.handle TASK_SUBMIT")
            && spans.iter().any(|(service, s)| service == "ldp-planner" && s.name == "ldp.handle TASK_SUBMIT")
    });
    let by_id: HashMap<&[u8], &(String, Span)> = spans.iter().map(|e| (e.1.span_id.as_slice(), e)).collect();
    let (_, call) = spans.iter().find(|(svc, s)| svc == "ldp-call" && s.name == "ldp.call").expect("ldp call's span");
    let (_, planned) =
        spans.iter().find(|(svc, s)| svc == "ldp-planner" && s.name == "ldp.handle TASK_SUBMIT").unwrap();
    let (_, hop) = spans.iter().find(|(svc, s)| svc == "ldp-sub" && s.name == "ldp.handle TASK_SUBMIT").unwrap();
    assert_eq!(planned.trace_id, call.trace_id, "the planner handles the task in the caller's trace");
    assert_eq!(hop.trace_id, call.trace_id, "the hop is in the same trace");
    // Up from the hop, through the planner's outbound send, to the planner's handling of the task.
    let mut ancestors = Vec::new();
    let mut parent = hop.parent_span_id.as_slice();
    while let Some((service, span)) = by_id.get(parent) {
        ancestors.push(format!("{service}: {}", span.name));
        if span.span_id == planned.span_id {
            break;
        }
        parent = span.parent_span_id.as_slice();
    }
    assert_eq!(
        ancestors.last().map(String::as_str),
        Some("ldp-planner: ldp.handle TASK_SUBMIT"),
        "the hop's ancestors: {ancestors:?}"
    );
    assert!(ancestors.iter().any(|a| a.starts_with("ldp-planner: ldp.send TASK_SUBMIT")), "{ancestors:?}");
}
