//! The initiator driver's scenarios, run the same over HTTP and WebSocket (issue 51): one driver
//! (`ldp_session::runtime::InitiatorDriver`) keeps the answer deadlines, resumes a task whose answer was lost, submits
//! again a task the delegate never received, and gives up after a bounded number of lost answers, whatever carries
//! the messages. Each scenario goes through a TCP proxy that can cut, refuse or swallow, to one server speaking both
//! bindings.

use crate::support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ldp_session::runtime::{Client, DelegateRuntime, TaskOutcome, Transport};
use ldp_session::{DEFAULT_MAX_RESUMES, InitiatorConfig, SeededIds, SessionError, SystemClock};
use ldp_transport_http::HttpTransport;
use ldp_transport_ws::{ConnectOptions, ConnectSettings, RetryPolicy, WsServerConfig, WsTransport};
use ldp_types::{ErrorCategory, PayloadMode, SessionConfig, codes};
use serde_json::json;
use support::{Proxy, Server, TestDelegate, eventually, runtime, serve_both};

/// The binding a scenario runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    Http,
    Ws,
}

const WIRES: [Wire; 2] = [Wire::Http, Wire::Ws];

/// One delegate and its server behind a proxy, and a client of it over `wire` through the proxy.
struct Setup {
    delegate: Arc<TestDelegate>,
    rt: DelegateRuntime,
    proxy: Proxy,
    client: Client<Arc<dyn Transport>>,
    session: String,
    _server: Server,
}

/// Quick retries and reconnects, so that a scenario's recoveries take milliseconds.
fn quick() -> RetryPolicy {
    RetryPolicy { max_retries: 2, initial_backoff: Duration::from_millis(10), max_backoff: Duration::from_millis(50) }
}

async fn setup(wire: Wire, answer_timeout: Option<Duration>) -> Setup {
    let delegate = Arc::new(TestDelegate::default());
    let rt = runtime(delegate.clone());
    let server = serve_both(&rt, HashMap::new(), WsServerConfig::default()).await;
    let proxy = Proxy::start(server.addr).await;
    let transport: Arc<dyn Transport> = match wire {
        Wire::Http => {
            let mut options = ConnectOptions::default().retry(quick());
            if let Some(limit) = answer_timeout {
                options = options.request_timeout(limit);
            }
            Arc::new(HttpTransport::with_options(format!("http://{}", proxy.addr), options).unwrap())
        }
        Wire::Ws => {
            // Reconnects keep trying while the proxy refuses; the card comes from the server directly.
            let mut options =
                support::resuming().identity_url(format!("{}/.well-known/ldp-identity", server.http_url()));
            if let Some(limit) = answer_timeout {
                options = options.request_timeout(limit);
            }
            Arc::new(WsTransport::connect(proxy.ws_url(), options).await.unwrap())
        }
    };
    let cfg = InitiatorConfig::new("ldp:delegate:client");
    let client =
        Client::connect(transport, cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy())).await.unwrap();
    let config = SessionConfig { preferred_payload_modes: Some(vec![PayloadMode::Text]), ..Default::default() };
    let session = client.propose(config).await.unwrap().session_id;
    Setup { delegate, rt, proxy, client, session, _server: server }
}

/// Submits `input` to `skill` in the setup's session, on a task of its own.
fn spawn_submit(
    s: &Arc<Setup>,
    skill: &'static str,
    input: serde_json::Value,
) -> tokio::task::JoinHandle<Result<TaskOutcome, SessionError>> {
    let s = s.clone();
    tokio::spawn(async move { s.client.submit(&s.session, skill, input, None).await })
}

/// The outcome of a spawned submit, which must come within 10 s.
async fn outcome(wire: Wire, running: tokio::task::JoinHandle<Result<TaskOutcome, SessionError>>) -> TaskOutcome {
    let out = tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap();
    out.unwrap_or_else(|e| panic!("{wire:?}: {e:?}"))
}

fn started(s: &Setup) -> usize {
    s.delegate.started.lock().unwrap().len()
}

#[tokio::test]
async fn an_unanswered_task_fails_with_a_typed_timeout_at_the_drivers_deadline() {
    for wire in WIRES {
        let limit = Duration::from_millis(300);
        let s = setup(wire, Some(limit)).await;
        let before = Instant::now();
        let result = s.client.submit(&s.session, "wait", json!("never"), None).await;
        let took = before.elapsed();
        let Err(SessionError::Transport(e)) = result else {
            panic!("{wire:?}: expected a transport timeout, got {result:?}")
        };
        assert_eq!(e.code, codes::TIMEOUT, "{wire:?}: {e:?}");
        assert_eq!(e.category, ErrorCategory::Transport);
        assert!(!e.retryable, "{wire:?}: the task may run on");
        // The machine's error, at the machine's deadline.
        assert_eq!(e.message, format!("no answer within {limit:?}"), "{wire:?}");
        assert!(took >= limit && took < limit * 10, "{wire:?}: {took:?}");
        assert_eq!(s.client.pending_tasks(), 0, "{wire:?}: the machine forgot the task");
        // The session goes on.
        let next = s.client.submit(&s.session, "echo", json!("after"), None).await.unwrap();
        assert_eq!(next.output, json!({ "echo": "after" }), "{wire:?}");
    }
}

