#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Disconnect and resume over a real socket: a proxy cuts the connection mid-task; the server suspends the session,
//! the client reconnects with backoff and resumes it, and the task's result arrives exactly once.

use crate::support;
use ldp_transport_ws::ConnectSettings;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ldp_session::runtime::Client;
use ldp_session::{InitiatorConfig, ResponderEvent, SeededIds, SessionState, SystemClock};
use ldp_transport_ws::{WsOptions, WsServerConfig, WsTransport};
use ldp_types::{PayloadMode, SessionConfig};
use serde_json::json;
use support::{Proxy, TestDelegate, eventually, runtime, runtime_with, serve_both};

fn options() -> WsOptions {
    support::resuming()
}

async fn client(url: String) -> Client<WsTransport> {
    let transport = WsTransport::connect(url, options()).await.unwrap();
    let cfg = InitiatorConfig::new("ldp:delegate:client");
    Client::connect(transport, cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy())).await.unwrap()
}

fn text_only() -> SessionConfig {
    SessionConfig { preferred_payload_modes: Some(vec![PayloadMode::Text]), ..Default::default() }
}

#[tokio::test]
async fn a_result_completed_while_disconnected_is_delivered_once_after_resume() {
    let delegate = Arc::new(TestDelegate::default());
    let rt = runtime(delegate.clone());
    let mut events = rt.subscribe();
    let server = serve_both(&rt, HashMap::new(), WsServerConfig::default()).await;
    let proxy = Proxy::start(server.addr).await;
    // Identity is fetched from the server directly; messages go through the proxy.
    let c = support::client_via(proxy.ws_url(), server.http_url()).await;
    let s = c.propose(text_only()).await.unwrap();
    let other = c.propose(text_only()).await.unwrap();
    let sid = s.session_id.clone();

    let running = {
        let c = c.clone();
        let sid = sid.clone();
        tokio::spawn(async move { c.submit(&sid, "wait", json!("w1"), None).await })
    };
    eventually("the task to start", || rt.running_tasks() == 1).await;

    // The network fails, and stays down while the task completes.
    proxy.set_open(false);
    proxy.cut();
    eventually("the session to be suspended", || rt.session_state(&sid) == Some(SessionState::Suspended)).await;
    delegate.gate.add_permits(1);
    eventually("the task to finish", || rt.running_tasks() == 0).await;
    assert_eq!(rt.session_state(&sid), Some(SessionState::Suspended));

    // The network comes back: reconnect, resume, the held result arrives.
    proxy.set_open(true);
    let out = tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
    assert_eq!(out.output, json!({ "waited": "w1" }));
    assert_eq!(rt.session_state(&sid), Some(SessionState::Active));

    // Exactly once: nothing left held, nothing unmatched (a duplicate would be), nothing outstanding.
    assert_eq!(rt.gauges().held.results, 0, "the held answer was handed out once");
    let stats = c.transport().stats();
    assert!(stats.connections >= 2, "{stats:?}");
    assert_eq!(stats.resumed, 1);
    assert_eq!(stats.unmatched, 0, "{stats:?}");
    assert_eq!(c.transport().outstanding(), 0);

    // Nothing lost: both sessions keep working over the new connection.
    let next = c.submit(&sid, "echo", json!("after"), None).await.unwrap();
    assert_eq!(next.output, json!({ "echo": "after" }));
    let next = c.submit(&other.session_id, "echo", json!("other"), None).await.unwrap();
    assert_eq!(next.output, json!({ "echo": "other" }));
    assert_eq!(c.transport().stats().unmatched, 0);

    let mut seen = Vec::new();
    while let Ok(e) = events.try_recv() {
        match e {
            ResponderEvent::SessionSuspended { session_id } if session_id == sid => seen.push("suspended"),
            ResponderEvent::SessionResumed { session_id } if session_id == sid => seen.push("resumed"),
            _ => {}
        }
    }
    assert_eq!(seen, vec!["suspended", "resumed"]);
}

