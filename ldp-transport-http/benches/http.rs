//! Throughput and latency of TASK_SUBMIT -> TASK_RESULT within an established session over HTTP on loopback,
//! measured side by side in one run against:
//! - `ldp`: our server (`router`, `DelegateRuntime`, echo delegate) with `hmac-sha256-jcs` signatures required on
//!   every request, signed replies, and replay protection on;
//! - `bare-axum`: a bare axum endpoint in this process that parses the same JSON and answers a similar-sized JSON;
//! - `python-ref`: the Python reference SDK's delegate (`scripts/ref_delegate.py`, `hmac-sha256` with a secret,
//!   which it verifies on every signed request).
//!
//! The load generator is a separate process (this binary re-executed with `LDP_BENCH_ROLE=load`): a `reqwest`
//! client on `LDP_BENCH_LOADER_THREADS` threads (default 2) with `LDP_BENCH_CONCURRENCY` keep-alive connections (default 32), firing request bodies that were all built and
//! signed before the clock starts (unique message ids, nonces and task ids, so replay protection admits each once).
//!
//! Run with: `cargo bench -p ldp-transport-http --bench http` (needs python3 for the reference SDK; set
//! `LDP_BENCH_SKIP_PYTHON=1` to leave it out). `LDP_BENCH_REQUESTS` and `LDP_BENCH_CONCURRENCY` override the defaults.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::post;
use ldp_session::runtime::{Client, DelegateRuntime, EchoDelegate};
use ldp_session::{InitiatorConfig, Responder, ResponderConfig, SecurityConfig, SeededIds, SystemClock};
use ldp_transport_http::{HttpServerConfig, HttpState, HttpTransport};
use ldp_types::signing::{SignatureAlgorithm, SigningKey, sign};
use ldp_types::{Capability, DelegateId, Envelope, IdentityCard, PayloadMode, SessionConfig, TaskSubmit};
use serde_json::{Value, json};

// The same allocator for every target in this process (ours, bare axum, the load generator).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SECRET: &str = "bench-secret";
const CLIENT: &str = "ldp:delegate:bench-client";

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The same input for every target.
fn input(i: usize) -> Value {
    json!({"text": format!("benchmark request number {i}: please echo this sentence back unchanged")})
}

// ---------------------------------------------------------------------------------------------------------------
// Load generator (separate process).

struct LoadArgs {
    target: String,
    url: String,
    session: String,
    requests: usize,
    warmup: usize,
    concurrency: usize,
}

fn build_bodies(args: &LoadArgs, n: usize, offset: usize) -> Vec<Vec<u8>> {
    let now = ldp_types::time::format_timestamp(time::OffsetDateTime::now_utc());
    let prefix = uuid::Uuid::new_v4().simple().to_string();
    let jcs = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, SECRET).unwrap();
    let legacy = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256, SECRET).unwrap();
    (offset..offset + n)
        .map(|i| {
            let id = format!("{}-{i:012}", &prefix[..20]);
            let body = TaskSubmit::new(format!("task-{id}"), "echo".into(), input(i), None);
            let mut env = Envelope::new(format!("msg-{id}"), now.clone(), args.session.clone(), CLIENT, "peer", body)
                .with_payload_mode(PayloadMode::Text);
            match args.target.as_str() {
                "ldp" => {
                    env.nonce = Some(format!("{prefix}{i:016x}"));
                    sign(&mut env, &jcs).unwrap();
                }
                "python-ref" => sign(&mut env, &legacy).unwrap(),
                _ => {}
            }
            env.to_vec().unwrap()
        })
        .collect()
}

