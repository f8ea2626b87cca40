//! The WebSocket binding's figures and the backend usage in the HTTP server's `/metrics`, as `ldp serve` combines
//! them (`WsServer::report_to`): parsed by the Prometheus project's own parser, and moving as tasks run over both
//! bindings.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ldp_session::runtime::{Client, Delegate, DelegateRuntime, TaskContext};
use ldp_session::{InitiatorConfig, Responder, ResponderConfig, SeededIds, SystemClock, TaskOutput, TaskRequest};
use ldp_transport_http::{HttpServerConfig, HttpState, HttpTransport};
use ldp_transport_ws::{WsOptions, WsServer, WsServerConfig, WsTransport};
use ldp_types::{Capability, DelegateId, IdentityCard, LdpError, SessionConfig};
use serde_json::json;

use crate::prometheus;

/// Usage each task reports, as a model backend would in its provenance.
const TOKENS: u64 = 120;
const COST: f64 = 0.125;

struct Metered;

#[async_trait]
impl Delegate for Metered {
    async fn execute(&self, task: TaskRequest, _ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        let mut out = TaskOutput::new(json!({ "echo": task.input.to_value().unwrap() }));
        out.tokens_used = Some(TOKENS);
        out.cost_usd = Some(COST);
        Ok(out)
    }
}

async fn scrape(url: &str) -> HashMap<String, f64> {
    let text = reqwest::get(format!("{url}/metrics")).await.unwrap().text().await.unwrap();
    tokio::task::spawn_blocking(move || prometheus::parse(&text)).await.unwrap()
}

fn get(samples: &HashMap<String, f64>, key: &str) -> f64 {
    *samples.get(key).unwrap_or_else(|| panic!("{key} missing from /metrics: {samples:#?}"))
}

async fn connect<T: ldp_session::runtime::Transport>(transport: T) -> Client<T> {
    let mut cfg = InitiatorConfig::new("ldp:delegate:scraper");
    cfg.trust_domain = Some("default".into());
    Client::connect(transport, cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy())).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_figures_and_backend_usage_move_with_the_traffic() {
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:metered").unwrap(), "Metered", "echo", "1");
    card.capabilities.push(Capability::new("echo"));
    let responder = Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::new(3)));
    let runtime = DelegateRuntime::new(responder, Arc::new(Metered));
    let state = HttpState::new(runtime.clone(), HttpServerConfig::default());
    let ws = WsServer::new(runtime.clone(), WsServerConfig::default());
    ws.report_to(state.metrics());
    let app = ldp_transport_http::router(state).merge(ws.router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(ldp_transport_http::serve_router(listener, runtime, app, async move {
        let _ = stopped.await;
    }));

    let before = scrape(&url).await;
    for key in ["ldp_ws_connections{}", "ldp_held_results{}", "ldp_held_result_bytes{}"] {
        assert_eq!(get(&before, key), 0.0, "{key}");
    }

    // Over WebSocket: HELLO, SESSION_PROPOSE and three tasks, each answered.
    let ws_tasks: u32 = 3;
    let client =
        connect(WsTransport::connect(url.replacen("http", "ws", 1), WsOptions::default()).await.unwrap()).await;
    let session = client.propose(SessionConfig::default()).await.unwrap();
    for i in 0..ws_tasks {
        client.submit(&session.session_id, "echo", json!(i), None).await.unwrap();
    }
    let during = scrape(&url).await;
    assert_eq!(get(&during, "ldp_ws_connections{}"), 1.0);
    let frames = 2.0 + f64::from(ws_tasks);
    assert_eq!(
        get(&during, "ldp_ws_messages_received_total{}") - get(&before, "ldp_ws_messages_received_total{}"),
        frames
    );
    assert!(get(&during, "ldp_ws_messages_sent_total{}") - get(&before, "ldp_ws_messages_sent_total{}") >= frames);

    // Over HTTP: two more tasks; the usage counters take both bindings' results.
    let http_tasks: u32 = 2;
    let http = connect(HttpTransport::new(&url).unwrap()).await;
    let http_session = http.propose(SessionConfig::default()).await.unwrap();
    for i in 0..http_tasks {
        http.submit(&http_session.session_id, "echo", json!(i), None).await.unwrap();
    }
    let after = scrape(&url).await;
    let tasks = ws_tasks + http_tasks;
    let tokens = get(&after, "ldp_backend_tokens_total{}") - get(&before, "ldp_backend_tokens_total{}");
    assert_eq!(tokens, (TOKENS * u64::from(tasks)) as f64);
    let cost = get(&after, "ldp_backend_cost_usd_total{}") - get(&before, "ldp_backend_cost_usd_total{}");
    assert!((cost - COST * f64::from(tasks)).abs() < 1e-9, "{cost}");

    // The connection closes: the gauge goes back down.
    drop(client);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if get(&scrape(&url).await, "ldp_ws_connections{}") == 0.0 {
            break;
        }
        assert!(Instant::now() < deadline, "the closed connection is still counted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}
