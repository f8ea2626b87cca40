#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The end-to-end flow, written once over any `Transport` and run over HTTP and over WebSocket against one server
//! that speaks both: handshake, provenance, payload fallback, pushed progress, concurrent sessions, cancellation of a
//! running task, close.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::support::{TestDelegate, eventually, runtime, serve_both};
use ldp_session::runtime::{Client, Submission, Transport};
use ldp_session::{InitiatorConfig, Misuse, SeededIds, SessionError, SystemClock};
use ldp_transport_http::HttpTransport;
use ldp_transport_ws::{WsOptions, WsServerConfig, WsTransport};
use ldp_types::{PayloadMode, SemanticFrame, SessionConfig, codes};
use serde_json::json;

async fn client<T: Transport>(transport: T) -> Client<T> {
    let cfg = InitiatorConfig::new("ldp:delegate:client");
    Client::connect(transport, cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy())).await.unwrap()
}

fn text_only() -> SessionConfig {
    SessionConfig { preferred_payload_modes: Some(vec![PayloadMode::Text]), ..Default::default() }
}

/// The one test body.
async fn flow<T: Transport + 'static>(
    c: Client<T>,
    delegate: Arc<TestDelegate>,
    rt: ldp_session::runtime::DelegateRuntime,
) {
    let c = Arc::new(c);
    assert_eq!(c.manifest().unwrap().skills, vec!["echo", "progress", "wait", "frames", "slow"]);

    // Handshake, result with provenance.
    let s = c.propose(SessionConfig::default()).await.unwrap();
    assert_eq!(s.mode, PayloadMode::SemanticFrame);
    let frame = SemanticFrame::new("echo", "repeat").to_input();
    let out = c.submit(&s.session_id, "echo", frame.clone(), None).await.unwrap();
    assert_eq!(out.output, json!({ "echo": frame }));
    assert_eq!(out.provenance.produced_by, "ldp:delegate:test");
    assert_eq!(out.provenance.session_id.as_deref(), Some(s.session_id.as_str()));

    // RFC 4.3 fallback, automatically.
    let out = c.submit(&s.session_id, "frames", SemanticFrame::new("t", "do it").to_input(), None).await.unwrap();
    assert_eq!(out.fallbacks, vec![(PayloadMode::SemanticFrame, PayloadMode::Text)]);

    // Progress pushed while the task runs.
    let t = c.propose(text_only()).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let out = c.submit_task(Submission::new(&t.session_id, "progress", json!("p")).progress(tx)).await.unwrap();
    assert_eq!(out.output, json!({ "got": "p" }));
    let p = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap();
    assert_eq!((p.progress, p.message.as_deref()), (Some(0.5), Some("half")));

    // Concurrent sessions, each answered with its own result.
    let mut jobs = Vec::new();
    for i in 0..16 {
        let c = c.clone();
        jobs.push(tokio::spawn(async move {
            let s = c.propose(text_only()).await.unwrap();
            for j in 0..4 {
                let input = json!(format!("{i}-{j}"));
                let skill = if j == 0 { "slow" } else { "echo" };
                let out = c.submit(&s.session_id, skill, input.clone(), None).await.unwrap();
                assert_eq!(out.output.to_value().unwrap()[skill], input);
            }
            c.close(&s.session_id).await.unwrap();
        }));
    }
    for j in jobs {
        j.await.unwrap();
    }

    // TASK_CANCEL reaches the running task; its submitter gets a definite CANCELLED.
    let running = {
        let (c, sid) = (c.clone(), t.session_id.clone());
        tokio::spawn(async move { c.submit(&sid, "wait", json!("never"), None).await })
    };
    eventually("the task to start", || rt.running_tasks() == 1).await;
    let key = delegate.started.lock().unwrap().iter().rev().find(|k| k.session_id == t.session_id).unwrap().clone();
    c.cancel(&key).await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), running).await.unwrap().unwrap();
    let SessionError::Peer(e) = result.unwrap_err() else { panic!() };
    assert_eq!(e.code, codes::CANCELLED);
    assert_eq!(rt.running_tasks(), 0);

    // Close; the closed session refuses further tasks.
    c.close(&s.session_id).await.unwrap();
    let err = c.submit(&s.session_id, "echo", json!("x"), None).await.unwrap_err();
    assert!(
        matches!(
            err,
            SessionError::Peer(_)
                | SessionError::Misuse(Misuse::NotActive { .. })
                | SessionError::Misuse(Misuse::UnknownSession(_))
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn flow_over_http() {
    let delegate = Arc::new(TestDelegate::default());
    let rt = runtime(delegate.clone());
    let server = serve_both(&rt, HashMap::new(), WsServerConfig::default()).await;
    let c = client(HttpTransport::new(server.http_url()).unwrap()).await;
    flow(c, delegate, rt).await;
}

#[tokio::test]
async fn flow_over_websocket() {
    let delegate = Arc::new(TestDelegate::default());
    let rt = runtime(delegate.clone());
    let server = serve_both(&rt, HashMap::new(), WsServerConfig::default()).await;
    // The one-line change: the same URL, another transport.
    let c = client(WsTransport::connect(server.http_url(), WsOptions::default()).await.unwrap()).await;
    assert_eq!(c.transport().stats().connections, 1);
    flow(c, delegate, rt).await;
    assert_eq!(server.ws.connections(), 1, "everything went over one connection");
}

#[tokio::test]
async fn many_sessions_share_one_connection() {
    let delegate = Arc::new(TestDelegate::default());
    let rt = runtime(delegate.clone());
    let server = serve_both(&rt, HashMap::new(), WsServerConfig::default()).await;
    let c = Arc::new(client(WsTransport::connect(server.ws_url(), WsOptions::default()).await.unwrap()).await);
    let mut jobs = Vec::new();
    for i in 0..100 {
        let c = c.clone();
        jobs.push(tokio::spawn(async move {
            let s = c.propose(text_only()).await.unwrap();
            let out = c.submit(&s.session_id, "slow", json!(i), None).await.unwrap();
            assert_eq!(out.output, json!({ "slow": i }));
        }));
    }
    let started = std::time::Instant::now();
    for j in jobs {
        j.await.unwrap();
    }
    // 100 tasks of 200 ms each ran side by side, not one after another.
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(server.ws.connections(), 1);
    assert_eq!(c.transport().stats().unmatched, 0);
    assert_eq!(c.transport().outstanding(), 0);
}