fn load_main() {
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    let mut next = || it.next().expect("load args: TARGET URL SESSION REQUESTS WARMUP CONCURRENCY");
    let args = LoadArgs {
        target: next(),
        url: next(),
        session: next(),
        requests: next().parse().unwrap(),
        warmup: next().parse().unwrap(),
        concurrency: next().parse().unwrap(),
    };
    let threads = env_num("LDP_BENCH_LOADER_THREADS", 2);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build().unwrap();
    rt.block_on(async move {
        let client = reqwest::Client::builder().pool_max_idle_per_host(args.concurrency).build().unwrap();
        let path = if args.target == "bare-axum" { "/echo" } else { "/ldp/messages" };
        let url = format!("{}{path}", args.url);
        // Warm up (connections, caches), then the measured run; both sets of bodies are built beforehand.
        let warm = build_bodies(&args, args.warmup, 0);
        let bodies = build_bodies(&args, args.requests, args.warmup);
        fire(&client, &url, warm, args.concurrency).await;
        let started = Instant::now();
        let (mut lat, errors) = fire(&client, &url, bodies, args.concurrency).await;
        let secs = started.elapsed().as_secs_f64();
        lat.sort_unstable();
        let pct = |p: f64| lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1))).copied();
        let report = json!({
            "target": args.target, "requests": args.requests, "errors": errors, "secs": secs,
            "rps": args.requests as f64 / secs, "p50_us": pct(0.50), "p99_us": pct(0.99),
        });
        println!("{report}");
    });
}

/// Sends every body once over `concurrency` connections; returns latencies (µs) and the number of failures.
async fn fire(client: &reqwest::Client, url: &str, bodies: Vec<Vec<u8>>, concurrency: usize) -> (Vec<u32>, usize) {
    let queue = Arc::new(std::sync::Mutex::new(bodies.into_iter()));
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (client, url, queue) = (client.clone(), url.to_owned(), queue.clone());
        workers.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0;
            loop {
                let Some(body) = queue.lock().unwrap().next() else { break };
                let t = Instant::now();
                let resp = client.post(&url).header("content-type", "application/json").body(body).send().await;
                let ok = match resp {
                    Ok(r) if r.status().is_success() => {
                        let bytes = r.bytes().await.unwrap_or_default();
                        // Count only real results.
                        memchr_result(&bytes)
                    }
                    Ok(r) => {
                        let _ = r.bytes().await;
                        false
                    }
                    Err(_) => false,
                };
                lat.push(u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX));
                if !ok {
                    errors += 1;
                }
            }
            (lat, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for w in workers {
        let (lat, e) = w.await.unwrap();
        all.extend(lat);
        errors += e;
    }
    (all, errors)
}

/// Whether a reply is a TASK_RESULT (a TASK_FAILED with 200 counts as an error).
fn memchr_result(bytes: &[u8]) -> bool {
    bytes.windows(11).any(|w| w == b"TASK_RESULT")
}

// ---------------------------------------------------------------------------------------------------------------
// Targets and orchestration.

/// The bare endpoint: parse the JSON, answer a similar-sized JSON shaped like a TASK_RESULT.
async fn bare(body: axum::body::Bytes) -> axum::response::Response {
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) => return axum::http::StatusCode::BAD_REQUEST.into_response(),
    };
    let reply = json!({
        "message_id": "00000000-0000-4000-8000-000000000000", "session_id": v["session_id"], "from": v["to"],
        "to": v["from"], "payload_mode": "text", "timestamp": v["timestamp"], "provenance": null,
        "nonce": "00112233445566778899aabbccddeeff", "signature_algorithm": "hmac-sha256-jcs",
        "signature": "0000000000000000000000000000000000000000000000000000000000000000",
        "body": {"type": "TASK_RESULT", "task_id": v["body"]["task_id"], "output": {"echo": v["body"]["input"]},
                 "provenance": {"produced_by": "ldp:delegate:bare", "model_version": "1", "payload_mode_used": "text",
                                "confidence": 1.0, "verified": false, "session_id": v["session_id"],
                                "timestamp": v["timestamp"], "verification_status": "unverified"}},
        "echo_reply": true,
    });
    let mut resp = axum::response::IntoResponse::into_response(serde_json::to_vec(&reply).unwrap_or_default());
    resp.headers_mut().insert("content-type", axum::http::HeaderValue::from_static("application/json"));
    resp
}

use axum::response::IntoResponse;

struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn python_delegate(repo: &Path) -> (Guard, String) {
    let py = Command::new("bash").arg(repo.join("scripts/ref-sdk.sh")).stderr(Stdio::inherit()).output().unwrap();
    assert!(py.status.success(), "scripts/ref-sdk.sh failed; set LDP_BENCH_SKIP_PYTHON=1 to bench without it");
    let py = String::from_utf8(py.stdout).unwrap().trim().to_owned();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let mut child = Command::new(py)
        .arg(repo.join("scripts/ref_delegate.py"))
        .args(["--host", "127.0.0.1", "--port", &port, "--secret", SECRET])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let url = line.trim().strip_prefix("READY ").expect("python delegate not ready").to_owned();
    (Guard(child), url)
}

