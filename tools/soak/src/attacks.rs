//! The floods `ldp-soak` sends, one function an attack: each runs until its deadline from the attacker's address
//! (127.0.0.2) and counts what it sent and what the server refused in its `AttackStats`.

#[allow(clippy::wildcard_imports)]
// The driver's shared vocabulary (its helpers and imports), as a child module sees it.
use crate::*;

/// An HTTP client whose connections come from 127.0.0.2 (the attacker's address).
pub(crate) fn attacker_http() -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap_or_default()
}

pub(crate) async fn attacker_socket(addr: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from(([127, 0, 0, 2], 0)))?;
    socket.connect(addr).await
}

/// SESSION_PROPOSE floods: 1 MB `from`, 900 kB message ids, 900 kB unknown members, and many small proposals from
/// ever new senders (the session cap).
pub(crate) async fn session_flood(server_url: String, deadline: Instant, stats: Arc<AttackStats>) {
    let big = "x".repeat(900 * 1024);
    let mut workers = Vec::new();
    for w in 0..16 {
        let (url, stats, big) = (server_url.clone(), stats.clone(), big.clone());
        workers.push(tokio::spawn(async move {
            let http = attacker_http();
            let mut i = w;
            while Instant::now() < deadline {
                i += 16;
                let from = format!("ldp:delegate:attacker-{}", random_id());
                let mut env = envelope("", &from, propose_body(), None);
                match i % 8 {
                    0 => env["from"] = json!(format!("ldp:delegate:{big}")),
                    1 => env["message_id"] = json!(big.clone()),
                    2 => env["body"]["config"]["padding"] = json!(big.clone()),
                    _ => {}
                }
                let what = match http.post(format!("{url}/ldp/messages")).json(&env).send().await {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let v: Value = r.json().await.unwrap_or(Value::Null);
                        match v["body"]["type"].as_str() {
                            Some(t) => format!("{status} {t}"),
                            None => format!("{status}"),
                        }
                    }
                    Err(e) if e.is_timeout() => "timeout".into(),
                    Err(_) => "error".into(),
                };
                stats.record(what);
            }
        }));
    }
    for w in workers {
        let _ = w.await;
    }
}

pub(crate) type Ws = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

pub(crate) async fn ws_connect(addr: SocketAddr) -> Option<Ws> {
    let stream = attacker_socket(addr).await.ok()?;
    let url = format!("ws://{addr}/ldp/ws");
    let (ws, _) = tokio_tungstenite::client_async(url, stream).await.ok()?;
    Some(ws)
}

/// Opens a session over WebSocket; returns its id.
pub(crate) async fn ws_session(ws: &mut Ws, from: &str) -> Option<String> {
    let env = envelope("", from, propose_body(), None);
    ws.send(Message::text(env.to_string())).await.ok()?;
    let reply = tokio::time::timeout(Duration::from_secs(5), ws.next()).await.ok()??.ok()?;
    let v: Value = serde_json::from_str(reply.to_text().ok()?).ok()?;
    v["body"]["session_id"].as_str().map(str::to_owned)
}

pub(crate) fn big_task(session_id: &str, from: &str, payload: &str) -> Message {
    let body = json!({"type": "TASK_SUBMIT", "task_id": random_id(), "skill": "echo", "input": payload});
    Message::text(envelope(session_id, from, body, None).to_string())
}

