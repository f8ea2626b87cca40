#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! TASK_SUBMIT -> TASK_RESULT throughput and latency over one WebSocket connection versus the same load over HTTP,
//! side by side in one run, against one server that speaks both (an echo delegate, so the transport dominates);
//! then the memory of idle WebSocket connections.
//!
//! Run with: cargo bench -p ldp-transport-ws --bench ws
//! (`LDP_BENCH_SECS` sets the measuring time per cell, default 3; `LDP_BENCH_SESSIONS=1,16` the cells;
//! `LDP_BENCH_WS_ONLY=1` measures WebSocket alone, for profiling.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ldp_session::runtime::{Client, DelegateRuntime, EchoDelegate, Transport};
use ldp_session::{InitiatorConfig, Responder, ResponderConfig, SeededIds, SystemClock};
use ldp_transport_http::{HttpServerConfig, HttpState, HttpTransport};
use ldp_transport_ws::{WsOptions, WsServer, WsServerConfig, WsTransport};
use ldp_types::{Capability, DelegateId, IdentityCard, PayloadMode, SessionConfig};
use serde_json::json;
use tokio::net::TcpListener;

fn runtime() -> DelegateRuntime {
    let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:echo").unwrap(), "Echo", "none", "1");
    card.capabilities.push(Capability::new("echo"));
    let mut cfg = ResponderConfig::new(card);
    cfg.limits.max_concurrent_tasks = 4096;
    // One principal opens every session of the run (256 per cell, both transports): above the default cap of 100.
    cfg.limits.max_sessions_per_principal = 4096;
    let responder = Responder::new(cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    DelegateRuntime::new(responder, Arc::new(EchoDelegate))
}

struct Cell {
    ops_per_sec: f64,
    p50: Duration,
    p99: Duration,
}

async fn client<T: Transport>(t: T) -> Client<T> {
    Client::connect(
        t,
        InitiatorConfig::new("ldp:delegate:bench"),
        Arc::new(SystemClock),
        Box::new(SeededIds::from_entropy()),
    )
    .await
    .unwrap()
}

/// `sessions` concurrent sessions on one client, each submitting back to back.
async fn measure<T: Transport + 'static>(c: Arc<Client<T>>, sessions: usize, secs: f64) -> Cell {
    let text = SessionConfig { preferred_payload_modes: Some(vec![PayloadMode::Text]), ..Default::default() };
    let mut ids = Vec::new();
    for _ in 0..sessions {
        ids.push(c.propose(text.clone()).await.unwrap().session_id);
    }
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for sid in ids.clone() {
        let (c, measuring, stop) = (c.clone(), measuring.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                c.submit(&sid, "echo", json!("ping"), None).await.unwrap();
                if measuring.load(Ordering::Relaxed) {
                    lat.push(t0.elapsed());
                }
            }
            lat
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    measuring.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await.unwrap());
    }
    for sid in &ids {
        c.close(sid).await.unwrap();
    }
    all.sort_unstable();
    let pick = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    Cell { ops_per_sec: all.len() as f64 / elapsed.as_secs_f64(), p50: pick(0.50), p99: pick(0.99) }
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

/// The session counts to measure: `LDP_BENCH_SESSIONS` (comma-separated), default 1, 16 and 256.
fn cells() -> Vec<usize> {
    std::env::var("LDP_BENCH_SESSIONS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 16, 256])
}

fn ws_only() -> bool {
    std::env::var_os("LDP_BENCH_WS_ONLY").is_some()
}

fn main() {
    let secs: f64 = std::env::var("LDP_BENCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let delegate = runtime();
        let ws_server = WsServer::new(delegate.clone(), WsServerConfig::default());
        let http = HttpState::new(delegate.clone(), HttpServerConfig::default());
        let app = ldp_transport_http::router(http).merge(ws_server.router());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

        let http = Arc::new(client(HttpTransport::new(&url).unwrap()).await);
        let ws = Arc::new(client(WsTransport::connect(&url, WsOptions::default()).await.unwrap()).await);
        println!("TASK_SUBMIT -> TASK_RESULT, echo delegate, one client, {secs} s per cell, {} cores", num_cpus());
        println!();
        println!("| sessions | HTTP ops/s | HTTP p50 | HTTP p99 | WS ops/s | WS p50 | WS p99 | WS/HTTP |");
        println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
        for sessions in cells() {
            // `LDP_BENCH_WS_ONLY=1` (for profiling one transport) leaves the HTTP cells out; the ratio is then 0.
            let h = if ws_only() {
                Cell { ops_per_sec: f64::INFINITY, p50: Duration::ZERO, p99: Duration::ZERO }
            } else {
                measure(http.clone(), sessions, secs).await
            };
            let w = measure(ws.clone(), sessions, secs).await;
            println!(
                "| {sessions} | {:.0} | {:.0} us | {:.0} us | {:.0} | {:.0} us | {:.0} us | {:.2}x |",
                h.ops_per_sec,
                h.p50.as_secs_f64() * 1e6,
                h.p99.as_secs_f64() * 1e6,
                w.ops_per_sec,
                w.p50.as_secs_f64() * 1e6,
                w.p99.as_secs_f64() * 1e6,
                w.ops_per_sec / h.ops_per_sec,
            );
        }
        assert_eq!(ws.transport().stats().connections, 1);
        drop(ws);
        drop(http);

        // Idle connections: RSS growth of the process, which holds both ends of each.
        const N: usize = 500;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = rss_bytes();
        let mut clients = Vec::new();
        for _ in 0..N {
            clients.push(WsTransport::connect(&url, WsOptions::default()).await.unwrap());
        }
        while ws_server.connections() < N {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let both = rss_bytes().saturating_sub(before);
        drop(clients);
        while ws_server.connections() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Raw client sockets that hold only tungstenite's state: the growth is mostly the server's side.
        let before = rss_bytes();
        let mut raw = Vec::new();
        let ws_url = format!("{}/ldp/ws", url.replacen("http", "ws", 1));
        for _ in 0..N {
            raw.push(tokio_tungstenite::connect_async(ws_url.as_str()).await.unwrap().0);
        }
        while ws_server.connections() < N {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let server_side = rss_bytes().saturating_sub(before);
        println!();
        println!("Idle connections ({N}), RSS growth per connection:");
        println!("- WsTransport client + server end, both in this process: {:.1} KiB", both as f64 / N as f64 / 1024.0);
        println!("- server end + a bare tungstenite client socket: {:.1} KiB", server_side as f64 / N as f64 / 1024.0);
        drop(raw);
    });
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}