fn run_load(target: &str, url: &str, session: &str, requests: usize, concurrency: usize) -> Value {
    let warmup = (requests / 10).max(100);
    let out = Command::new(std::env::current_exe().unwrap())
        .env("LDP_BENCH_ROLE", "load")
        .args([target, url, session, &requests.to_string(), &warmup.to_string(), &concurrency.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "load generator failed for {target}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn main() {
    if std::env::var("LDP_BENCH_ROLE").as_deref() == Ok("load") {
        return load_main();
    }
    let requests = env_num("LDP_BENCH_REQUESTS", 20_000);
    let concurrency = env_num("LDP_BENCH_CONCURRENCY", 32);
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let (ldp_url, session, bare_url) = rt.block_on(async {
        // Our server: signatures required, replay protection on, echo delegate.
        let mut card = IdentityCard::new(DelegateId::new("ldp:delegate:echo").unwrap(), "Echo", "echo", "1");
        card.capabilities.push(Capability::new("echo"));
        let mut cfg = ResponderConfig::new(card);
        let key = SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, SECRET).unwrap();
        cfg.security = SecurityConfig::symmetric(key.clone());
        assert!(cfg.security.replay.is_some());
        let responder = Responder::new(cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
        let state =
            HttpState::new(DelegateRuntime::new(responder, Arc::new(EchoDelegate)), HttpServerConfig::default());
        let server = ldp_transport_http::spawn("127.0.0.1:0", state).await.unwrap();
        let ldp_url = server.url().to_owned();
        std::mem::forget(server); // served until the process exits
        // Establish the session the load generator submits into.
        let mut icfg = InitiatorConfig::new(CLIENT);
        icfg.security = SecurityConfig::symmetric(key);
        icfg.supported_modes = vec![PayloadMode::Text];
        let client = Client::connect(
            HttpTransport::new(&ldp_url).unwrap(),
            icfg,
            Arc::new(SystemClock),
            Box::new(SeededIds::from_entropy()),
        )
        .await
        .unwrap();
        let session = client.propose(SessionConfig::default()).await.unwrap().session_id;
        // The bare endpoint.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let bare_url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, axum::Router::new().route("/echo", post(bare))).await });
        (ldp_url, session, bare_url)
    });
    let skip_python = std::env::var("LDP_BENCH_SKIP_PYTHON").is_ok_and(|v| v == "1");
    let python = (!skip_python).then(|| python_delegate(&repo));

    let threads = env_num("LDP_BENCH_LOADER_THREADS", 2);
    println!(
        "TASK_SUBMIT -> TASK_RESULT over HTTP/1.1 on loopback, {concurrency} connections, separate-process load \
         generator on {threads} thread(s), {} CPUs",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut results = vec![
        run_load("bare-axum", &bare_url, &session, requests, concurrency),
        run_load("ldp", &ldp_url, &session, requests, concurrency),
    ];
    if let Some((_guard, url)) = &python {
        results.push(run_load("python-ref", url, "", (requests / 10).max(1000), concurrency));
    }
    println!("| target | requests | errors | throughput (req/s) | p50 (µs) | p99 (µs) |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for r in &results {
        println!(
            "| {} | {} | {} | {:.0} | {} | {} |",
            r["target"].as_str().unwrap_or(""),
            r["requests"],
            r["errors"],
            r["rps"].as_f64().unwrap_or(0.0),
            r["p50_us"],
            r["p99_us"]
        );
    }
    let rps = |t: &str| results.iter().find(|r| r["target"] == t).and_then(|r| r["rps"].as_f64());
    if let (Some(ours), Some(bare)) = (rps("ldp"), rps("bare-axum")) {
        println!("ldp / bare-axum throughput: {:.0}% (target >= 60%)", 100.0 * ours / bare);
    }
    if let (Some(ours), Some(py)) = (rps("ldp"), rps("python-ref")) {
        println!("ldp / python-ref throughput: {:.1}x (target >= 10x)", ours / py);
    }
    assert!(results.iter().all(|r| r["errors"] == 0), "some requests failed: {results:?}");
    drop(python);
    rt.shutdown_timeout(Duration::from_millis(100));
}