/// WebSocket clients that submit tasks with large outputs and never read their results.
pub(crate) async fn ws_nonreading(addr: SocketAddr, deadline: Instant, stats: Arc<AttackStats>) {
    let payload = "y".repeat(256 * 1024);
    let mut workers = Vec::new();
    for _ in 0..8 {
        let (stats, payload) = (stats.clone(), payload.clone());
        workers.push(tokio::spawn(async move {
            let Some(mut ws) = ws_connect(addr).await else {
                stats.record("connect failed");
                return;
            };
            let from = format!("ldp:delegate:attacker-{}", random_id());
            let Some(session) = ws_session(&mut ws, &from).await else {
                stats.record("no session");
                return;
            };
            while Instant::now() < deadline {
                // A send that cannot complete in a second means the server stopped reading us: hold on.
                match tokio::time::timeout(Duration::from_secs(1), ws.send(big_task(&session, &from, &payload))).await {
                    Ok(Ok(())) => stats.record("task sent"),
                    Ok(Err(_)) => {
                        stats.record("closed by server");
                        return;
                    }
                    Err(_) => {
                        stats.record("send blocked");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            }
        }));
    }
    for w in workers {
        let _ = w.await;
    }
}

/// WebSocket clients that submit tasks with large outputs and drop the connection, again and again: their results
/// are held for a resume that never comes.
pub(crate) async fn ws_dropping(addr: SocketAddr, deadline: Instant, stats: Arc<AttackStats>) {
    let payload = "z".repeat(256 * 1024);
    let mut workers = Vec::new();
    for _ in 0..8 {
        let (stats, payload) = (stats.clone(), payload.clone());
        workers.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let Some(mut ws) = ws_connect(addr).await else {
                    stats.record("connect failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let from = format!("ldp:delegate:attacker-{}", random_id());
                let Some(session) = ws_session(&mut ws, &from).await else {
                    stats.record("no session");
                    continue;
                };
                for _ in 0..16 {
                    if tokio::time::timeout(Duration::from_secs(1), ws.send(big_task(&session, &from, &payload)))
                        .await
                        .is_err()
                    {
                        break;
                    }
                    stats.record("task sent");
                }
                drop(ws);
                stats.record("dropped");
            }
        }));
    }
    for w in workers {
        let _ = w.await;
    }
}

/// More sockets than the server has file descriptors: idle ones, half-sent headers trickling a byte every few
/// seconds, and bodies sent at a byte every few seconds. Each reconnects when the server closes it.
pub(crate) async fn slowloris(addr: SocketAddr, sockets: usize, deadline: Instant, stats: Arc<AttackStats>) {
    let mut workers = Vec::new();
    for i in 0..sockets {
        let stats = stats.clone();
        workers.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let Ok(mut s) = attacker_socket(addr).await else {
                    stats.record("connect failed");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                };
                stats.record("connected");
                let opened = Instant::now();
                let (head, trickle): (&[u8], bool) = match i % 3 {
                    0 => (b"", false),
                    1 => (b"POST /ldp/messages HTTP/1.1\r\nHost: x\r\n", true),
                    _ => (
                        b"POST /ldp/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{",
                        true,
                    ),
                };
                let mut alive = s.write_all(head).await.is_ok();
                while alive && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    alive = if trickle { s.write_all(b"a").await.is_ok() } else { peer_open(&mut s).await };
                }
                if Instant::now() < deadline {
                    stats.record(format!("closed by server within {}s", (opened.elapsed().as_secs() / 5 + 1) * 5));
                }
            }
        }));
    }
    for w in workers {
        let _ = w.await;
    }
}

/// Whether the server still holds an idle socket open (a read that would block means yes).
pub(crate) async fn peer_open(s: &mut tokio::net::TcpStream) -> bool {
    let mut buf = [0u8; 1];
    match tokio::time::timeout(Duration::from_millis(10), s.peek(&mut buf)).await {
        Err(_) => true,
        Ok(Ok(n)) => n > 0,
        Ok(Err(_)) => false,
    }
}

/// Sends one attacker message over `http` (with the bearer `token` if any) and records the answer in `stats` as
/// `status type code`. A refusal is an `{"error"}` body, an in-protocol TASK_FAILED/SESSION_REJECT envelope, or any
/// other 4xx/5xx; a transport failure is recorded as such, neither answer nor refusal.
pub(crate) async fn send_attack(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    env: &Value,
    stats: &AttackStats,
) {
    let mut req = http.post(format!("{url}/ldp/messages")).json(env);
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    match req.send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let v: Value = r.json().await.unwrap_or(Value::Null);
            let code = v["error"]["code"].as_str().or_else(|| v["body"]["error"]["code"].as_str());
            let kind = v["body"]["type"].as_str().unwrap_or("");
            let refused = status >= 400 || code.is_some() || matches!(kind, "SESSION_REJECT" | "TASK_FAILED");
            stats.record_answer(format!("{status} {kind} {}", code.unwrap_or("")).trim().to_owned(), refused);
        }
        Err(e) if e.is_timeout() => stats.record("timeout"),
        Err(_) => stats.record("error"),
    }
}

