//! Hostile connections over real sockets on 127.0.0.1:0 (issue 14, findings 3 and the connection and rate caps):
//! idle sockets, half-sent heads, trickled and never-ending bodies, TLS handshakes that never finish, one
//! connection over the cap, one request over the rate. Every test uses short limits and bounded waits.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ldp_session::runtime::{DelegateRuntime, EchoDelegate};
use ldp_session::{AuthenticatedPeer, Responder, ResponderConfig, SeededIds, SystemClock};
use ldp_transport_http::{ConnectionLimits, HttpServerConfig, HttpState, RateLimit, ServerHandle, spawn};
use ldp_types::{Capability, DelegateId, IdentityCard};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn state(config: HttpServerConfig) -> HttpState {
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:echo").unwrap(), "Echo", "test", "1");
    card.capabilities.push(Capability::new("echo"));
    let responder = Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::new(7)));
    HttpState::new(DelegateRuntime::new(responder, Arc::new(EchoDelegate)), config)
}

fn short_limits() -> ConnectionLimits {
    ConnectionLimits {
        max_connections: 64,
        header_timeout: Duration::from_millis(400),
        idle_timeout: Duration::from_millis(400),
        body_timeout: Duration::from_millis(400),
        ..ConnectionLimits::default()
    }
}

/// Long timeouts, so that only what a test turns on (a minimum rate, the cap) can cut a connection.
fn patient_limits() -> ConnectionLimits {
    ConnectionLimits {
        max_connections: 64,
        header_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(30),
        body_timeout: Duration::from_secs(30),
        min_head_rate: 0,
        min_body_rate: 0,
        min_rate_window: Duration::from_secs(5),
    }
}

/// A connection from `ip` (any address of 127.0.0.0/8 is loopback on Linux), to tell attackers from clients.
async fn connect_from(ip: &str, addr: std::net::SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{ip}:0").parse().unwrap()).unwrap();
    socket.connect(addr).await.unwrap()
}

/// A HELLO the echo delegate answers with 200, its body preceded by `padding` bytes of JSON whitespace.
fn padded_hello(padding: usize) -> Vec<u8> {
    let hello = serde_json::json!({"message_id": "m1", "from": "ldp:delegate:c", "to": "ldp:delegate:echo",
        "timestamp": "2026-01-01T00:00:00Z",
        "body": {"type": "HELLO", "delegate_id": "ldp:delegate:c", "supported_modes": ["text"]}});
    let mut body = vec![b' '; padding];
    body.extend_from_slice(&serde_json::to_vec(&hello).unwrap());
    body
}

fn post_head(content_length: usize) -> String {
    format!(
        "POST /ldp/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {content_length}\r\n\r\n"
    )
}

/// Waits until the server counts `n` open connections (at most 2 s).
async fn wait_open(server: &ServerHandle, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while server.connections().open() != n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(server.connections().open(), n);
}

async fn server(limits: ConnectionLimits) -> ServerHandle {
    spawn("127.0.0.1:0", state(HttpServerConfig { limits, ..Default::default() })).await.unwrap()
}

/// Reads until the server closes the connection, for at most `within`. Returns what was read and whether the
/// connection was closed (false: still open when time ran out).
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> (String, bool) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), false),
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

