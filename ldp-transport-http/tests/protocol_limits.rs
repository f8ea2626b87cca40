//! Issue 14 over a real socket: sessions are bound to the credential that opened them, and the machine's refusals
//! get their HTTP statuses.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::Arc;

use ldp_session::runtime::{DelegateRuntime, EchoDelegate};
use ldp_session::{AuthenticatedPeer, Responder, ResponderConfig, SeededIds, SystemClock, TrustPolicy};
use ldp_transport_http::{HttpServerConfig, HttpState, ServerHandle, spawn};
use ldp_types::{
    Capability, DelegateId, Envelope, IdentityCard, PayloadMode, SessionClose, SessionConfig, SessionPropose,
    TaskSubmit, TrustDomain,
};
use serde_json::{Value, json};

const ME: &str = "ldp:delegate:client";

fn card() -> IdentityCard {
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:alpha").unwrap(), "Alpha", "test", "1");
    card.capabilities.push(Capability::new("echo"));
    card.trust_domain = TrustDomain::new("default").trusting("other");
    card.supported_payload_modes = vec![PayloadMode::SemanticFrame, PayloadMode::Text];
    card
}

async fn server(cfg: impl FnOnce(&mut ResponderConfig)) -> ServerHandle {
    let mut rc = ResponderConfig::new(card());
    rc.trust = TrustPolicy::strict();
    cfg(&mut rc);
    let responder = Responder::new(rc, Arc::new(SystemClock), Box::new(SeededIds::new(7)));
    let runtime = DelegateRuntime::new(responder, Arc::new(EchoDelegate));
    let peer = |d: &str| AuthenticatedPeer { delegate_id: None, trust_domain: d.into() };
    let tokens = HashMap::from([
        ("tokA".to_owned(), peer("default")),
        ("tokA2".to_owned(), peer("default")),
        ("tokB".to_owned(), peer("other")),
    ]);
    let config = HttpServerConfig { tokens, ..HttpServerConfig::default() };
    spawn("127.0.0.1:0", HttpState::new(runtime, config)).await.unwrap()
}

fn env(session: &str, from: &str, body: impl Into<ldp_types::Body>) -> Envelope {
    let now = ldp_types::time::format_timestamp(time::OffsetDateTime::now_utc());
    Envelope::new(uuid::Uuid::new_v4().to_string(), now, session, from, "ldp:delegate:alpha", body)
}

fn submit(session: &str) -> Envelope {
    env(session, ME, TaskSubmit::new(uuid::Uuid::new_v4().to_string(), "echo".into(), json!("hi"), None))
        .with_payload_mode(PayloadMode::Text)
}

async fn post(url: &str, token: &str, body: Vec<u8>) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(format!("{url}/ldp/messages"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.unwrap();
    (status, if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() })
}

fn code(v: &Value) -> &str {
    v["body"]["error"]["code"].as_str().or(v["error"]["code"].as_str()).unwrap_or("")
}

#[tokio::test]
async fn another_token_cannot_submit_into_or_close_a_session_even_under_the_owners_from() {
    let server = server(|_| {}).await;
    let url = server.url().to_owned();
    let (s, v) = post(&url, "tokA", env("", ME, SessionPropose::new(SessionConfig::default())).to_vec().unwrap()).await;
    assert_eq!((s, v["body"]["type"].as_str()), (200, Some("SESSION_ACCEPT")), "{v}");
    let sid = v["body"]["session_id"].as_str().unwrap().to_owned();
    // Token B (another domain) and token A2 (the same domain, another credential) reuse A's `from`.
    for intruder in ["tokB", "tokA2"] {
        let (s, v) = post(&url, intruder, submit(&sid).to_vec().unwrap()).await;
        assert_eq!((s, code(&v)), (403, "NOT_SESSION_PEER"), "{intruder}: {v}");
        let close = env(&sid, ME, SessionClose::new(None)).with_payload_mode(PayloadMode::Text);
        let (s, v) = post(&url, intruder, close.to_vec().unwrap()).await;
        assert_eq!((s, code(&v)), (403, "NOT_SESSION_PEER"), "{intruder}: {v}");
    }
    // The owner's session is intact.
    let (s, v) = post(&url, "tokA", submit(&sid).to_vec().unwrap()).await;
    assert_eq!((s, v["body"]["type"].as_str()), (200, Some("TASK_RESULT")), "{v}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_oversized_identifier_is_400_and_opens_nothing() {
    let server = server(|_| {}).await;
    let url = server.url().to_owned();
    let big = env("", &"x".repeat(512 * 1024), SessionPropose::new(SessionConfig::default()));
    let (s, v) = post(&url, "tokA", big.to_vec().unwrap()).await;
    assert_eq!((s, code(&v)), (400, "MALFORMED_MESSAGE"), "{v}");
    let (s, v) = post(&url, "tokA", env("", ME, SessionPropose::new(SessionConfig::default())).to_vec().unwrap()).await;
    assert_eq!((s, v["body"]["type"].as_str()), (200, Some("SESSION_ACCEPT")), "{v}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn unsigned_mode_refuses_bad_timestamps_and_duplicate_proposals() {
    let server = server(|_| {}).await;
    let url = server.url().to_owned();
    for bad in ["not a time", ""] {
        let mut p = env("", ME, SessionPropose::new(SessionConfig::default()));
        p.timestamp = bad.to_owned();
        let (s, v) = post(&url, "tokA", p.to_vec().unwrap()).await;
        assert_eq!((s, code(&v)), (400, "MALFORMED_MESSAGE"), "{bad:?}: {v}");
    }
    let p = env("", ME, SessionPropose::new(SessionConfig::default())).to_vec().unwrap();
    let (s, v) = post(&url, "tokA", p.clone()).await;
    assert_eq!((s, v["body"]["type"].as_str()), (200, Some("SESSION_ACCEPT")), "{v}");
    let (s, v) = post(&url, "tokA", p).await;
    assert_eq!((s, v["body"]["type"].as_str(), code(&v)), (401, Some("SESSION_REJECT"), "REPLAY_DETECTED"), "{v}");
    server.shutdown().await.unwrap();
}