#[tokio::test]
async fn a_task_still_running_at_resume_answers_on_the_new_connection() {
    let delegate = Arc::new(TestDelegate::default());
    let rt = runtime(delegate.clone());
    let server = serve_both(&rt, HashMap::new(), WsServerConfig::default()).await;
    let proxy = Proxy::start(server.addr).await;
    let transport =
        WsTransport::connect(proxy.ws_url(), options().identity_url(format!("{}/ldp/identity", server.http_url())))
            .await
            .unwrap();
    let c = Arc::new(
        Client::connect(
            transport,
            InitiatorConfig::new("ldp:delegate:client"),
            Arc::new(SystemClock),
            Box::new(SeededIds::from_entropy()),
        )
        .await
        .unwrap(),
    );
    let s = c.propose(text_only()).await.unwrap();
    let sid = s.session_id.clone();
    let mut tasks = Vec::new();
    for i in 0..3 {
        let (c, sid) = (c.clone(), sid.clone());
        tasks.push(tokio::spawn(async move { c.submit(&sid, "wait", json!(i), None).await }));
    }
    eventually("the tasks to start", || rt.running_tasks() == 3).await;
    proxy.cut();
    eventually("the session to be suspended", || rt.session_state(&sid) == Some(SessionState::Suspended)).await;
    eventually("the session to resume", || rt.session_state(&sid) == Some(SessionState::Active)).await;
    // One completes right away, the others later: all arrive, each once.
    delegate.gate.add_permits(3);
    let mut got = Vec::new();
    for t in tasks {
        let out = tokio::time::timeout(Duration::from_secs(10), t).await.unwrap().unwrap().unwrap();
        got.push(out.output.to_value().unwrap()["waited"].as_i64().unwrap());
    }
    got.sort_unstable();
    assert_eq!(got, vec![0, 1, 2]);
    assert_eq!(c.transport().stats().resumed, 3);
    assert_eq!(c.transport().stats().unmatched, 0);
}

#[tokio::test]
async fn requests_sent_while_disconnected_go_out_after_the_reconnect() {
    let delegate = Arc::new(TestDelegate::default());
    let rt = runtime(delegate.clone());
    let server = serve_both(&rt, HashMap::new(), WsServerConfig::default()).await;
    let proxy = Proxy::start(server.addr).await;
    let c = client(proxy.ws_url()).await;
    let s = c.propose(text_only()).await.unwrap();
    proxy.set_open(false);
    proxy.cut();
    let submit = c.submit(&s.session_id, "echo", json!("queued"), None);
    let reopen = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        proxy.set_open(true);
    };
    let (out, ()) = tokio::join!(submit, reopen);
    assert_eq!(out.unwrap().output, json!({ "echo": "queued" }));
}

#[tokio::test]
async fn a_session_that_requires_signatures_resumes_with_signed_status_queries() {
    use ldp_session::SecurityConfig;
    use ldp_types::signing::{SignatureAlgorithm, SigningKey};
    let key = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "resume-secret").unwrap();
    let delegate = Arc::new(TestDelegate::default());
    let server_key = key.clone();
    let rt = runtime_with(delegate.clone(), move |cfg| cfg.security = SecurityConfig::symmetric(server_key));
    let server = serve_both(&rt, HashMap::new(), WsServerConfig::default()).await;
    let proxy = Proxy::start(server.addr).await;
    let transport = WsTransport::connect(
        proxy.ws_url(),
        // No key for the transport: the initiator builds and signs the status queries, like all its messages.
        options().identity_url(format!("{}/.well-known/ldp-identity", server.http_url())),
    )
    .await
    .unwrap();
    let mut cfg = InitiatorConfig::new("ldp:delegate:client");
    cfg.security = SecurityConfig::symmetric(key);
    let c = Arc::new(
        Client::connect(transport, cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy())).await.unwrap(),
    );
    let s = c.propose(text_only()).await.unwrap();
    let sid = s.session_id.clone();
    let running = {
        let c = c.clone();
        let sid = sid.clone();
        tokio::spawn(async move { c.submit(&sid, "wait", json!("signed"), None).await })
    };
    eventually("the task to start", || rt.running_tasks() == 1).await;
    proxy.set_open(false);
    proxy.cut();
    eventually("the session to be suspended", || rt.session_state(&sid) == Some(SessionState::Suspended)).await;
    delegate.gate.add_permits(1);
    eventually("the task to finish", || rt.running_tasks() == 0).await;
    proxy.set_open(true);
    // The status query that resumes the session is signed, so the server accepts it and releases the held result.
    let out = tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
    assert_eq!(out.output, json!({ "waited": "signed" }));
    assert_eq!(rt.session_state(&sid), Some(SessionState::Active));
    assert_eq!(c.transport().stats().resumed, 1);
}

