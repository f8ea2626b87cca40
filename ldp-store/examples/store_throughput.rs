//! TASK_SUBMIT -> TASK_RESULT throughput and latency of one `DelegateRuntime` (echo delegate, in process, no
//! transport) without a store and with each backend (SQLite in both durability modes), side by side in one run; and
//! the Redis memory an idle session costs. Figures for `BENCHMARKS.md`:
//!
//! ```sh
//! cargo run --release -p ldp-store --example store_throughput [-- TASKS_PER_WORKER WORKERS]
//! ```
//!
//! `LDP_BENCH_STORES=memory,sqlite` runs only those rows (by name prefix).
//!
//! Redis is a throwaway `redis-server` (installed by `scripts/redis-server.sh` when missing).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use ldp_session::runtime::{DelegateRuntime, EchoDelegate, Response};
use ldp_session::store::{Store, StoreOptions};
use ldp_session::{
    Initiator, InitiatorConfig, InitiatorEvent, PeerContext, Responder, ResponderConfig, SeededIds, SystemClock,
};
use ldp_store::{Durability, MemoryStore, RedisStore, SqliteStore, StoreConfig};
use ldp_types::{Body, Capability, DelegateId, IdentityCard, SessionConfig};

const DELEGATE: &str = "ldp:delegate:bench";

fn runtime(store: Option<Arc<dyn Store>>) -> DelegateRuntime {
    let mut card = IdentityCard::new(DelegateId::new(DELEGATE).unwrap(), "Bench", "none", "1");
    card.capabilities.push(Capability::new("echo"));
    let mut cfg = ResponderConfig::new(card);
    cfg.limits.max_concurrent_tasks = 1024;
    cfg.limits.max_sessions = 100_000;
    cfg.limits.max_sessions_per_principal = 100_000;
    let responder = Responder::new(cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let rt = DelegateRuntime::new(responder, Arc::new(EchoDelegate));
    if let Some(store) = store {
        rt.attach_store(store, StoreOptions::default()).unwrap();
    }
    rt
}

async fn exchange(rt: &DelegateRuntime, env: &ldp_types::Envelope) -> ldp_types::Envelope {
    match rt.handle(&PeerContext::default(), &env.to_vec().unwrap(), None).await {
        Response::Reply(env) => *env,
        other => panic!("{other:?}"),
    }
}

/// Runs `workers` clients with a session each, `tasks` tasks each; returns (tasks per second, p50, p99).
async fn measure(rt: DelegateRuntime, workers: usize, tasks: usize) -> (f64, Duration, Duration) {
    let started = Instant::now();
    let mut joins = Vec::new();
    for _ in 0..workers {
        let rt = rt.clone();
        joins.push(tokio::spawn(async move {
            let mut init = Initiator::new(
                InitiatorConfig::new("ldp:delegate:client"),
                DELEGATE,
                Arc::new(SystemClock),
                Box::new(SeededIds::from_entropy()),
            );
            let accept = exchange(&rt, &init.propose(SessionConfig::default())).await;
            init.handle_envelope(accept, None).unwrap();
            let Some(InitiatorEvent::SessionEstablished { session_id, .. }) = init.poll_event() else { panic!() };
            let mut latencies = Vec::with_capacity(tasks);
            for i in 0..tasks {
                let env = init.submit(&session_id, "echo", serde_json::json!({"i": i}), None, None).unwrap();
                let t = Instant::now();
                let answer = exchange(&rt, &env).await;
                latencies.push(t.elapsed());
                assert!(matches!(answer.body, Body::TaskResult(_)), "{answer:?}");
                init.handle_envelope(answer, None).unwrap();
                while init.poll_event().is_some() {}
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for j in joins {
        all.extend(j.await.unwrap());
    }
    let elapsed = started.elapsed();
    all.sort();
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    (all.len() as f64 / elapsed.as_secs_f64(), at(0.5), at(0.99))
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let tasks: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let workers: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8);
    let dir = std::env::temp_dir().join(format!("ldp-store-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let redis = ldp_store::test_redis::RedisServer::start().unwrap();
    let cfg = StoreConfig::new(DELEGATE);
    let mut full = cfg.clone();
    full.sqlite_durability = Durability::Full;
    let backends: Vec<(&str, Option<Arc<dyn Store>>)> = vec![
        ("none (machine only)", None),
        ("memory", Some(Arc::new(MemoryStore::new(cfg.clone())))),
        ("sqlite (process)", Some(Arc::new(SqliteStore::open(&dir.join("process.db"), cfg.clone()).unwrap()))),
        ("sqlite (full)", Some(Arc::new(SqliteStore::open(&dir.join("full.db"), full).unwrap()))),
        ("redis", Some(Arc::new(RedisStore::open(&redis.url(), cfg.clone()).await.unwrap()))),
    ];
    // `LDP_BENCH_STORES=memory,sqlite` runs only the rows whose names start with one of these.
    let only: Option<Vec<String>> =
        std::env::var("LDP_BENCH_STORES").ok().map(|v| v.split(',').map(str::to_owned).collect());
    let backends: Vec<_> = backends
        .into_iter()
        .filter(|(name, _)| only.as_ref().is_none_or(|o| o.iter().any(|p| name.starts_with(p.as_str()))))
        .collect();
    println!("{workers} clients x {tasks} tasks each, echo delegate, in process");
    println!("| store | tasks/s | vs none | vs memory | p50 | p99 |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let (mut base, mut memory) = (None, None);
    for (name, store) in backends {
        let is_memory = name == "memory";
        let (rate, p50, p99) = measure(runtime(store), workers, tasks).await;
        let base = *base.get_or_insert(rate);
        if is_memory {
            memory = Some(rate);
        }
        let vs_memory = memory.map(|m| format!("{:.2}x", rate / m)).unwrap_or_default();
        println!("| {name} | {rate:.0} | {:.2}x | {vs_memory} | {p50:.2?} | {p99:.2?} |", rate / base);
    }

    // Memory per idle session in Redis: used_memory before and after establishing sessions.
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let used = |info: String| -> i64 {
        info.lines().find_map(|l| l.strip_prefix("used_memory:")).and_then(|v| v.trim().parse().ok()).unwrap()
    };
    let store: Arc<dyn Store> =
        Arc::new(RedisStore::open(&redis.url(), StoreConfig::new("ldp:delegate:idle")).await.unwrap());
    let rt = runtime(Some(store));
    let before = used(redis::cmd("INFO").arg("memory").query_async(&mut conn).await.unwrap());
    const SESSIONS: usize = 5000;
    let mut init = Initiator::new(
        InitiatorConfig::new("ldp:delegate:client"),
        DELEGATE,
        Arc::new(SystemClock),
        Box::new(SeededIds::from_entropy()),
    );
    for _ in 0..SESSIONS {
        let accept = exchange(&rt, &init.propose(SessionConfig::default())).await;
        assert!(matches!(accept.body, Body::SessionAccept(_)));
    }
    let after = used(redis::cmd("INFO").arg("memory").query_async(&mut conn).await.unwrap());
    // Each proposal also left its replay entry (unsigned dedupe, kept for the 5-minute window).
    println!(
        "Redis memory per idle session (its record plus its proposal's dedupe entry): {} bytes over {SESSIONS} sessions",
        (after - before) / SESSIONS as i64
    );
    let _ = std::fs::remove_dir_all(&dir);
}
