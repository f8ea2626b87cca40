//! The `ldp` binary's OpenTelemetry export, received by a real OTLP/HTTP receiver (an axum route at `/v1/traces`
//! decoding `ExportTraceServiceRequest` with `opentelemetry-proto`'s prost types): `ldp lctl export --otlp`, and
//! `ldp serve` / `ldp call` with `OTEL_EXPORTER_OTLP_ENDPOINT` / `--otlp-endpoint` joining one trace across two
//! processes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::HashMap;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use ldp_lctl::LctlDocument;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode as SpanStatus;
use prost::Message as _;

/// Spans received, each with its resource's `service.name`; and the count of undecodable requests.
#[derive(Default)]
struct Received {
    spans: Vec<(String, Span)>,
    undecodable: usize,
}

type Store = Arc<Mutex<Received>>;

async fn receive(State(store): State<Store>, body: Bytes) -> axum::response::Response {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        store.lock().unwrap().undecodable += 1;
        return StatusCode::BAD_REQUEST.into_response();
    };
    let mut received = store.lock().unwrap();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| kv.value.as_ref())
            .and_then(|v| match &v.value {
                Some(any_value::Value::StringValue(s)) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for scope in resource.scope_spans {
            received.spans.extend(scope.spans.into_iter().map(|s| (service.clone(), s)));
        }
    }
    ([(header::CONTENT_TYPE, "application/x-protobuf")], ExportTraceServiceResponse::default().encode_to_vec())
        .into_response()
}

/// Starts a receiver on a thread of its own; returns its base URL and what it receives.
fn receiver() -> (String, Store) {
    let store = Store::default();
    let app = axum::Router::new().route("/v1/traces", axum::routing::post(receive)).with_state(store.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    (format!("http://{}", rx.recv().unwrap()), store)
}

/// Waits until `done` holds for the received spans (at most 30 s), then returns them.
fn wait_for(store: &Store, done: impl Fn(&[(String, Span)]) -> bool) -> Vec<(String, Span)> {
    let started = Instant::now();
    loop {
        {
            let received = store.lock().unwrap();
            assert_eq!(received.undecodable, 0, "every export decodes as ExportTraceServiceRequest");
            if done(&received.spans) {
                return received.spans.clone();
            }
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the spans did not arrive within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a any_value::Value> {
    span.attributes.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref()).and_then(|v| v.value.as_ref())
}

fn f64_attr(span: &Span, key: &str) -> Option<f64> {
    match attr(span, key) {
        Some(any_value::Value::DoubleValue(v)) => Some(*v),
        _ => None,
    }
}

fn str_attr<'a>(span: &'a Span, key: &str) -> Option<&'a str> {
    match attr(span, key) {
        Some(any_value::Value::StringValue(s)) => Some(s),
        _ => None,
    }
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
    let spans: Vec<Span> = store.lock().unwrap().spans.iter().map(|(_, s)| s.clone()).collect();
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
    let spans: Vec<Span> = store.lock().unwrap().spans.iter().map(|(_, s)| s.clone()).collect();
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
    let spans = wait_for(&store, |spans| {
        spans.iter().any(|(service, s)| service == "ldp-serve-test" && s.name == "ldp.handle TASK_SUBMIT")
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