/// One shared-secret holder sends signed messages, each with a fresh id and nonce, as fast as it can.
pub(crate) async fn replay_flood(server_url: String, deadline: Instant, stats: Arc<AttackStats>) {
    let Ok(key) = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, SOAK_SECRET) else { return };
    let key = Arc::new(key);
    let mut workers = Vec::new();
    for _ in 0..16 {
        let (url, stats, key) = (server_url.clone(), stats.clone(), key.clone());
        workers.push(tokio::spawn(async move {
            let http = attacker_http();
            while Instant::now() < deadline {
                let body =
                    json!({"type": "HELLO", "delegate_id": "ldp:delegate:attacker", "supported_modes": ["text"]});
                let env = envelope("", "ldp:delegate:attacker", body, Some(&key));
                send_attack(&http, &url, Some("attacker-token"), &env, &stats).await;
            }
        }));
    }
    for w in workers {
        let _ = w.await;
    }
}

/// Unauthenticated SESSION_PROPOSE from the attacker's address, 16 workers as fast as they can, the `n`th message
/// declaring the sender `from(n)`. Each accepted proposal holds a session (TTL 600 s) that is never used again.
pub(crate) async fn propose_flood(
    server_url: String,
    deadline: Instant,
    stats: Arc<AttackStats>,
    from: fn(u64) -> String,
) {
    let sent = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..16 {
        let (url, stats, sent) = (server_url.clone(), stats.clone(), sent.clone());
        workers.push(tokio::spawn(async move {
            let http = attacker_http();
            while Instant::now() < deadline {
                let env = envelope("", &from(sent.fetch_add(1, Ordering::Relaxed)), propose_body(), None);
                send_attack(&http, &url, None, &env, &stats).await;
            }
        }));
    }
    for w in workers {
        let _ = w.await;
    }
}

/// `from-rotation`: a thousand declared senders from one address. Were the per-source session share keyed on
/// `from`, they would hold a hundred thousand sessions between them, and fill a table of 2,000 in a blink.
pub(crate) async fn from_rotation(server_url: String, deadline: Instant, stats: Arc<AttackStats>) {
    propose_flood(server_url, deadline, stats, |n| format!("ldp:delegate:rotating-{}", n % 1000)).await;
}

/// `victim-lockout`: proposals declaring the legitimate client's own id, to use up its share of sessions were the
/// share keyed on `from`.
pub(crate) async fn victim_lockout(server_url: String, deadline: Instant, stats: Arc<AttackStats>) {
    propose_flood(server_url, deadline, stats, |_| LEGIT_FROM.to_owned()).await;
}

/// `secret-replay-fill`: a holder of the shared secret (no bearer token, so it is known by its address only)
/// sends signed HELLOs, each a replay-window entry, rotating ten declared senders, 16 workers as fast as they can.
/// Were the replay share keyed on `from`, the ten would together take the whole window and lock everyone out.
pub(crate) async fn secret_replay_fill(server_url: String, deadline: Instant, stats: Arc<AttackStats>) {
    let Ok(key) = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, SOAK_SECRET) else { return };
    let key = Arc::new(key);
    let sent = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..16 {
        let (url, stats, key, sent) = (server_url.clone(), stats.clone(), key.clone(), sent.clone());
        workers.push(tokio::spawn(async move {
            let http = attacker_http();
            while Instant::now() < deadline {
                let from = format!("ldp:delegate:signer-{}", sent.fetch_add(1, Ordering::Relaxed) % 10);
                let body = json!({"type": "HELLO", "delegate_id": from, "supported_modes": ["text"]});
                let env = envelope("", &from, body, Some(&key));
                send_attack(&http, &url, None, &env, &stats).await;
            }
        }));
    }
    for w in workers {
        let _ = w.await;
    }
}
