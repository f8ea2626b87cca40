//! The connection loop over plain channels: no sockets, no WebSocket library.

use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures::channel::mpsc as fmpsc;
use futures::{SinkExt, StreamExt};
use ldp_session::runtime::EchoDelegate;
use ldp_session::{Responder, ResponderConfig, SeededIds, SessionState, SystemClock};
use ldp_types::{Capability, DelegateId, IdentityCard, codes};
use serde_json::{Value, json};

use super::upgrade::check_origin;
use super::*;
use crate::wire::{CloseFrame, close_code};

fn runtime() -> DelegateRuntime {
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:echo").unwrap(), "Echo", "none", "1");
    card.capabilities.push(Capability::new("echo"));
    let responder = Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::new(1)));
    DelegateRuntime::new(responder, Arc::new(EchoDelegate))
}

fn envelope(id: &str, session: &str, body: Value) -> String {
    json!({
        "message_id": id, "session_id": session, "from": "ldp:delegate:c", "to": "ldp:delegate:echo",
        "body": body, "payload_mode": "text", "timestamp": "2026-03-09T10:00:00Z", "provenance": null,
    })
    .to_string()
}

fn hello(id: &str) -> String {
    envelope(id, "", json!({"type": "HELLO", "delegate_id": "ldp:delegate:c", "supported_modes": ["text"]}))
}

struct Peer {
    to_server: fmpsc::Sender<Result<Message, WireError>>,
    from_server: fmpsc::Receiver<Message>,
    done: tokio::task::JoinHandle<ConnectionEnd>,
}

impl Peer {
    fn start(server: &WsServer, sink_buffer: usize) -> Peer {
        let (to_server, inbound) = fmpsc::channel(4);
        let (outbound, from_server) = fmpsc::channel(sink_buffer);
        let server = server.clone();
        let done =
            tokio::spawn(async move { server.serve_connection(PeerContext::default(), outbound, inbound).await });
        Peer { to_server, from_server, done }
    }

    async fn send(&mut self, m: Message) {
        self.to_server.send(Ok(m)).await.unwrap();
    }

    async fn next(&mut self) -> Message {
        loop {
            let m = tokio::time::timeout(Duration::from_secs(5), self.from_server.next()).await.unwrap().unwrap();
            if !matches!(m, Message::Ping(_)) {
                return m;
            }
        }
    }

