//! Real sockets on 127.0.0.1:0: the client transport against the server (sessions, tokens, signing, streaming,
//! timeouts), retries against a flaky endpoint, graceful shutdown.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp_transport_http::ConnectSettings;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use ldp_session::runtime::{Client, Delegate, DelegateRuntime, EchoDelegate, Submission, TaskContext, Transport};
use ldp_session::{
    AuthenticatedPeer, InitiatorConfig, Responder, ResponderConfig, SecurityConfig, SeededIds, SessionError,
    SystemClock, TaskOutput, TaskRequest, TrustPolicy,
};
use ldp_transport_http::{HttpServerConfig, HttpState, HttpTransport, RetryPolicy, spawn};
use ldp_types::signing::{SignatureAlgorithm, SigningKey};
use ldp_types::{Capability, DelegateId, ErrorCategory, IdentityCard, LdpError, SessionConfig, TrustDomain};
use serde_json::json;

/// Reports progress three times, then echoes; sleeps `delay` first.
struct Slow {
    delay: Duration,
}

#[async_trait]
impl Delegate for Slow {
    async fn execute(&self, task: TaskRequest, ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        for i in 1..=3 {
            ctx.progress(Some(f64::from(i) / 4.0), format!("step {i}"));
            tokio::time::sleep(self.delay / 3).await;
        }
        Ok(TaskOutput::new(json!({ "echo": task.input })))
    }
}

fn card(domain: &str) -> IdentityCard {
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:alpha").unwrap(), "Alpha", "test", "1");
    card.capabilities.push(Capability::new("echo"));
    card.trust_domain = TrustDomain::new(domain);
    card
}

fn runtime(cfg: ResponderConfig, delegate: Arc<dyn Delegate>) -> DelegateRuntime {
    DelegateRuntime::new(Responder::new(cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy())), delegate)
}

async fn connect(transport: HttpTransport, cfg: InitiatorConfig) -> Client<HttpTransport> {
    Client::connect(transport, cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy())).await.unwrap()
}