#[tokio::test]
async fn a_task_lost_on_the_way_is_submitted_again_after_the_resume_and_runs_once() {
    let delegate = Arc::new(TestDelegate::default());
    let rt = runtime(delegate.clone());
    let server = serve_both(&rt, HashMap::new(), WsServerConfig::default()).await;
    let proxy = Proxy::start(server.addr).await;
    let c = Arc::new(client(proxy.ws_url()).await);
    let s = c.propose(text_only()).await.unwrap();
    let sid = s.session_id.clone();
    // The client writes the submit, the network swallows it, then the connection drops.
    proxy.set_blackhole(true);
    let running = {
        let c = c.clone();
        let sid = sid.clone();
        tokio::spawn(async move { c.submit(&sid, "echo", json!("lost"), None).await })
    };
    eventually("the submit to be written", || c.transport().outstanding() == 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(delegate.started.lock().unwrap().is_empty(), "the server never saw it");
    proxy.set_blackhole(false);
    proxy.cut();
    // The status query finds no such task: the initiator submits it again, and its result is the answer.
    let out = tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
    assert_eq!(out.output, json!({ "echo": "lost" }));
    assert_eq!(delegate.started.lock().unwrap().len(), 1, "run once");
    let stats = c.transport().stats();
    assert_eq!(stats.resumed, 1, "{stats:?}");
    assert_eq!(stats.unmatched, 0, "{stats:?}");
    assert_eq!(c.transport().outstanding(), 0);
}

#[tokio::test]
async fn a_task_unanswered_within_the_request_timeout_fails_with_a_typed_timeout() {
    let delegate = Arc::new(TestDelegate::default());
    let rt = runtime(delegate.clone());
    let server = serve_both(&rt, HashMap::new(), WsServerConfig::default()).await;
    let limit = Duration::from_millis(200);
    let transport = WsTransport::connect(server.ws_url(), options().request_timeout(limit)).await.unwrap();
    let c = Client::connect(
        transport,
        InitiatorConfig::new("ldp:delegate:client"),
        Arc::new(SystemClock),
        Box::new(SeededIds::from_entropy()),
    )
    .await
    .unwrap();
    let s = c.propose(text_only()).await.unwrap();
    let started = std::time::Instant::now();
    let Err(ldp_session::SessionError::Transport(e)) = c.submit(&s.session_id, "wait", json!("never"), None).await
    else {
        panic!("expected a transport timeout")
    };
    let took = started.elapsed();
    assert!(took >= limit && took < limit * 25, "{took:?}");
    assert_eq!(e.code, ldp_types::codes::TIMEOUT);
    assert!(!e.retryable, "the task may run on");
    assert_eq!(e.message, format!("no answer within {limit:?}"));
    assert_eq!(c.transport().outstanding(), 0);
    // The connection and the session keep working.
    let next = c.submit(&s.session_id, "echo", json!("after"), None).await.unwrap();
    assert_eq!(next.output, json!({ "echo": "after" }));
}
