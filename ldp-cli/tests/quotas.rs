//! Issue 58: per-peer quotas keyed on what an attacker cannot choose, over real sockets. The attacker sends from
//! 127.0.0.1 and the honest client from 127.0.0.2 to one `ldp serve` process; each attack, which a quota keyed on
//! the declared `from` let through, leaves the honest client served throughout, and the refusing limit says so in
//! the server's log once, not per message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ldp_session::{Initiator, InitiatorConfig, InitiatorEvent, SecurityConfig, SeededIds, SystemClock};
use ldp_types::signing::{SignatureAlgorithm, SigningKey};
use ldp_types::{Body, Envelope, SessionConfig};

use crate::support::{Guard, send, serve};

const SECRET: &str = "one secret every peer holds";
const ATTACKER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
const HONEST: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// An HTTP client whose connections leave from `address`.
fn client_from(address: IpAddr) -> reqwest::Client {
    reqwest::Client::builder().local_address(address).timeout(Duration::from_secs(20)).build().unwrap()
}

/// An initiator sending as `from`, signing with the shared secret when `signed`.
fn initiator(from: &str, to: &str, signed: bool) -> Initiator {
    let mut cfg = InitiatorConfig::new(from);
    if signed {
        cfg.security =
            SecurityConfig::symmetric(SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, SECRET).unwrap());
    }
    Initiator::new(cfg, to, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()))
}

/// The error code of a refusal, or `None` for an answer that is not one.
fn refusal(env: &Envelope) -> Option<String> {
    match &env.body {
        Body::TaskFailed(f) => Some(f.error.code.as_str().to_owned()),
        Body::SessionReject(r) => Some(r.error.as_ref().map(|e| e.code.as_str().to_owned()).unwrap_or_default()),
        _ => None,
    }
}

/// What the honest client does between the attacker's bursts: a session, and a task in it answered.
async fn honest_round(http: &reqwest::Client, url: &str, init: &mut Initiator) {
    let accept = send(http, url, &init.propose(SessionConfig::default())).await;
    assert!(matches!(accept.body, Body::SessionAccept(_)), "the honest proposal was refused: {:?}", refusal(&accept));
    init.handle_envelope(accept, None).unwrap();
    let mut session = None;
    while let Some(event) = init.poll_event() {
        if let InitiatorEvent::SessionEstablished { session_id, .. } = event {
            session = Some(session_id);
        }
    }
    let session = session.expect("no session established");
    let submit = init.submit(&session, "echo", serde_json::json!({"still": "served"}), None, None).unwrap();
    let answer = send(http, url, &submit).await;
    assert!(matches!(answer.body, Body::TaskResult(_)), "the honest task was refused: {:?}", refusal(&answer));
}

/// The server's log lines, gathered as they come.
fn gather_log(server: &mut Guard) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let stderr = server.0.stderr.take().unwrap();
    let sink = Arc::clone(&lines);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    lines
}

