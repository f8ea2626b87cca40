//! `/healthz`, `/readyz` and `/metrics` over a real socket. The metrics text is parsed by the Prometheus project's
//! own Python parser (`prometheus_client.openmetrics.parser`, installed by `scripts/py-tools.sh`; never skipped), and
//! the values must move as a client opens a session, runs tasks and is refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::Arc;

use ldp_session::runtime::{Client, DelegateRuntime, EchoDelegate};
use ldp_session::{InitiatorConfig, ReplayConfig, Responder, ResponderConfig, SeededIds, SystemClock};
use ldp_transport_http::{HttpServerConfig, HttpState, HttpTransport, METRICS_CONTENT_TYPE, spawn};
use ldp_types::{Capability, DelegateId, IdentityCard, PayloadMode, SessionConfig};
use serde_json::json;

use crate::prometheus::parse;

async fn scrape(url: &str) -> HashMap<String, f64> {
    let resp = reqwest::get(format!("{url}/metrics")).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], METRICS_CONTENT_TYPE);
    let text = resp.text().await.unwrap();
    tokio::task::spawn_blocking(move || parse(&text)).await.unwrap()
}

fn get(samples: &HashMap<String, f64>, key: &str) -> f64 {
    samples.get(key).copied().unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_metrics_that_move_with_the_traffic() {
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:metered").unwrap(), "Metered", "echo", "1");
    card.capabilities.push(Capability::new("echo"));
    card.supported_payload_modes = vec![PayloadMode::Text];
    let responder = Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::new(3)));
    let state = HttpState::new(DelegateRuntime::new(responder, Arc::new(EchoDelegate)), HttpServerConfig::default());
    let server = spawn("127.0.0.1:0", state).await.unwrap();
    let url = server.url().to_owned();

    for (path, body) in [("healthz", "ok\n"), ("readyz", "ready\n")] {
        let resp = reqwest::get(format!("{url}/{path}")).await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(resp.text().await.unwrap(), body);
    }

    let before = scrape(&url).await;
    assert_eq!(get(&before, "ldp_active_sessions{}"), 0.0);

    let mut cfg = InitiatorConfig::new("ldp:delegate:scraper");
    cfg.trust_domain = Some("default".into());
    let client =
        Client::connect(HttpTransport::new(&url).unwrap(), cfg, Arc::new(SystemClock), Box::new(SeededIds::new(9)))
            .await
            .unwrap();
    let session = client.propose(SessionConfig::default()).await.unwrap();
    for i in 0..3 {
        client.submit(&session.session_id, "echo", json!({ "n": i }), None).await.unwrap();
    }
    // A refused task: an unknown skill is answered TASK_FAILED SKILL_NOT_FOUND.
    assert!(client.submit(&session.session_id, "nope", json!(1), None).await.is_err());
    // A malformed message: 400 MALFORMED_MESSAGE.
    let bad = reqwest::Client::new()
        .post(format!("{url}/ldp/messages"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);

    let after = scrape(&url).await;
    assert_eq!(get(&after, "ldp_active_sessions{}"), 1.0);
    assert_eq!(
        get(&after, "ldp_tasks_total{status=completed}") - get(&before, "ldp_tasks_total{status=completed}"),
        3.0
    );
    assert_eq!(get(&after, "ldp_tasks_total{status=failed}") - get(&before, "ldp_tasks_total{status=failed}"), 1.0);
    assert_eq!(get(&after, "ldp_refusals_total{code=SKILL_NOT_FOUND}"), 1.0);
    assert_eq!(get(&after, "ldp_refusals_total{code=MALFORMED_MESSAGE}"), 1.0);
    let results = "ldp_messages_total{path=/ldp/messages,reply=TASK_RESULT,status=200}";
    assert_eq!(get(&after, results), 3.0, "{after:#?}");
    assert_eq!(get(&after, "ldp_messages_total{path=/ldp/messages,reply=none,status=400}"), 1.0);
    // The latency histogram counted every message it timed, and its buckets are cumulative up to +Inf.
    let count = get(&after, "ldp_message_duration_seconds_count{path=/ldp/messages,reply=TASK_RESULT}");
    assert_eq!(count, 3.0);
    assert_eq!(get(&after, "ldp_message_duration_seconds_bucket{le=+Inf,path=/ldp/messages,reply=TASK_RESULT}"), count);

    client.close(&session.session_id).await.unwrap();
    let closed = scrape(&url).await;
    assert_eq!(get(&closed, "ldp_active_sessions{}"), 0.0);
    server.shutdown().await.unwrap();
}

/// The replay window's size is scraped: it grows by one per message the responder admits with replay protection on,
/// and its capacity is the configured bound (0 with protection off, as in the test above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replay_window_size_is_scraped_and_grows_with_each_admitted_message() {
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:guarded").unwrap(), "Guarded", "echo", "1");
    card.capabilities.push(Capability::new("echo"));
    card.supported_payload_modes = vec![PayloadMode::Text];
    let mut config = ResponderConfig::new(card);
    let replay = ReplayConfig { max_entries: 4_321, ..ReplayConfig::default() };
    config.security.replay = Some(replay);
    let responder = Responder::new(config, Arc::new(SystemClock), Box::new(SeededIds::new(5)));
    let state = HttpState::new(DelegateRuntime::new(responder, Arc::new(EchoDelegate)), HttpServerConfig::default());
    let server = spawn("127.0.0.1:0", state).await.unwrap();
    let url = server.url().to_owned();

    let before = scrape(&url).await;
    assert_eq!(get(&before, "ldp_replay_window_entries{}"), 0.0);
    assert_eq!(get(&before, "ldp_replay_window_capacity{}"), replay.max_entries as f64);

    let mut cfg = InitiatorConfig::new("ldp:delegate:scraper");
    cfg.trust_domain = Some("default".into());
    let client =
        Client::connect(HttpTransport::new(&url).unwrap(), cfg, Arc::new(SystemClock), Box::new(SeededIds::new(11)))
            .await
            .unwrap();
    let session = client.propose(SessionConfig::default()).await.unwrap();
    let tasks = 3;
    for i in 0..tasks {
        client.submit(&session.session_id, "echo", json!({ "n": i }), None).await.unwrap();
    }
    let after = scrape(&url).await;
    // HELLO, SESSION_PROPOSE and one TASK_SUBMIT per task, each remembered for the window.
    assert_eq!(get(&after, "ldp_replay_window_entries{}"), f64::from(2 + tasks));
    server.shutdown().await.unwrap();
}
