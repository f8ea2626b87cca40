#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! An oversize message over a real socket: the client, still uploading when the server decides, receives the typed
//! 413 answer (not a broken pipe), every time, and the server keeps serving.

use std::sync::Arc;

use ldp_session::runtime::{DelegateRuntime, EchoDelegate};
use ldp_session::{Responder, ResponderConfig, SeededIds, SystemClock};
use ldp_transport_http::{HttpServerConfig, HttpState, spawn};
use ldp_types::{Capability, DelegateId, IdentityCard, codes};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_uploading_an_oversize_body_reads_the_413() {
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:echo").unwrap(), "Echo", "echo", "1.0");
    card.capabilities.push(Capability::new("echo"));
    let responder =
        Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let runtime = DelegateRuntime::new(responder, Arc::new(EchoDelegate));
    let config = HttpServerConfig { max_body: 64 * 1024, ..Default::default() };
    let server = spawn("127.0.0.1:0", HttpState::new(runtime, config)).await.unwrap();
    let url = format!("{}/ldp/messages", server.url());
    let client = reqwest::Client::new();
    let padding = "a".repeat(8 * 1024 * 1024);
    for attempt in 0..5 {
        let body = json!({"message_id": format!("m{attempt}"), "from": "a", "to": "b", "timestamp": "2026-01-01T00:00:00Z",
            "body": {"type": "HELLO", "delegate_id": "a", "supported_modes": ["text"]}, "padding": padding});
        let resp = client
            .post(&url)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .send()
            .await
            .unwrap_or_else(|e| panic!("attempt {attempt}: no answer: {e}"));
        assert_eq!(resp.status(), 413, "attempt {attempt}");
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(answer["error"]["code"], codes::MESSAGE_TOO_LARGE, "{answer}");
    }
    // Still serving.
    let hello = json!({"message_id": "ok", "from": "a", "to": "b", "timestamp": "2026-01-01T00:00:00Z",
        "body": {"type": "HELLO", "delegate_id": "a", "supported_modes": ["text"]}});
    let resp = client.post(&url).header("content-type", "application/json").json(&hello).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    server.shutdown().await.unwrap();
}