fn count(lines: &Mutex<Vec<String>>, needle: &str) -> usize {
    lines.lock().unwrap().iter().filter(|l| l.contains(needle)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_flood_rotating_from_leaves_the_honest_client_served_and_logs_once() {
    let (mut server, url) = serve(&["--delegate-id", "ldp:delegate:echo", "--max-sessions", "50"], Stdio::piped());
    let log = gather_log(&mut server);
    let (attacker, honest) = (client_from(ATTACKER), client_from(HONEST));
    let mut victim = initiator("ldp:delegate:honest", "ldp:delegate:echo", false);
    let mut refused = 0;
    for burst in 0..10 {
        for i in 0..40 {
            // 1,000 `from` values: keyed on `from`, each would be a peer of its own with a share of its own.
            let mut bot =
                initiator(&format!("ldp:delegate:bot-{}", (burst * 40 + i) % 1000), "ldp:delegate:echo", false);
            let answer = send(&attacker, &url, &bot.propose(SessionConfig::default())).await;
            if let Some(code) = refusal(&answer) {
                assert_eq!(code, "CAPACITY_EXCEEDED");
                refused += 1;
            }
        }
        honest_round(&honest, &url, &mut victim).await;
    }
    assert!(refused >= 300, "the attacker's address holds at most the table: {refused} refused");
    // Hundreds of refusals, a line when the table started refusing, not one per refusal.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(count(&log, "the session table (max_sessions) started refusing"), 1, "{:?}", log.lock().unwrap());
    assert!(count(&log, "refusing") <= 3, "{:?}", log.lock().unwrap());
    // Quiet for the quiet period: the end of the run is logged, on the machine's own timer.
    tokio::time::sleep(ldp_session::REFUSAL_QUIET_AFTER + Duration::from_secs(2)).await;
    assert_eq!(count(&log, "the session table (max_sessions) stopped refusing"), 1, "{:?}", log.lock().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proposals_sent_under_a_victims_id_do_not_lock_the_victim_out() {
    let (_server, url) = serve(&["--delegate-id", "ldp:delegate:echo"], Stdio::null());
    let (attacker, honest) = (client_from(ATTACKER), client_from(HONEST));
    let mut forged = initiator("ldp:delegate:victim", "ldp:delegate:echo", false);
    let mut refused = 0;
    for _ in 0..150 {
        let answer = send(&attacker, &url, &forged.propose(SessionConfig::default())).await;
        refused += usize::from(refusal(&answer).is_some());
    }
    // The attacker's address has its share (100 sessions by default) and no more.
    assert_eq!(refused, 50);
    let mut victim = initiator("ldp:delegate:victim", "ldp:delegate:echo", false);
    for _ in 0..3 {
        honest_round(&honest, &url, &mut victim).await;
    }
}

/// The same lock-out tried over WebSocket: the upgrade's address is the attacker's, whatever its frames declare.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proposals_under_a_victims_id_over_websocket_count_against_the_attackers_address() {
    use futures::{SinkExt, StreamExt};
    let (_server, url) = serve(&["--delegate-id", "ldp:delegate:echo"], Stdio::null());
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((ATTACKER, 0).into()).unwrap();
    let stream = socket.connect(url.trim_start_matches("http://").parse().unwrap()).await.unwrap();
    let ws_url = format!("{}/ldp/ws", url.replacen("http", "ws", 1));
    let (mut ws, _) = tokio_tungstenite::client_async(ws_url, stream).await.unwrap();
    let mut forged = initiator("ldp:delegate:victim", "ldp:delegate:echo", false);
    let mut refused = 0;
    for _ in 0..120 {
        let text = String::from_utf8(forged.propose(SessionConfig::default()).to_vec().unwrap()).unwrap();
        ws.send(tokio_tungstenite::tungstenite::Message::text(text)).await.unwrap();
        let answer = loop {
            match tokio::time::timeout(Duration::from_secs(10), ws.next()).await.unwrap().unwrap().unwrap() {
                tokio_tungstenite::tungstenite::Message::Text(t) => break Envelope::from_slice(t.as_bytes()).unwrap(),
                _ => continue,
            }
        };
        refused += usize::from(refusal(&answer).is_some());
    }
    assert_eq!(refused, 20, "the attacker's address has its share of 100");
    let mut victim = initiator("ldp:delegate:victim", "ldp:delegate:echo", false);
    honest_round(&client_from(HONEST), &url, &mut victim).await;
}

/// Behind `--trusted-proxy`, the client a listed proxy names in X-Forwarded-For is the one rate limited; anybody
/// else's header is ignored, so rotating it gains nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_trusted_proxys_forwarded_for_names_the_client() {
    let (_server, url) = serve(&["--rate-limit", "3/s", "--trusted-proxy", "127.0.0.1/32"], Stdio::null());
    let card = |http: reqwest::Client, forwarded: String| {
        let url = format!("{url}/ldp/identity");
        async move { http.get(url).header("x-forwarded-for", forwarded).send().await.unwrap().status().as_u16() }
    };
    // Through the proxy: ten clients, each well within its rate.
    for i in 0..10 {
        assert_eq!(card(client_from(ATTACKER), format!("198.51.100.{i}")).await, 200, "client {i}");
    }
    // Not a proxy: its header is its own claim, and its fourth request in the second is refused.
    let mut statuses = Vec::new();
    for i in 0..4 {
        statuses.push(card(client_from(HONEST), format!("203.0.113.{i}")).await);
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_secret_holder_filling_the_replay_window_leaves_other_signers_served() {
    let (mut server, url) = serve(
        &[
            "--delegate-id",
            "ldp:delegate:echo",
            "--sign",
            "hmac-sha256-jcs",
            "--secret",
            SECRET,
            "--replay-entries",
            "400",
            "--replay-entries-per-peer",
            "100",
        ],
        Stdio::piped(),
    );
    let log = gather_log(&mut server);
    let (attacker, honest) = (client_from(ATTACKER), client_from(HONEST));
    let mut bots: Vec<Initiator> =
        (0..10).map(|i| initiator(&format!("ldp:delegate:signer-{i}"), "ldp:delegate:echo", true)).collect();
    let mut victim = initiator("ldp:delegate:honest-signer", "ldp:delegate:echo", true);
    let mut refused = 0;
    for round in 0..10 {
        // Ten `from` values, 60 signed messages each round: each message is an entry in the replay window.
        for bot in bots.iter_mut() {
            for _ in 0..6 {
                let answer = send(&attacker, &url, &bot.hello()).await;
                if let Some(code) = refusal(&answer) {
                    assert_eq!(code, "CAPACITY_EXCEEDED", "round {round}");
                    refused += 1;
                }
            }
        }
        honest_round(&honest, &url, &mut victim).await;
    }
    // The attacker's address holds its share of 100; keyed on `from`, it would have held the window's 400.
    assert_eq!(refused, 600 - 100);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(count(&log, "the replay window started refusing"), 1, "{:?}", log.lock().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_authorization_headers_are_refused_400() {
    let (_server, url) = serve(&["--token", "tok-a=acme", "--token", "tok-b=acme"], Stdio::null());
    let http = reqwest::Client::new();
    let mut init = initiator("ldp:delegate:client", "ldp:delegate:echo", false);
    let resp = http
        .post(format!("{url}/ldp/messages"))
        .header("content-type", "application/json")
        .header("authorization", "Bearer tok-a")
        .header("authorization", "Bearer tok-b")
        .body(init.hello().to_vec().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "MALFORMED_MESSAGE", "{body}");
    // One header is served as before.
    let resp = http
        .post(format!("{url}/ldp/messages"))
        .header("content-type", "application/json")
        .header("authorization", "Bearer tok-a")
        .body(init.hello().to_vec().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}