fn status_of(response: &str) -> u16 {
    response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn json_body(response: &str) -> Value {
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    serde_json::from_str(body).unwrap_or(Value::Null)
}

#[tokio::test]
async fn an_idle_socket_is_closed_after_the_idle_timeout() {
    let server = server(short_limits()).await;
    let mut idle = TcpStream::connect(server.addr()).await.unwrap();
    let started = Instant::now();
    let (got, closed) = read_until_closed(&mut idle, Duration::from_secs(5)).await;
    assert!(closed, "an idle connection stayed open 5 s with a 400 ms idle timeout");
    assert!(got.is_empty(), "nothing was asked, nothing is answered: {got:?}");
    assert!(started.elapsed() >= Duration::from_millis(350), "closed too early: {:?}", started.elapsed());
    // A keep-alive connection that served a request is idle again afterwards, and closed likewise.
    let mut kept = TcpStream::connect(server.addr()).await.unwrap();
    kept.write_all(b"GET /ldp/identity HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let (got, closed) = read_until_closed(&mut kept, Duration::from_secs(5)).await;
    assert_eq!(status_of(&got), 200, "{got}");
    assert!(closed, "an idle keep-alive connection stayed open");
    assert_eq!(server.connections().open(), 0);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_half_sent_head_is_cut_at_the_header_timeout_even_when_it_trickles() {
    let limits = ConnectionLimits { idle_timeout: Duration::from_secs(30), ..short_limits() };
    let server = server(limits).await;
    // Half a head, then silence.
    let mut half = TcpStream::connect(server.addr()).await.unwrap();
    half.write_all(b"POST /ldp/messages HTTP/1.1\r\nhost: x\r\n").await.unwrap();
    let (_, closed) = read_until_closed(&mut half, Duration::from_secs(5)).await;
    assert!(closed, "a half-sent head kept its connection open");
    // A head trickled a byte every 50 ms: progress does not extend the deadline.
    let mut trickle = TcpStream::connect(server.addr()).await.unwrap();
    let started = Instant::now();
    let head = b"GET /ldp/identity HTTP/1.1\r\nhost: x\r\nx-pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut cut = false;
    for byte in head {
        if trickle.write_all(&[*byte]).await.is_err() {
            cut = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (got, closed) = read_until_closed(&mut trickle, Duration::from_secs(2)).await;
    assert!(cut || closed, "a trickled head was read for {:?}", started.elapsed());
    assert_ne!(status_of(&got), 200, "the trickled head was served: {got}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_body_trickled_below_the_rate_gets_408_and_the_connection_closes() {
    let server = server(short_limits()).await;
    let mut slow = TcpStream::connect(server.addr()).await.unwrap();
    slow.write_all(
        b"POST /ldp/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{",
    )
    .await
    .unwrap();
    let writer = tokio::spawn(async move {
        for _ in 0..60 {
            if slow.write_all(b" ").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        slow
    });
    // The writer owns the socket; read through a second handle.
    let mut slow = writer.await.unwrap();
    let (got, closed) = read_until_closed(&mut slow, Duration::from_secs(3)).await;
    assert_eq!(status_of(&got), 408, "{got}");
    assert!(got.to_ascii_lowercase().contains("connection: close"), "{got}");
    let error = &json_body(&got)["error"];
    assert_eq!((error["code"].as_str(), error["retryable"].as_bool()), (Some("TIMEOUT"), Some(true)), "{got}");
    assert!(closed);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_never_ending_chunked_body_is_cut_slow_or_fast() {
    let server = spawn(
        "127.0.0.1:0",
        state(HttpServerConfig { max_body: 64 * 1024, limits: short_limits(), ..Default::default() }),
    )
    .await
    .unwrap();
    let head = b"POST /ldp/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
    // Slow: one small chunk every 50 ms, forever.
    let mut slow = TcpStream::connect(server.addr()).await.unwrap();
    slow.write_all(head).await.unwrap();
    let started = Instant::now();
    let mut answer = String::new();
    let mut buf = [0u8; 4096];
    while started.elapsed() < Duration::from_secs(5) {
        if slow.write_all(b"1\r\n \r\n").await.is_err() {
            break;
        }
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(50), slow.read(&mut buf)).await {
            if n == 0 {
                break;
            }
            answer.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }
    let (rest, closed) = read_until_closed(&mut slow, Duration::from_secs(2)).await;
    answer.push_str(&rest);
    assert_eq!(status_of(&answer), 408, "{answer}");
    assert!(closed, "the chunked body was still being read after {:?}", started.elapsed());
    // Fast: chunks as quickly as the socket takes them; the size limit cuts it.
    let mut fast = TcpStream::connect(server.addr()).await.unwrap();
    fast.write_all(head).await.unwrap();
    let chunk = format!("{:x}\r\n{}\r\n", 4096, " ".repeat(4096));
    let writer = tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && fast.write_all(chunk.as_bytes()).await.is_ok() {}
        fast
    });
    let mut fast = tokio::time::timeout(Duration::from_secs(10), writer).await.unwrap().unwrap();
    let (answer, closed) = read_until_closed(&mut fast, Duration::from_secs(2)).await;
    assert!(closed);
    // The writer may have been reset before reading the answer; when it got one, it is the typed 413.
    if !answer.is_empty() {
        assert_eq!(status_of(&answer), 413, "{answer}");
    }
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_connection_over_the_cap_gets_503_with_retry_after_and_the_cap_frees_up() {
    let limits = ConnectionLimits { max_connections: 2, ..patient_limits() };
    // Two handlers running (a route that takes 1.5 s to answer): nothing can be closed to make room.
    let st = state(HttpServerConfig { limits: limits.clone(), ..Default::default() });
    let slow = axum::Router::new().route(
        "/slow",
        axum::routing::get(|| async {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            "done"
        }),
    );
    let app = ldp_transport_http::router_with(st.clone(), slow);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(ldp_transport_http::serve_router_with_limits(
        listener,
        st.runtime().clone(),
        app,
        limits,
        async move {
            let _ = stopped.await;
        },
    ));
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        held.push(s);
    }
    // Let both handlers start before the third connection arrives.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut third = TcpStream::connect(addr).await.unwrap();
    third.write_all(b"GET /ldp/identity HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let (got, closed) = read_until_closed(&mut third, Duration::from_secs(3)).await;
    assert_eq!(status_of(&got), 503, "{got}");
    assert!(got.to_ascii_lowercase().contains("retry-after: 1"), "{got}");
    let error = &json_body(&got)["error"];
    assert_eq!((error["code"].as_str(), error["retryable"].as_bool()), (Some("CAPACITY_EXCEEDED"), Some(true)));
    assert!(closed);
    // The handlers answer; their connections, idle now, make room for a legitimate client.
    for s in &mut held {
        let mut buf = [0u8; 256];
        let n = tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf)).await.unwrap().unwrap();
        assert_eq!(status_of(&String::from_utf8_lossy(&buf[..n])), 200);
    }
    let mut next = TcpStream::connect(addr).await.unwrap();
    next.write_all(b"GET /ldp/identity HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
    let (got, _) = read_until_closed(&mut next, Duration::from_secs(3)).await;
    assert_eq!(status_of(&got), 200, "{got}");
    drop(held);
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
}

#[tokio::test]
async fn half_open_sockets_at_the_cap_time_out_and_let_legitimate_clients_back_in() {
    let limits = ConnectionLimits { max_connections: 8, ..short_limits() };
    let server = server(limits).await;
    let mut holders = Vec::new();
    for _ in 0..8 {
        let mut s = TcpStream::connect(server.addr()).await.unwrap();
        s.write_all(b"GET /ldp/identity HTTP/1.1\r\n").await.unwrap();
        holders.push(s);
    }
    tokio::time::sleep(Duration::from_millis(900)).await;
    let client = reqwest::Client::new();
    let resp = client.get(format!("{}/ldp/identity", server.url())).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    drop(holders);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn at_the_cap_the_longest_quiet_connection_makes_room_for_a_real_client() {
    let limits = ConnectionLimits { max_connections: 6, ..patient_limits() };
    let server = server(limits).await;
    // Every slot held for 30 s by sockets that send nothing or half a head.
    let mut quiet = Vec::new();
    for i in 0..6 {
        let mut s = TcpStream::connect(server.addr()).await.unwrap();
        if i % 2 == 1 {
            s.write_all(b"GET /ldp/identity HTTP/1.1\r\n").await.unwrap();
        }
        quiet.push(s);
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while server.connections().open() < 6 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Real clients still get answers: quiet sockets make room.
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    for _ in 0..3 {
        let resp = client.get(format!("{}/ldp/identity", server.url())).send().await.unwrap();
        assert_eq!(resp.status(), 200);
    }
    let mut closed = 0;
    for s in &mut quiet {
        if read_until_closed(s, Duration::from_millis(100)).await.1 {
            closed += 1;
        }
    }
    // At least one was closed to let the first client in; later clients may reuse the slot the previous freed.
    assert!(closed >= 1, "no quiet socket was closed");
    assert!(server.connections().open() <= 6);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_tls_handshake_that_never_completes_is_dropped_and_counts_against_the_cap() {
    let ca = ldp_transport_http::test_pki::TestCa::new("hardening CA").unwrap();
    let issued = ca.server_cert().unwrap();
    let tls =
        ldp_transport_http::ServerTlsConfig::from_pem(issued.cert_pem.as_bytes(), issued.key_pem.as_bytes(), None)
            .unwrap()
            .with_handshake_timeout(Duration::from_millis(400));
    let limits = ConnectionLimits { max_connections: 1, ..short_limits() };
    let server =
        ldp_transport_http::spawn_tls("127.0.0.1:0", state(HttpServerConfig { limits, ..Default::default() }), tls)
            .await
            .unwrap();
    let mut silent = TcpStream::connect(server.addr()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while server.connections().open() < 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = Instant::now();
    let (_, closed) = read_until_closed(&mut silent, Duration::from_secs(5)).await;
    assert!(closed, "a silent TLS client kept its connection");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    // At the cap, a stalled handshake is quiet: a new connection closes it and takes its place.
    let mut first = TcpStream::connect(server.addr()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _second = TcpStream::connect(server.addr()).await.unwrap();
    let (got, closed) = read_until_closed(&mut first, Duration::from_millis(300)).await;
    assert!(closed && got.is_empty(), "the older stalled handshake was not closed for the newer one: {got:?}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_principal_over_its_rate_gets_429_with_retry_after_and_others_do_not() {
    let tokens = HashMap::from([
        ("tokA".to_owned(), AuthenticatedPeer { delegate_id: None, trust_domain: "a".into() }),
        ("tokB".to_owned(), AuthenticatedPeer { delegate_id: None, trust_domain: "b".into() }),
    ]);
    let config = HttpServerConfig {
        tokens,
        rate_limit: Some(RateLimit::per_second(NonZeroU32::new(3).unwrap())),
        ..Default::default()
    };
    let server = spawn("127.0.0.1:0", state(config)).await.unwrap();
    let client = reqwest::Client::new();
    let url = format!("{}/ldp/identity", server.url());
    let get = |token: &'static str| client.get(&url).bearer_auth(token).send();
    for _ in 0..3 {
        assert_eq!(get("tokA").await.unwrap().status(), 200);
    }
    let over = get("tokA").await.unwrap();
    assert_eq!(over.status(), 429);
    let retry: u64 = over.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry), "retry-after {retry}");
    let body: Value = over.json().await.unwrap();
    assert_eq!(body["error"]["code"], "CAPACITY_EXCEEDED");
    assert_eq!(body["error"]["retryable"], true);
    // Another principal, and an anonymous client (keyed by its address), have quotas of their own.
    assert_eq!(get("tokB").await.unwrap().status(), 200);
    assert_eq!(client.get(&url).send().await.unwrap().status(), 200);
    // The quota refills.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(get("tokA").await.unwrap().status(), 200);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_head_trickled_below_the_minimum_rate_gets_408_long_before_the_header_timeout() {
    // 200 bytes/s over 300 ms windows: each window must bring 60 bytes of the head.
    let limits =
        ConnectionLimits { min_head_rate: 200, min_rate_window: Duration::from_millis(300), ..patient_limits() };
    let server = server(limits).await;
    let head = b"GET /ldp/identity HTTP/1.1\r\nhost: x\r\nx-pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    // Above the rate (8 bytes every 20 ms, ~400 bytes/s) the head is read to its end and served.
    let mut steady = TcpStream::connect(server.addr()).await.unwrap();
    for chunk in head.chunks(8) {
        steady.write_all(chunk).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut buf = [0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(3), steady.read(&mut buf)).await.unwrap().unwrap();
    assert_eq!(status_of(&String::from_utf8_lossy(&buf[..n])), 200);
    // Below it (a byte every 50 ms, 20 bytes/s): 408 at the end of the first window, not at the 30 s timeout.
    let mut slow = TcpStream::connect(server.addr()).await.unwrap();
    let started = Instant::now();
    let writer = tokio::spawn(async move {
        for byte in head {
            if slow.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            if started.elapsed() > Duration::from_secs(3) {
                break;
            }
        }
        slow
    });
    let mut slow = writer.await.unwrap();
    let (got, closed) = read_until_closed(&mut slow, Duration::from_secs(2)).await;
    assert_eq!(status_of(&got), 408, "{got}");
    assert!(got.to_ascii_lowercase().contains("connection: close"), "{got}");
    let error = &json_body(&got)["error"];
    assert_eq!((error["code"].as_str(), error["retryable"].as_bool()), (Some("TIMEOUT"), Some(true)), "{got}");
    assert!(error["message"].as_str().unwrap_or("").contains("200 bytes/s"), "{got}");
    assert!(closed);
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    server.shutdown().await.unwrap();
}

/// Sends `head`, then `burst` body bytes at once, then a byte every 100 ms; returns the answer and how long it took.
async fn trickle_body(server: &ServerHandle, burst: usize) -> (String, bool, Duration) {
    let mut slow = TcpStream::connect(server.addr()).await.unwrap();
    let started = Instant::now();
    slow.write_all(post_head(100_000).as_bytes()).await.unwrap();
    slow.write_all(&vec![b' '; burst]).await.unwrap();
    let writer = tokio::spawn(async move {
        while started.elapsed() < Duration::from_secs(4) && slow.write_all(b" ").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        slow
    });
    let mut slow = writer.await.unwrap();
    let (got, closed) = read_until_closed(&mut slow, Duration::from_secs(2)).await;
    (got, closed, started.elapsed())
}

#[tokio::test]
async fn a_body_trickled_below_the_minimum_rate_gets_408_long_before_the_body_timeout() {
    // 1,000 bytes/s over 300 ms windows: each window must bring 300 bytes of the body.
    let limits =
        ConnectionLimits { min_body_rate: 1000, min_rate_window: Duration::from_millis(300), ..patient_limits() };
    let server = server(limits).await;
    // A byte every 100 ms from the start; and a 20 kB burst (well above the rate in its window) then the same
    // trickle: a burst does not buy a trickle afterwards.
    for burst in [1, 20_000] {
        let (got, closed, took) = trickle_body(&server, burst).await;
        assert_eq!(status_of(&got), 408, "burst {burst}: {got}");
        assert!(got.to_ascii_lowercase().contains("connection: close"), "{got}");
        let error = &json_body(&got)["error"];
        assert_eq!((error["code"].as_str(), error["retryable"].as_bool()), (Some("TIMEOUT"), Some(true)), "{got}");
        assert!(error["message"].as_str().unwrap_or("").contains("1000 bytes/s"), "{got}");
        assert!(closed);
        // Cut within a window or two of the trickle starting, where the 30 s body timeout would have waited.
        assert!(took < Duration::from_secs(3), "burst {burst}: answered after {took:?}");
    }
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_large_upload_at_a_normal_speed_is_not_cut_by_the_minimum_rate() {
    // 256 KiB/s over 200 ms windows; the upload runs at about 2 MB/s with a 150 ms stall in the middle.
    let limits =
        ConnectionLimits { min_body_rate: 256 * 1024, min_rate_window: Duration::from_millis(200), ..patient_limits() };
    let config = HttpServerConfig { max_body: 2 * 1024 * 1024, limits, ..Default::default() };
    let server = spawn("127.0.0.1:0", state(config)).await.unwrap();
    let body = padded_hello(1024 * 1024);
    let mut upload = TcpStream::connect(server.addr()).await.unwrap();
    upload.write_all(post_head(body.len()).as_bytes()).await.unwrap();
    let started = Instant::now();
    for (i, chunk) in body.chunks(16 * 1024).enumerate() {
        upload.write_all(chunk).await.unwrap();
        tokio::time::sleep(Duration::from_millis(if i == 32 { 150 } else { 8 })).await;
    }
    let (got, _) = read_until_closed(&mut upload, Duration::from_millis(1500)).await;
    assert_eq!(status_of(&got), 200, "after {:?}: {got}", started.elapsed());
    assert_eq!(json_body(&got)["body"]["type"], "CAPABILITY_MANIFEST", "the HELLO was read whole and answered: {got}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn at_the_cap_requests_trickled_from_one_address_make_room_for_another_address() {
    // No minimum rates and 30 s timeouts: only eviction at the cap can let the client in.
    let limits = ConnectionLimits { max_connections: 6, ..patient_limits() };
    let server = server(limits).await;
    // The oldest connection: a legitimate upload from 127.0.0.1, half sent.
    let body = padded_hello(64);
    let (first, second) = body.split_at(40);
    let mut uploading = connect_from("127.0.0.1", server.addr()).await;
    uploading.write_all(post_head(body.len()).as_bytes()).await.unwrap();
    uploading.write_all(first).await.unwrap();
    wait_open(&server, 1).await;
    // Every other slot: requests from 127.0.0.2 whose bodies trickle (each one a request in progress).
    let mut attackers = Vec::new();
    for _ in 0..5 {
        let mut s = connect_from("127.0.0.2", server.addr()).await;
        s.write_all(post_head(100).as_bytes()).await.unwrap();
        s.write_all(b"{").await.unwrap();
        attackers.push(s);
    }
    wait_open(&server, 6).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Clients from 127.0.0.1 are served, not answered 503: the address holding the most connections gives way.
    for i in 0..3 {
        let mut client = connect_from("127.0.0.1", server.addr()).await;
        client.write_all(b"GET /ldp/identity HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
        let (got, _) = read_until_closed(&mut client, Duration::from_secs(3)).await;
        assert_eq!(status_of(&got), 200, "client {i}: {got}");
    }
    let mut evicted = 0;
    for s in &mut attackers {
        if read_until_closed(s, Duration::from_millis(100)).await.1 {
            evicted += 1;
        }
    }
    assert!(evicted >= 1, "no trickling connection from 127.0.0.2 was closed");
    // The older upload from the other address was left alone: it finishes and is answered.
    uploading.write_all(second).await.unwrap();
    let mut buf = [0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(3), uploading.read(&mut buf)).await.unwrap().unwrap();
    let got = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert_eq!(status_of(&got), 200, "{got}");
    server.shutdown().await.unwrap();
}

/// A server that answers `/ldp/messages` without a known bearer token `401`, before reading the body.
async fn server_with_tokens() -> ServerHandle {
    let tokens = HashMap::from([("tok".to_owned(), AuthenticatedPeer { delegate_id: None, trust_domain: "a".into() })]);
    spawn("127.0.0.1:0", state(HttpServerConfig { tokens, limits: patient_limits(), ..Default::default() }))
        .await
        .unwrap()
}

/// Reads one response (head, and a body of its `content-length`) within 3 s: its head, lower-cased, and its body.
async fn read_response(stream: &mut TcpStream) -> (String, String) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let head = head.to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            if body.len() >= length {
                return (head, body[..length].to_owned());
            }
        }
        let n = tokio::time::timeout_at(deadline, stream.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("no whole response within 3 s: {text:?}"))
            .unwrap();
        assert!(n > 0, "the connection closed before a whole response: {text:?}");
        got.extend_from_slice(&buf[..n]);
    }
}

fn says_close(head: &str) -> bool {
    head.lines().any(|l| l.starts_with("connection:") && l.contains("close"))
}

#[tokio::test]
async fn a_request_refused_before_its_body_arrived_leaves_the_connection_usable() {
    let server = server_with_tokens().await;
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    let body = padded_hello(0);
    // The head alone first: the server refuses it (no token) before any of the body has arrived.
    stream.write_all(post_head(body.len()).as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    stream.write_all(&body).await.unwrap();
    let (head, refused) = read_response(&mut stream).await;
    assert_eq!(status_of(&head), 401, "{head}");
    assert_eq!(serde_json::from_str::<Value>(&refused).unwrap()["error"]["code"], "UNAUTHENTICATED", "{refused}");
    assert!(!says_close(&head), "a small body can be drained, and the connection kept: {head}");
    // The connection said it stays open, so it must: the next request on it is answered.
    stream.write_all(b"GET /ldp/identity HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let (head, card) = read_response(&mut stream).await;
    assert_eq!(status_of(&head), 200, "{head}");
    assert_eq!(serde_json::from_str::<Value>(&card).unwrap()["delegate_id"], "ldp:delegate:echo");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_refused_request_whose_body_is_too_large_to_drain_is_told_the_connection_closes() {
    let server = server_with_tokens().await;
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    stream.write_all(post_head(512 * 1024).as_bytes()).await.unwrap();
    stream.write_all(&[b' '; 1024]).await.unwrap();
    let (head, _) = read_response(&mut stream).await;
    assert_eq!(status_of(&head), 401, "{head}");
    assert!(says_close(&head), "the rest of the body is not read, so the client must not reuse the connection: {head}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_refused_request_whose_body_stalls_is_answered_and_told_the_connection_closes() {
    let server = server_with_tokens().await;
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    stream.write_all(post_head(1000).as_bytes()).await.unwrap();
    stream.write_all(b"{\"message_id\":").await.unwrap();
    // The answer waits a bounded time for the rest of the body (patient limits: 30 s body timeout), then goes out.
    let (head, _) = read_response(&mut stream).await;
    assert_eq!(status_of(&head), 401, "{head}");
    assert!(says_close(&head), "{head}");
    let (_, closed) = read_until_closed(&mut stream, Duration::from_secs(2)).await;
    assert!(closed, "the server closes the connection it said it would");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_refused_request_with_another_expectation_is_drained_and_the_connection_kept() {
    // Only `100-continue` holds a body back (hyper ignores other expectations); such a body arrives and is drained.
    let server = server_with_tokens().await;
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    let body = padded_hello(0);
    let head = post_head(body.len()).replace("\r\n\r\n", "\r\nexpect: x-something-else\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    stream.write_all(&body).await.unwrap();
    let (head, _) = read_response(&mut stream).await;
    assert_eq!(status_of(&head), 401, "{head}");
    assert!(!says_close(&head), "the body came and was drained: {head}");
    stream.write_all(b"GET /ldp/identity HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let (head, _) = read_response(&mut stream).await;
    assert_eq!(status_of(&head), 200, "{head}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_refused_request_that_awaits_100_continue_is_not_asked_for_its_body() {
    let server = server_with_tokens().await;
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    // Compared as hyper compares it: case-insensitively.
    let head = post_head(100).replace("\r\n\r\n", "\r\nexpect: 100-Continue\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let (got, closed) = read_until_closed(&mut stream, Duration::from_secs(3)).await;
    assert!(closed, "the body was never sent: the connection cannot be reused and is closed: {got}");
    assert!(!got.contains("100 Continue"), "the body was asked for though the request was refused: {got}");
    assert_eq!(status_of(&got), 401, "{got}");
    assert!(says_close(&got.to_ascii_lowercase()), "{got}");
    server.shutdown().await.unwrap();
}