#[tokio::test]
async fn signed_flow_with_tokens_over_a_socket() {
    let key = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "k").unwrap();
    let mut cfg = ResponderConfig::new(card("research"));
    cfg.security = SecurityConfig::symmetric(key.clone());
    cfg.trust = TrustPolicy::strict();
    let tokens = HashMap::from([(
        "t0k".to_owned(),
        AuthenticatedPeer { delegate_id: Some("ldp:delegate:me".into()), trust_domain: "research".into() },
    )]);
    let state = HttpState::new(runtime(cfg, Arc::new(EchoDelegate)), HttpServerConfig { tokens, ..Default::default() });
    let server = spawn("127.0.0.1:0", state).await.unwrap();

    let mut icfg = InitiatorConfig::new("ldp:delegate:me");
    icfg.security = SecurityConfig::symmetric(key);
    let transport = HttpTransport::builder(server.url()).bearer_token("t0k").build().unwrap();
    let client = connect(transport, icfg.clone()).await;
    assert_eq!(client.card().delegate_id.as_str(), "ldp:delegate:alpha");
    assert!(client.manifest().is_some());
    let session = client.propose(SessionConfig::default()).await.unwrap();
    for i in 0..5 {
        let out = client.submit(&session.session_id, "echo", json!(i), None).await.unwrap();
        assert_eq!(out.output, json!({ "echo": i }));
        assert_eq!(out.provenance.session_id.as_deref(), Some(session.session_id.as_str()));
    }
    client.close(&session.session_id).await.unwrap();

    // Without the token: a typed UNAUTHENTICATED, not a transport error.
    let anonymous = HttpTransport::new(server.url()).unwrap();
    // Discovery is public; HELLO is not.
    assert_eq!(anonymous.identity().await.unwrap().delegate_id.as_str(), "ldp:delegate:alpha");
    match Client::connect(anonymous, icfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy())).await {
        Err(SessionError::Peer(e)) => assert_eq!(e.code, "UNAUTHENTICATED"),
        other => panic!("{other:?}"),
    }
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn untrusted_domain_is_rejected_in_protocol() {
    let server = spawn(
        "127.0.0.1:0",
        HttpState::new(runtime(ResponderConfig::new(card("research")), Arc::new(EchoDelegate)), Default::default()),
    )
    .await
    .unwrap();
    let mut icfg = InitiatorConfig::new("ldp:delegate:me");
    icfg.trust_domain = Some("elsewhere".into());
    let client = connect(HttpTransport::new(server.url()).unwrap(), icfg).await;
    match client.propose(SessionConfig::default()).await {
        Err(SessionError::Peer(e)) => assert_eq!(e.code, "TRUST_VIOLATION"),
        other => panic!("{other:?}"),
    }
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn progress_streams_over_sse() {
    let state = HttpState::new(
        runtime(ResponderConfig::new(card("default")), Arc::new(Slow { delay: Duration::from_millis(150) })),
        HttpServerConfig::default(),
    );
    let server = spawn("127.0.0.1:0", state).await.unwrap();
    let client = connect(HttpTransport::new(server.url()).unwrap(), InitiatorConfig::new("ldp:delegate:me")).await;
    let session = client.propose(SessionConfig::default()).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let out = client.submit_task(Submission::new(&session.session_id, "echo", json!("x")).progress(tx)).await.unwrap();
    assert_eq!(out.output, json!({ "echo": "x" }));
    let mut seen = Vec::new();
    while let Ok(Some(p)) = tokio::time::timeout(Duration::from_millis(200), rx.recv()).await {
        seen.push(p.message.unwrap_or_default());
    }
    assert_eq!(seen, ["step 1", "step 2", "step 3"]);
    // A refusal on the stream endpoint keeps its HTTP status (no stream was started).
    let (tx, _rx) = tokio::sync::mpsc::channel(16);
    let err =
        client.submit_task(Submission::new(&session.session_id, "nope", json!("x")).progress(tx)).await.unwrap_err();
    assert!(matches!(err, SessionError::Peer(ref e) if e.code == "SKILL_NOT_FOUND"), "{err:?}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn slow_tasks_time_out_with_504_and_still_complete() {
    let rt = runtime(ResponderConfig::new(card("default")), Arc::new(Slow { delay: Duration::from_millis(600) }));
    let config = HttpServerConfig { request_timeout: Duration::from_millis(100), ..Default::default() };
    let server = spawn("127.0.0.1:0", HttpState::new(rt.clone(), config)).await.unwrap();
    let client = connect(HttpTransport::new(server.url()).unwrap(), InitiatorConfig::new("ldp:delegate:me")).await;
    let session = client.propose(SessionConfig::default()).await.unwrap();
    let err = client.submit(&session.session_id, "echo", json!(1), None).await.unwrap_err();
    match err {
        SessionError::Transport(e) => {
            assert_eq!((e.code.as_str(), e.category, e.retryable), ("TIMEOUT", ErrorCategory::Transport, false));
        }
        other => panic!("{other:?}"),
    }
    // The abandoned task finishes on the server and frees its slot.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(rt.running_tasks(), 0);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn retries_only_retryable_transport_failures() {
    // An endpoint that answers 503 twice, then serves a card.
    let hits = Arc::new(AtomicUsize::new(0));
    let card_json = serde_json::to_string(&card("default")).unwrap();
    let h = hits.clone();
    let app = axum::Router::new().route(
        "/.well-known/ldp-identity",
        axum::routing::get(move || {
            let n = h.fetch_add(1, Ordering::SeqCst);
            let body = card_json.clone();
            async move {
                if n < 2 {
                    (axum::http::StatusCode::SERVICE_UNAVAILABLE, String::new())
                } else {
                    (axum::http::StatusCode::OK, body)
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let fast = RetryPolicy {
        max_retries: 3,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(20),
    };
    let t = HttpTransport::builder(&url).retry(fast).build().unwrap();
    assert_eq!(t.identity().await.unwrap().delegate_id.as_str(), "ldp:delegate:alpha");
    assert_eq!(hits.load(Ordering::SeqCst), 3);
    // Without retries the 503 surfaces as a retryable transport error.
    hits.store(0, Ordering::SeqCst);
    let t = HttpTransport::builder(&url).retry(RetryPolicy::none()).build().unwrap();
    let e = t.identity().await.unwrap_err();
    assert_eq!((e.category, e.retryable), (ErrorCategory::Transport, true));
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    server.abort();

    // Nobody listening: connection refused is retried, then reported.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let t = HttpTransport::builder(&dead).retry(fast).build().unwrap();
    let started = std::time::Instant::now();
    let e = t.identity().await.unwrap_err();
    assert_eq!((e.category, e.retryable), (ErrorCategory::Transport, true));
    assert!(started.elapsed() >= Duration::from_millis(5 + 10 + 20) / 2, "{:?}", started.elapsed());
}

#[tokio::test]
async fn shutdown_drains_in_flight_requests() {
    let state = HttpState::new(
        runtime(ResponderConfig::new(card("default")), Arc::new(Slow { delay: Duration::from_millis(300) })),
        HttpServerConfig::default(),
    );
    let server = spawn("127.0.0.1:0", state).await.unwrap();
    let client = connect(HttpTransport::new(server.url()).unwrap(), InitiatorConfig::new("ldp:delegate:me")).await;
    let session = client.propose(SessionConfig::default()).await.unwrap();
    let in_flight = tokio::spawn(async move { client.submit(&session.session_id, "echo", json!(1), None).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    server.shutdown().await.unwrap();
    let out = in_flight.await.unwrap().unwrap();
    assert_eq!(out.output, json!({ "echo": 1 }));
}