#[tokio::test]
async fn a_result_finished_while_the_answer_was_lost_arrives_after_the_resume() {
    for wire in WIRES {
        let s = Arc::new(setup(wire, None).await);
        let running = spawn_submit(&s, "wait", json!("w1"));
        eventually("the task to start", || s.rt.running_tasks() == 1).await;
        // The connection carrying the answer breaks, and the network stays down while the task finishes.
        s.proxy.set_open(false);
        s.proxy.cut();
        s.delegate.gate.add_permits(1);
        eventually("the task to finish", || s.rt.running_tasks() == 0).await;
        s.proxy.set_open(true);
        let out = outcome(wire, running).await;
        assert_eq!(out.output, json!({ "waited": "w1" }), "{wire:?}");
        assert_eq!(started(&s), 1, "{wire:?}: run once");
        assert_eq!(s.client.pending_tasks(), 0, "{wire:?}");
        let next = s.client.submit(&s.session, "echo", json!("after"), None).await.unwrap();
        assert_eq!(next.output, json!({ "echo": "after" }), "{wire:?}");
    }
}

#[tokio::test]
async fn a_task_still_running_at_the_resume_answers_later() {
    for wire in WIRES {
        let s = Arc::new(setup(wire, None).await);
        let running = spawn_submit(&s, "wait", json!("w2"));
        eventually("the task to start", || s.rt.running_tasks() == 1).await;
        s.proxy.cut();
        // The resume finds the task running (over HTTP it then polls; over WebSocket the result is pushed).
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!running.is_finished(), "{wire:?}: the task is still running");
        s.delegate.gate.add_permits(1);
        let out = outcome(wire, running).await;
        assert_eq!(out.output, json!({ "waited": "w2" }), "{wire:?}");
        assert_eq!(started(&s), 1, "{wire:?}");
    }
}

#[tokio::test]
async fn a_task_the_delegate_never_received_is_submitted_again_and_runs_once() {
    for wire in WIRES {
        let s = Arc::new(setup(wire, None).await);
        // The client writes the submit, the network swallows it, then the connection breaks.
        s.proxy.set_blackhole(true);
        let running = spawn_submit(&s, "echo", json!("lost"));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(started(&s), 0, "{wire:?}: the delegate never saw it");
        s.proxy.set_blackhole(false);
        s.proxy.cut();
        // The status query meets TASK_NOT_FOUND: the machine submits the task again, and its result is the answer.
        let out = outcome(wire, running).await;
        assert_eq!(out.output, json!({ "echo": "lost" }), "{wire:?}");
        assert_eq!(started(&s), 1, "{wire:?}: run once");
        assert_eq!(s.client.pending_tasks(), 0, "{wire:?}");
    }
}

#[tokio::test]
async fn a_task_whose_answers_keep_getting_lost_fails_after_a_bounded_number_of_resumes() {
    for wire in WIRES {
        let s = Arc::new(setup(wire, None).await);
        // Every connection breaks soon after it opens. Over HTTP everything sent is swallowed too, so each status
        // query is lost; over WebSocket each reconnect loses the answer of the task, which runs on.
        if wire == Wire::Http {
            s.proxy.set_blackhole(true);
        }
        let cutter = {
            let s = s.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(150)).await;
                    s.proxy.cut();
                }
            })
        };
        let before = Instant::now();
        let skill = if wire == Wire::Http { "echo" } else { "wait" };
        let result =
            tokio::time::timeout(Duration::from_secs(20), s.client.submit(&s.session, skill, json!("doomed"), None))
                .await
                .unwrap_or_else(|_| panic!("{wire:?}: the resumes were not bounded"));
        cutter.abort();
        let Err(SessionError::Transport(e)) = result else {
            panic!("{wire:?}: expected a transport error, got {result:?}")
        };
        assert_eq!(e.code, codes::TRANSPORT_ERROR, "{wire:?}: {e:?}");
        assert!(!e.retryable, "{wire:?}: the task may have run");
        assert_eq!(
            e.message,
            format!("the task's answer was lost {} times; it is not resumed again", DEFAULT_MAX_RESUMES + 1),
            "{wire:?}"
        );
        assert!(before.elapsed() < Duration::from_secs(20), "{wire:?}");
        assert!(started(&s) <= 1, "{wire:?}: never resubmitted over a task that runs");
        assert_eq!(s.client.pending_tasks(), 0, "{wire:?}");
    }
}
