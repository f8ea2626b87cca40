#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Bad input over a real socket gets its defined answer, and the server keeps serving: unauthenticated upgrade (401
//! with an LDP body), binary frame and garbage JSON (error frame, connection stays), oversize (error frame, then
//! close 1009).

use ldp_transport_ws::ConnectSettings;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::support::{TestDelegate, runtime, serve_both};
use futures::{SinkExt, StreamExt};
use ldp_session::runtime::Client;
use ldp_session::{AuthenticatedPeer, InitiatorConfig, SeededIds, SystemClock};
use ldp_transport_ws::{Error, WsOptions, WsServerConfig, WsTransport};
use ldp_types::{LdpError, SessionConfig, codes};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{self, Message, client::IntoClientRequest};

const TOKEN: &str = "secret-token";

fn tokens() -> HashMap<String, AuthenticatedPeer> {
    let peer = AuthenticatedPeer { delegate_id: None, trust_domain: "default".to_owned() };
    HashMap::from([(TOKEN.to_owned(), peer)])
}

async fn next_json<S>(ws: &mut S) -> Value
where
    S: futures::Stream<Item = Result<Message, tungstenite::Error>> + Unpin,
{
    loop {
        match tokio::time::timeout(Duration::from_secs(5), ws.next()).await.unwrap().unwrap().unwrap() {
            Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("expected a text frame, got {other:?}"),
        }
    }
}

fn hello(id: &str, pad: usize) -> String {
    json!({
        "message_id": id, "session_id": "", "from": "ldp:delegate:raw", "to": "ldp:delegate:test",
        "body": {"type": "HELLO", "delegate_id": "ldp:delegate:raw", "supported_modes": ["text"]},
        "payload_mode": "text", "timestamp": "2026-03-09T10:00:00Z", "provenance": null,
        "padding": "x".repeat(pad),
    })
    .to_string()
}

#[tokio::test]
async fn each_bad_input_gets_its_answer_and_the_server_keeps_serving() {
    let rt = runtime(Arc::new(TestDelegate::default()));
    let config = WsServerConfig { max_message: 4096, ..Default::default() };
    let server = serve_both(&rt, tokens(), config).await;

    // Unauthenticated upgrade: 401 with an LDP error body, no upgrade.
    for auth in [None, Some("Bearer wrong"), Some("Basic abc")] {
        let mut req = server.ws_url().into_client_request().unwrap();
        if let Some(a) = auth {
            req.headers_mut().insert("authorization", a.parse().unwrap());
        }
        let Err(tungstenite::Error::Http(resp)) = tokio_tungstenite::connect_async(req).await else {
            panic!("upgrade accepted without a valid token")
        };
        assert_eq!(resp.status(), 401);
        assert_eq!(resp.headers()["www-authenticate"], "Bearer realm=\"ldp\"");
        let body: Value = serde_json::from_slice(resp.body().as_deref().unwrap()).unwrap();
        let error: LdpError = serde_json::from_value(body["error"].clone()).unwrap();
        assert_eq!(error.code, codes::UNAUTHENTICATED);
    }
    let Err(Error::Connect(e)) = WsTransport::connect(server.ws_url(), WsOptions::default()).await else { panic!() };
    assert_eq!(e.code, codes::UNAUTHENTICATED);

    // A well-behaved client on its own connection, through everything below.
    let good = WsTransport::connect(server.http_url(), WsOptions::default().bearer_token(TOKEN)).await.unwrap();
    let good = Client::connect(
        good,
        InitiatorConfig::new("ldp:delegate:client"),
        Arc::new(SystemClock),
        Box::new(SeededIds::from_entropy()),
    )
    .await
    .unwrap();
    let text =
        SessionConfig { preferred_payload_modes: Some(vec![ldp_types::PayloadMode::Text]), ..Default::default() };
    let session = good.propose(text).await.unwrap();

    let mut req = server.ws_url().into_client_request().unwrap();
    req.headers_mut().insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    let (mut raw, _) = tokio_tungstenite::connect_async(req).await.unwrap();

    // Binary frame: a typed error, and the connection keeps serving.
    raw.send(Message::Binary(vec![1, 2, 3].into())).await.unwrap();
    let v = next_json(&mut raw).await;
    assert_eq!(v["error"]["code"], codes::MALFORMED_MESSAGE);

    // Garbage JSON, and JSON that is not an envelope: typed errors.
    raw.send(Message::Text("{not json".into())).await.unwrap();
    assert_eq!(next_json(&mut raw).await["error"]["code"], codes::MALFORMED_MESSAGE);
    raw.send(Message::Text("[1, 2]".into())).await.unwrap();
    assert_eq!(next_json(&mut raw).await["error"]["code"], codes::MALFORMED_MESSAGE);

    // Still serving: a HELLO is answered, correlated by in_reply_to.
    raw.send(Message::Text(hello("m-1", 0).into())).await.unwrap();
    let v = next_json(&mut raw).await;
    assert_eq!(v["body"]["type"], "CAPABILITY_MANIFEST");
    assert_eq!(v["in_reply_to"], "m-1");

    // Oversize: the typed error (naming the message), then close 1009.
    raw.send(Message::Text(hello("m-big", 8000).into())).await.unwrap();
    let v = next_json(&mut raw).await;
    assert_eq!(v["error"]["code"], codes::MESSAGE_TOO_LARGE);
    assert_eq!(v["in_reply_to"], "m-big");
    let close = loop {
        match tokio::time::timeout(Duration::from_secs(5), raw.next()).await.unwrap() {
            Some(Ok(Message::Close(f))) => break f,
            Some(Ok(_)) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    assert_eq!(u16::from(close.unwrap().code), 1009);

    // Far over the limit (beyond what the library buffers): still an error, then 1009.
    let mut req = server.ws_url().into_client_request().unwrap();
    req.headers_mut().insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    let (mut raw, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    raw.send(Message::Text(hello("m-huge", 200_000).into())).await.unwrap();
    let v = next_json(&mut raw).await;
    assert_eq!(v["error"]["code"], codes::MESSAGE_TOO_LARGE);

    // The other client never noticed.
    let out = good.submit(&session.session_id, "echo", json!("still here"), None).await.unwrap();
    assert_eq!(out.output, json!({ "echo": "still here" }));
    assert_eq!(good.transport().stats().connections, 1);
}
