//! `scripts/store-bench` (`ldp-soak --bench-stores ...`): TASK_SUBMIT -> TASK_RESULT throughput and latency of a
//! real `ldp serve` over HTTP with each state store (issue 17), side by side in one run.
//!
//! Each round starts one server per store in turn (`--store memory`, `sqlite:` in both durability modes, a
//! throwaway `redis-server` on loopback TCP, or on its Unix socket), opens one session per client, lets the clients
//! submit tasks back to back over keep-alive connections for a warm-up and then for the measured seconds, and stops
//! the server. Rounds alternate the stores, so that a slow phase of the machine falls on every store alike; a store's
//! ratio to the memory store is taken within each round, and the table shows the median over the rounds.
//!
//! With several client counts (`--bench-clients 32,128`) the whole plan runs at each count in turn, and a last table
//! sets each store's best median against the memory store's best: a store that answers through a round trip needs
//! more requests in flight to keep the machine busy, so its saturation throughput can lie at another count than the
//! memory store's.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{Server, SoakError, envelope, percentile_ms, propose_body, random_id};

/// The stores `--bench-stores` knows, as `ldp serve` flags (a `{dir}` is replaced by a fresh directory per server,
/// `{redis}` by the throwaway Redis's URL, `{redis-unix}` by the URL of one listening on a Unix socket only).
const STORES: [(&str, &[&str]); 5] = [
    ("memory", &["--store", "memory"]),
    ("sqlite", &["--store", "sqlite:{dir}/state.db", "--sqlite-durability", "process"]),
    ("sqlite-full", &["--store", "sqlite:{dir}/state.db", "--sqlite-durability", "full"]),
    ("redis", &["--store", "{redis}"]),
    ("redis-unix", &["--store", "{redis-unix}"]),
];

/// What the bench measures.
pub(crate) struct BenchPlan<'a> {
    /// The `ldp` binary.
    pub ldp: &'a Path,
    /// Store names, in the order each round runs them.
    pub stores: Vec<String>,
    /// Concurrent clients (one session and one keep-alive connection each); the plan runs at each count in turn.
    pub clients: Vec<usize>,
    /// Rounds over all the stores.
    pub rounds: usize,
    /// Measured seconds per store and round (after a one-second warm-up).
    pub seconds: u64,
    /// Extra `ldp serve` flags for every server.
    pub extra: Vec<String>,
}

/// One store's figures in one round.
struct Sample {
    tasks_per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    failed: u64,
    peak_rss_mib: f64,
}

/// Checks the store names before anything starts.
pub(crate) fn check_stores(stores: &[String]) -> Result<(), String> {
    match stores.iter().find(|s| !STORES.iter().any(|(name, _)| name == s)) {
        Some(bad) => Err(format!(
            "unknown store {bad:?}; known: {}",
            STORES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
        )),
        None => Ok(()),
    }
}

/// Runs the plan and prints the table.
pub(crate) async fn run(plan: BenchPlan<'_>) -> Result<(), SoakError> {
    let start = |wanted: &str, options: ldp_store::test_redis::RedisServerOptions| {
        let needed = plan.stores.iter().any(|s| s == wanted);
        let started = needed.then(|| ldp_store::test_redis::RedisServer::start_with(options)).transpose();
        started.map_err(|e| SoakError::Setup(e.to_string()))
    };
    let redis = Redises {
        tcp: start("redis", Default::default())?,
        unix: start("redis-unix", ldp_store::test_redis::RedisServerOptions::default().unix_socket())?,
    };
    let scratch = std::env::temp_dir().join(format!("ldp-store-bench-{}", std::process::id()));
    let counts: Vec<String> = plan.clients.iter().map(ToString::to_string).collect();
    println!(
        "store bench: {} over HTTP on loopback, {} clients (a session and a connection each), echo delegate, {} round(s) \
         of {} s per store after 1 s of warm-up",
        plan.ldp.display(),
        counts.join(", "),
        plan.rounds,
        plan.seconds
    );
    let mut tables = Vec::with_capacity(plan.clients.len());
    let ran = async {
        for &clients in &plan.clients {
            let samples = run_at(&plan, clients, &scratch, &redis).await?;
            print_table(&plan, clients, &samples);
            tables.push((clients, samples));
        }
        Ok::<_, SoakError>(())
    }
    .await;
    let _ = std::fs::remove_dir_all(&scratch);
    ran?;
    if tables.len() > 1 {
        print_peaks(&plan, &tables);
    }
    Ok(())
}

/// The throwaway Redis servers of a run, each started only when a store of the plan needs it.
struct Redises {
    /// On a loopback TCP port (`redis`).
    tcp: Option<ldp_store::test_redis::RedisServer>,
    /// On a Unix socket (`redis-unix`).
    unix: Option<ldp_store::test_redis::RedisServer>,
}

