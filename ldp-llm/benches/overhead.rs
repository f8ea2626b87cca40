//! What LDP adds over calling a provider directly: the same chat requests sent (a) straight to a local
//! OpenAI-compatible stub with `OpenAiBackend` and (b) through LDP over HTTP (`HttpTransport` client ->
//! `ldp-transport-http` server -> `LlmDelegate` -> the same stub), 1 and 16 at a time, with the stub answering at
//! once (LDP's cost alone) and after 20 ms (a model's time to first token, still far below a real one).
//!
//! Run: `cargo bench -p ldp-llm --bench overhead` (about 20 s; `OVERHEAD_REQUESTS=N` changes the count per run).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use ldp_llm::stub::{Flavor, Stub, StubConfig};
use ldp_llm::{ChatMessage, ChatRequest, HttpOptions, LlmBackend, LlmDelegate, OpenAiBackend};
use ldp_session::runtime::{Client, DelegateRuntime};
use ldp_session::{InitiatorConfig, Responder, ResponderConfig, SeededIds, SystemClock};
use ldp_transport_http::{HttpServerConfig, HttpState, HttpTransport};
use ldp_types::{DelegateId, SessionConfig};

const PROMPT: &str = "Summarize the design note in one sentence please";

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

struct Run {
    p50: Duration,
    p99: Duration,
    per_sec: f64,
}

/// Runs `requests` calls of `call`, `concurrency` at a time; latency percentiles and throughput.
async fn measure<F, Fut>(requests: usize, concurrency: usize, call: F) -> Run
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let call = Arc::new(call);
    let per_worker = requests / concurrency;
    let start = Instant::now();
    let mut workers = Vec::new();
    for w in 0..concurrency {
        let call = call.clone();
        workers.push(tokio::spawn(async move {
            let mut times = Vec::with_capacity(per_worker);
            for _ in 0..per_worker {
                let t = Instant::now();
                call(w).await;
                times.push(t.elapsed());
            }
            times
        }));
    }
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await.unwrap());
    }
    let elapsed = start.elapsed();
    all.sort();
    Run { p50: percentile(&all, 0.5), p99: percentile(&all, 0.99), per_sec: all.len() as f64 / elapsed.as_secs_f64() }
}

async fn compare(latency: Duration, concurrency: usize, requests: usize) {
    let stub = Stub::start(StubConfig::new(Flavor::OpenAi).with_latency(latency)).await.unwrap();
    let backend: Arc<dyn LlmBackend> =
        Arc::new(OpenAiBackend::new(stub.base_url(), "stub", None, HttpOptions::default()).unwrap());
    // (a) Direct.
    let direct = {
        let backend = backend.clone();
        let request = ChatRequest::new(vec![ChatMessage::user(PROMPT)]);
        let call = move |_| {
            let backend = backend.clone();
            let request = request.clone();
            async move {
                backend.complete(&request).await.unwrap();
            }
        };
        measure(requests / 10, concurrency, call.clone()).await; // warm-up
        measure(requests, concurrency, call).await
    };
    // (b) Through LDP over HTTP, one session per worker.
    let delegate = LlmDelegate::new(backend).with_streaming(false);
    let card = delegate.card(DelegateId::new("ldp:delegate:bench").unwrap(), 8192);
    let mut cfg = ResponderConfig::new(card);
    cfg.limits.max_sessions_per_principal = 1000;
    // The direct path sends one user message per request. With the session context on (RFC 5.3), each LDP request
    // would also carry the session's earlier turns (up to 32), a different and growing request for the stub to read:
    // the same requests on both paths means no context here.
    cfg.limits.context_turns = 0;
    let responder = Responder::new(cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let runtime = DelegateRuntime::new(responder, Arc::new(delegate));
    let server =
        ldp_transport_http::spawn("127.0.0.1:0", HttpState::new(runtime, HttpServerConfig::default())).await.unwrap();
    let mut clients = Vec::new();
    for _ in 0..concurrency {
        let mut icfg = InitiatorConfig::new("ldp:delegate:bench-client");
        icfg.trust_domain = Some("default".into());
        let transport = HttpTransport::new(server.url()).unwrap();
        let client =
            Client::connect(transport, icfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy())).await.unwrap();
        let session = client.propose(SessionConfig::default()).await.unwrap();
        clients.push((Arc::new(client), session.session_id));
    }
    let clients = Arc::new(clients);
    let call = move |w: usize| {
        let (client, sid) = clients[w].clone();
        async move {
            client.submit(&sid, "chat", PROMPT, None).await.unwrap();
        }
    };
    measure(requests / 10, concurrency, call.clone()).await;
    let ldp = measure(requests, concurrency, call).await;
    let added = ldp.p50.as_secs_f64() * 1e3 - direct.p50.as_secs_f64() * 1e3;
    println!(
        "| {:>5} ms | {:>2} | {:>8.3} | {:>8.3} | {:>6.3} | {:>8.3} | {:>8.3} | {:>9.0} | {:>9.0} | {:>5.2}x |",
        latency.as_millis(),
        concurrency,
        direct.p50.as_secs_f64() * 1e3,
        ldp.p50.as_secs_f64() * 1e3,
        added,
        direct.p99.as_secs_f64() * 1e3,
        ldp.p99.as_secs_f64() * 1e3,
        direct.per_sec,
        ldp.per_sec,
        ldp.per_sec / direct.per_sec
    );
    server.shutdown().await.unwrap();
}

fn main() {
    let requests: usize = std::env::var("OVERHEAD_REQUESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(1600);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    println!("requests per run: {requests} (after {} of warm-up)", requests / 10);
    println!(
        "| stub latency | conc. | direct p50 ms | LDP p50 ms | added p50 ms | direct p99 ms | LDP p99 ms | direct req/s | LDP req/s | LDP/direct |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    rt.block_on(async {
        for latency in [Duration::ZERO, Duration::from_millis(20)] {
            for concurrency in [1, 16] {
                // One worker waiting on a slow stub needs fewer requests for the same precision (and time); 16
                // workers answered in bursts of 16 need the full count for a stable median.
                let n = if latency.is_zero() || concurrency > 1 { requests } else { requests / 4 };
                compare(latency, concurrency, n).await;
            }
        }
    });
}