    async fn next_json(&mut self) -> Value {
        match self.next().await {
            Message::Text(t) => serde_json::from_str(&t).unwrap(),
            other => panic!("expected text, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn answers_are_correlated_and_bad_frames_get_typed_errors() {
    let server = WsServer::new(runtime(), WsServerConfig { max_message: 1000, ..Default::default() });
    let mut peer = Peer::start(&server, 16);
    peer.send(Message::Binary(vec![0xff])).await;
    assert_eq!(peer.next_json().await["error"]["code"], codes::MALFORMED_MESSAGE);
    peer.send(Message::Text("garbage".into())).await;
    assert_eq!(peer.next_json().await["error"]["code"], codes::MALFORMED_MESSAGE);
    peer.send(Message::Text(hello("h1"))).await;
    let v = peer.next_json().await;
    assert_eq!((v["body"]["type"].as_str(), v["in_reply_to"].as_str()), (Some("CAPABILITY_MANIFEST"), Some("h1")));
    // An ATTESTATION outside a session is refused in-protocol; in a session it would get {"accepted": true}.
    let attestation = envelope("a1", "nope", json!({"type": "ATTESTATION", "claim": {}, "evidence": null}));
    peer.send(Message::Text(attestation)).await;
    let v = peer.next_json().await;
    assert_eq!(v["in_reply_to"], "a1");
    assert_eq!(v["body"]["error"]["code"], codes::SESSION_NOT_FOUND);
    // Oversize: error naming the message, close 1009, the loop ends.
    peer.send(Message::Text(format!("{{\"message_id\":\"big\",\"pad\":\"{}\"}}", "x".repeat(2000)))).await;
    let v = peer.next_json().await;
    assert_eq!((v["error"]["code"].as_str(), v["in_reply_to"].as_str()), (Some(codes::MESSAGE_TOO_LARGE), Some("big")));
    assert_eq!(peer.next().await, Message::Close(Some(CloseFrame::new(close_code::TOO_BIG, "message too large"))));
    assert_eq!(peer.done.await.unwrap(), ConnectionEnd::TooLarge);
    assert_eq!(server.connections(), 0);
}

#[tokio::test]
async fn the_library_size_limit_is_answered_too() {
    let server = WsServer::new(runtime(), WsServerConfig::default());
    let mut peer = Peer::start(&server, 16);
    peer.to_server.send(Err(WireError::TooLarge { limit: 10 })).await.unwrap();
    assert_eq!(peer.next_json().await["error"]["code"], codes::MESSAGE_TOO_LARGE);
    assert!(matches!(peer.next().await, Message::Close(Some(CloseFrame { code: 1009, .. }))));
    assert_eq!(peer.done.await.unwrap(), ConnectionEnd::TooLarge);
}

#[tokio::test]
async fn a_slow_reader_stops_the_server_reading_instead_of_growing_memory() {
    let config = WsServerConfig { outbound_queue: 2, max_in_flight: 2, ..Default::default() };
    let server = WsServer::new(runtime(), config);
    let mut peer = Peer::start(&server, 0);
    // Nobody reads the server's answers. Offer 200 messages without waiting; the server must stop taking them.
    let mut offered = 0;
    for i in 0..200 {
        if peer.to_server.try_send(Ok(Message::Text(hello(&format!("m{i}"))))).is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if peer.to_server.try_send(Ok(Message::Text(hello(&format!("m{i}"))))).is_err() {
                break;
            }
        }
        offered += 1;
    }
    // In flight at most: 2 handlers + 2 queued + 1 being written + the channels' own small buffers.
    assert!(offered < 20, "the server kept reading: {offered} messages taken");
    // Once the peer reads again, every taken message is answered.
    let mut answered = 0;
    while answered < offered {
        let v = peer.next_json().await;
        assert_eq!(v["body"]["type"], "CAPABILITY_MANIFEST");
        answered += 1;
    }
}

#[tokio::test]
async fn a_silent_peer_is_dead_and_its_sessions_are_suspended() {
    let rt = runtime();
    let config = WsServerConfig {
        ping_interval: Duration::from_millis(20),
        idle_timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let server = WsServer::new(rt.clone(), config);
    let (mut to_server, inbound) = fmpsc::channel(4);
    let (outbound, mut from_server) = fmpsc::channel(64);
    let done = {
        let server = server.clone();
        tokio::spawn(async move { server.serve_connection(PeerContext::default(), outbound, inbound).await })
    };
    let propose = envelope("p1", "", json!({"type": "SESSION_PROPOSE", "config": {}}));
    to_server.send(Ok(Message::Text(propose))).await.unwrap();
    let mut session = String::new();
    let mut pings = 0;
    let mut close = None;
    while let Some(m) = from_server.next().await {
        match m {
            Message::Text(t) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                session = v["body"]["session_id"].as_str().unwrap().to_owned();
            }
            Message::Ping(_) => pings += 1,
            Message::Close(f) => close = f,
            other => panic!("{other:?}"),
        }
    }
    assert!(pings >= 3, "pings: {pings}");
    assert_eq!(close.map(|f| f.code), Some(close_code::GOING_AWAY));
    assert_eq!(done.await.unwrap(), ConnectionEnd::IdleTimeout);
    assert_eq!(rt.session_state(&session), Some(SessionState::Suspended));
}

#[test]
fn origins_are_checked_against_host_and_the_allow_list() {
    let headers = |origin: Option<&str>, host: &str| {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        if let Some(o) = origin {
            h.insert(header::ORIGIN, HeaderValue::from_str(o).unwrap());
        }
        h
    };
    let none: &[String] = &[];
    assert!(check_origin(&headers(None, "127.0.0.1:8090"), none).is_ok());
    assert!(check_origin(&headers(Some("http://127.0.0.1:8090"), "127.0.0.1:8090"), none).is_ok());
    assert!(check_origin(&headers(Some("HTTPS://Localhost:8090/"), "localhost:8090"), none).is_ok());
    for bad in ["http://evil.example", "null", "http://127.0.0.1:8091", "http://127.0.0.1", "127.0.0.1:8090"] {
        assert!(check_origin(&headers(Some(bad), "127.0.0.1:8090"), none).is_err(), "{bad}");
    }
    let allowed = vec!["https://app.example".to_owned()];
    assert!(check_origin(&headers(Some("https://app.example"), "127.0.0.1:8090"), &allowed).is_ok());
    assert!(check_origin(&headers(Some("https://app.example.evil"), "127.0.0.1:8090"), &allowed).is_err());
    assert!(check_origin(&headers(Some("http://anything"), "h"), &["*".to_owned()]).is_ok());
}

/// A sink that delivers the frames of its first `flushes` flushes and then never completes a flush: a socket
/// whose peer stopped reading after the bytes left the process's buffer.
struct StallingSink {
    flushes: usize,
    buffered: Vec<Message>,
    delivered: Arc<std::sync::Mutex<Vec<Message>>>,
}

impl Sink<Message> for StallingSink {
    type Error = std::convert::Infallible;

    fn poll_ready(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn start_send(mut self: std::pin::Pin<&mut Self>, item: Message) -> Result<(), Self::Error> {
        self.buffered.push(item);
        Ok(())
    }

    fn poll_flush(mut self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.flushes == 0 {
            return Poll::Pending;
        }
        self.flushes -= 1;
        let frames = std::mem::take(&mut self.buffered);
        self.delivered.lock().unwrap().extend(frames);
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.poll_flush(cx)
    }
}

/// A write timeout ends the connection: the answer fed but never flushed, and the one flushed just before (which
/// the kernel may drop with the connection's reset), are both held for the resume.
#[tokio::test(start_paused = true)]
async fn answers_the_peer_may_not_have_read_when_its_writes_stall_are_held_for_the_resume() {
    let config = WsServerConfig {
        write_timeout: Duration::from_secs(1),
        ping_interval: Duration::from_secs(3600),
        idle_timeout: Duration::from_secs(3600),
        ..Default::default()
    };
    let server = WsServer::new(runtime(), config);
    let delivered = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = StallingSink { flushes: 2, buffered: Vec::new(), delivered: Arc::clone(&delivered) };
    let (mut to_server, inbound) = fmpsc::channel(4);
    let done = {
        let server = server.clone();
        tokio::spawn(async move { server.serve_connection(PeerContext::default(), sink, inbound).await })
    };
    let delivered_after = |n: usize| {
        let delivered = Arc::clone(&delivered);
        async move {
            while delivered.lock().unwrap().len() < n {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    };
    let propose = envelope("p1", "", json!({"type": "SESSION_PROPOSE", "config": {}}));
    to_server.send(Ok(Message::Text(propose))).await.unwrap();
    delivered_after(1).await;
    let accept: Value = match &delivered.lock().unwrap()[0] {
        Message::Text(t) => serde_json::from_str(t).unwrap(),
        other => panic!("{other:?}"),
    };
    let session = accept["body"]["session_id"].as_str().unwrap().to_owned();
    let submit = |id: &str, task: &str| {
        envelope(id, &session, json!({"type": "TASK_SUBMIT", "task_id": task, "skill": "echo", "input": task}))
    };
    // t1's result is flushed (handed to the kernel); t2's is fed, and its flush never completes.
    to_server.send(Ok(Message::Text(submit("m1", "t1")))).await.unwrap();
    delivered_after(2).await;
    to_server.send(Ok(Message::Text(submit("m2", "t2")))).await.unwrap();
    assert_eq!(done.await.unwrap(), ConnectionEnd::WriteTimeout);
    assert_eq!(delivered.lock().unwrap().len(), 2, "t2's result never left the process");
    assert_eq!(server.held_stats().results, 2, "both answers the peer may not have read are held");

    // The resume delivers them before the answer to the message that resumed the session.
    let mut peer = Peer::start(&server, 16);
    peer.send(Message::Text(submit("m3", "probe"))).await;
    let mut resumed = Vec::new();
    for _ in 0..2 {
        let v = peer.next_json().await;
        assert_eq!(v["body"]["type"], "TASK_RESULT", "{v}");
        resumed.push(v["body"]["task_id"].as_str().unwrap().to_owned());
    }
    resumed.sort();
    assert_eq!(resumed, ["t1", "t2"]);
    assert_eq!(peer.next_json().await["body"]["task_id"], "probe");
    assert_eq!(server.held_stats().results, 0);
}

#[tokio::test]
async fn shutdown_closes_with_going_away() {
    let server = WsServer::new(runtime(), WsServerConfig::default());
    let mut peer = Peer::start(&server, 16);
    peer.send(Message::Text(hello("h"))).await;
    let _ = peer.next_json().await;
    server.shutdown();
    assert!(matches!(peer.next().await, Message::Close(Some(CloseFrame { code: 1001, .. }))));
    assert_eq!(peer.done.await.unwrap(), ConnectionEnd::Shutdown);
}