/// Every round of the plan at one client count; each store's samples, in the plan's order.
async fn run_at(
    plan: &BenchPlan<'_>,
    clients: usize,
    scratch: &Path,
    redis: &Redises,
) -> Result<Vec<Vec<Sample>>, SoakError> {
    let mut samples: Vec<Vec<Sample>> = plan.stores.iter().map(|_| Vec::new()).collect();
    for round in 0..plan.rounds {
        for (i, store) in plan.stores.iter().enumerate() {
            let dir = scratch.join(format!("{store}-{clients}-{round}"));
            std::fs::create_dir_all(&dir).map_err(|e| SoakError::Setup(format!("{}: {e}", dir.display())))?;
            let flags = server_flags(store, &dir, redis, round, &plan.extra);
            let sample = measure(plan, clients, &flags).await;
            let _ = std::fs::remove_dir_all(&dir);
            let sample = sample?;
            println!(
                "round {}: {store}: {:.0} tasks/s, p50 {:.2} ms, p99 {:.2} ms, {} failed, peak RSS {:.0} MiB \
                 ({clients} clients)",
                round + 1,
                sample.tasks_per_sec,
                sample.p50_ms,
                sample.p99_ms,
                sample.failed,
                sample.peak_rss_mib
            );
            samples[i].push(sample);
        }
    }
    Ok(samples)
}

