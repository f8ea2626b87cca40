//! Issue 50: `ldp serve` shuts down gracefully on SIGTERM, as a process. New sessions are refused from the signal
//! on; a task that finishes within `--shutdown-grace` is answered with its result; one still running at the end of
//! the grace is answered TASK_FAILED `CANCELLED` (retryable) before the process exits 0.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ldp_llm::stub::{Flavor, Stub, StubConfig};
use ldp_session::{Initiator, InitiatorConfig, InitiatorEvent, SeededIds, SystemClock};
use ldp_types::{Body, Envelope, SessionConfig};

use crate::support::{Guard, send, serve_command};

/// `ldp serve` fronting a stub model that answers after `latency`, with `--shutdown-grace grace`.
async fn slow_delegate(latency: Duration, grace: u64) -> (Guard, String, Stub) {
    let stub = Stub::start(StubConfig::new(Flavor::OpenAi).with_latency(latency).with_api_key("k")).await.unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_ldp"));
    command
        .args(["serve", "--bind", "127.0.0.1:0", "--backend", "openai", "--base-url", &stub.base_url()])
        .args(["--model", "stub", "--api-key-env", "LDP_TEST_SHUTDOWN_KEY", "--skill", "chat"])
        .args(["--shutdown-grace", &grace.to_string()])
        .env("LDP_TEST_SHUTDOWN_KEY", "k")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let (guard, url) = serve_command(command);
    (guard, url, stub)
}

/// A session, and a task submitted in it whose answer is awaited on a task of its own.
async fn submit_slow_task(url: &str) -> (Initiator, tokio::task::JoinHandle<Envelope>) {
    let http = reqwest::Client::new();
    let cfg = InitiatorConfig::new("ldp:delegate:shutdown-client");
    let mut init = Initiator::new(cfg, "ldp:delegate:llm", Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let accept = send(&http, url, &init.propose(SessionConfig::default())).await;
    init.handle_envelope(accept, None).unwrap();
    let session = std::iter::from_fn(|| init.poll_event())
        .find_map(|e| match e {
            InitiatorEvent::SessionEstablished { session_id, .. } => Some(session_id),
            _ => None,
        })
        .expect("a session");
    let submit = init.submit(&session, "chat", serde_json::json!("hello"), None, None).unwrap();
    let url = url.to_owned();
    let answer = tokio::spawn(async move { send(&http, &url, &submit).await });
    // The task reaches the model before the signal.
    tokio::time::sleep(Duration::from_millis(400)).await;
    (init, answer)
}

fn sigterm(server: &Guard) {
    let status = Command::new("kill").args(["-TERM", &server.0.id().to_string()]).status().unwrap();
    assert!(status.success());
}

/// Waits for the process to exit (within `within`) and returns whether it exited 0.
fn exited_cleanly(server: &mut Guard, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = server.0.try_wait().unwrap() {
            return status.success();
        }
        assert!(Instant::now() < deadline, "ldp serve did not exit within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_within_the_grace_finishes_and_new_sessions_are_refused() {
    let (mut server, url, _stub) = slow_delegate(Duration::from_millis(1500), 10).await;
    let (mut init, answer) = submit_slow_task(&url).await;
    sigterm(&server);
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Draining: a new session is refused, typed and retryable.
    let refused = send(&reqwest::Client::new(), &url, &init.propose(SessionConfig::default())).await;
    match &refused.body {
        Body::SessionReject(r) => {
            let error = r.error.as_ref().unwrap();
            assert_eq!((error.code.as_str(), error.retryable), ("CAPACITY_EXCEEDED", true), "{error:?}");
        }
        other => panic!("expected SESSION_REJECT while draining, got {}", other.type_name()),
    }
    let answer = answer.await.unwrap();
    assert!(matches!(answer.body, Body::TaskResult(_)), "{:?}", answer.body.type_name());
    assert!(exited_cleanly(&mut server, Duration::from_secs(10)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_past_the_grace_is_answered_cancelled_before_the_exit() {
    let (mut server, url, _stub) = slow_delegate(Duration::from_secs(30), 1).await;
    let (_init, answer) = submit_slow_task(&url).await;
    let signalled = Instant::now();
    sigterm(&server);
    let answer = tokio::time::timeout(Duration::from_secs(10), answer).await.unwrap().unwrap();
    match &answer.body {
        Body::TaskFailed(f) => {
            assert_eq!((f.error.code.as_str(), f.error.retryable), ("CANCELLED", true), "{:?}", f.error);
            assert!(f.error.message.contains("shutting down"), "{}", f.error.message);
        }
        other => panic!("expected TASK_FAILED, got {}", other.type_name()),
    }
    assert!(signalled.elapsed() >= Duration::from_millis(900), "answered before the grace ran out");
    assert!(exited_cleanly(&mut server, Duration::from_secs(10)));
}