/// `store`'s `ldp serve` flags for one round: in a fresh directory, or on the round's database of a Redis server
/// (each round gets a database of its own, so no round reads another's keys).
fn server_flags(store: &str, dir: &Path, redis: &Redises, round: usize, extra: &[String]) -> Vec<String> {
    let db = round % 16;
    let tcp = redis.tcp.as_ref().map(|r| format!("{}/{db}", r.url().trim_end_matches('/'))).unwrap_or_default();
    let unix = redis.unix.as_ref().map(|r| format!("{}?db={db}", r.url())).unwrap_or_default();
    let template = STORES.iter().find(|(name, _)| *name == store).map_or(&[][..], |(_, flags)| *flags);
    let mut flags: Vec<String> = template
        .iter()
        .map(|f| f.replace("{dir}", &dir.display().to_string()).replace("{redis}", &tcp).replace("{redis-unix}", &unix))
        .collect();
    // Every client connects from this one address, which is one source to the per-source session cap (issue 58).
    flags.extend(["--max-sessions-per-peer".to_owned(), "100000".to_owned()]);
    flags.extend(extra.iter().cloned());
    flags
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn print_table(plan: &BenchPlan<'_>, clients: usize, samples: &[Vec<Sample>]) {
    let memory = plan.stores.iter().position(|s| s == "memory");
    println!();
    println!("{clients} clients:");
    println!();
    println!(
        "| store | tasks/s per round | median tasks/s | vs memory (median of rounds) | p50 ms | p99 ms | failed | peak RSS MiB |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (store, rows) in plan.stores.iter().zip(samples) {
        let per_round: Vec<String> = rows.iter().map(|s| format!("{:.0}", s.tasks_per_sec)).collect();
        let vs_memory = memory.map_or_else(String::new, |m| {
            let ratios: Vec<f64> =
                rows.iter().zip(&samples[m]).map(|(s, base)| s.tasks_per_sec / base.tasks_per_sec).collect();
            format!("{:.2}x", median(ratios))
        });
        println!(
            "| {store} | {} | {:.0} | {vs_memory} | {:.2} | {:.2} | {} | {:.0} |",
            per_round.join(" / "),
            median(rows.iter().map(|s| s.tasks_per_sec).collect()),
            median(rows.iter().map(|s| s.p50_ms).collect()),
            median(rows.iter().map(|s| s.p99_ms).collect()),
            rows.iter().map(|s| s.failed).sum::<u64>(),
            rows.iter().map(|s| s.peak_rss_mib).fold(0.0, f64::max),
        );
    }
}

/// The `i`th store's highest median tasks/s over the client counts' tables, and that count.
fn peak(tables: &[(usize, Vec<Vec<Sample>>)], i: usize) -> Option<(f64, usize)> {
    tables
        .iter()
        .filter_map(|(clients, samples)| {
            let rounds = samples.get(i).filter(|rounds| !rounds.is_empty())?;
            Some((median(rounds.iter().map(|s| s.tasks_per_sec).collect()), *clients))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// Each store's best median tasks/s over the client counts, against the memory store's best.
fn print_peaks(plan: &BenchPlan<'_>, tables: &[(usize, Vec<Vec<Sample>>)]) {
    let peak = |i: usize| peak(tables, i);
    let memory = plan.stores.iter().position(|s| s == "memory").and_then(peak);
    println!();
    println!("Saturation (each store at its best client count):");
    println!();
    println!("| store | best median tasks/s | at clients | vs memory's best |");
    println!("| --- | ---: | ---: | ---: |");
    for (i, store) in plan.stores.iter().enumerate() {
        let Some((best, clients)) = peak(i) else { continue };
        let vs = memory.map_or_else(String::new, |(m, _)| format!("{:.2}x", best / m));
        println!("| {store} | {best:.0} | {clients} | {vs} |");
    }
}

/// Starts a server with `flags`, runs `count` clients against it, stops it.
async fn measure(plan: &BenchPlan<'_>, count: usize, flags: &[String]) -> Result<Sample, SoakError> {
    let server = Server::start(&plan.ldp.to_path_buf(), flags, None).await?;
    let mut clients = Vec::with_capacity(count);
    for i in 0..count {
        clients.push(Client::open(&server.url, i).await?);
    }
    let measuring = Arc::new(AtomicBool::new(false));
    let warm_up_end = Instant::now() + Duration::from_secs(1);
    let deadline = warm_up_end + Duration::from_secs(plan.seconds);
    let runs: Vec<_> = clients
        .into_iter()
        .map(|client| {
            let measuring = measuring.clone();
            tokio::spawn(async move { client.run(&measuring, deadline).await })
        })
        .collect();
    tokio::time::sleep_until(warm_up_end.into()).await;
    measuring.store(true, Ordering::Release);
    let started = Instant::now();
    let (mut latencies, mut failed) = (Vec::new(), 0);
    for run in runs {
        let (l, f) = run.await.map_err(|e| SoakError::Setup(format!("a client stopped: {e}")))?;
        latencies.extend(l);
        failed += f;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let peak_rss_mib = server.peak_rss_mib();
    server.stop().await;
    Ok(Sample {
        tasks_per_sec: latencies.len() as f64 / elapsed,
        p50_ms: percentile_ms(&latencies, 0.5),
        p99_ms: percentile_ms(&latencies, 0.99),
        failed,
        peak_rss_mib,
    })
}

/// One client: a session of its own, tasks back to back on one keep-alive connection.
struct Client {
    http: reqwest::Client,
    url: String,
    from: String,
    session_id: String,
}

impl Client {
    async fn open(url: &str, index: usize) -> Result<Self, SoakError> {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| SoakError::Setup(e.to_string()))?;
        let from = format!("ldp:delegate:bench-client-{index}");
        let mut client = Self { http, url: format!("{url}/ldp/messages"), from, session_id: String::new() };
        let (status, reply) = client.post(&envelope("", &client.from, propose_body(), None)).await;
        match (status, reply["body"]["session_id"].as_str()) {
            (200, Some(id)) => client.session_id = id.to_owned(),
            _ => return Err(SoakError::Setup(format!("proposal answered {status}: {reply}"))),
        }
        Ok(client)
    }

    async fn post(&self, env: &Value) -> (u16, Value) {
        match self.http.post(&self.url).json(env).send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let body = resp.bytes().await.unwrap_or_default();
                (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
            }
            Err(e) => (0, json!(e.to_string())),
        }
    }

    /// Submits tasks until `deadline`; returns the latencies of the tasks answered with a result while `measuring`
    /// was set, and how many got anything else.
    async fn run(self, measuring: &AtomicBool, deadline: Instant) -> (Vec<Duration>, u64) {
        let (mut latencies, mut failed) = (Vec::new(), 0);
        while Instant::now() < deadline {
            let body = json!({"type": "TASK_SUBMIT", "task_id": random_id(), "skill": "echo", "input": "ping"});
            let env = envelope(&self.session_id, &self.from, body, None);
            let start = Instant::now();
            let (status, reply) = self.post(&env).await;
            if !measuring.load(Ordering::Acquire) {
                continue;
            }
            if status == 200 && reply["body"]["type"] == "TASK_RESULT" {
                latencies.push(start.elapsed());
            } else {
                failed += 1;
                if failed <= 3 {
                    eprintln!("store bench: {status}: {reply}");
                }
            }
        }
        (latencies, failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(tasks_per_sec: f64) -> Sample {
        Sample { tasks_per_sec, p50_ms: 1.0, p99_ms: 2.0, failed: 0, peak_rss_mib: 40.0 }
    }

    #[test]
    fn each_store_peaks_at_the_count_of_its_own_highest_median() {
        // Two stores, two client counts, three rounds each: the first store is best at 32, the second at 128, and
        // an outlier round does not move a median.
        let tables = vec![
            (32, vec![vec![sample(10.0), sample(12.0), sample(99.0)], vec![sample(3.0), sample(4.0), sample(5.0)]]),
            (128, vec![vec![sample(9.0), sample(11.0), sample(11.5)], vec![sample(6.0), sample(7.0), sample(1.0)]]),
        ];
        assert_eq!(peak(&tables, 0), Some((12.0, 32)));
        assert_eq!(peak(&tables, 1), Some((6.0, 128)));
        assert_eq!(peak(&tables, 2), None);
    }
}
