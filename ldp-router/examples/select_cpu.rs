//! Run with: `perf stat -e task-clock cargo run --release -p ldp-router --example select_cpu`
//!
//! Times balanced selection among 10,000 delegates by CPU time rather than wall time, for a machine shared with
//! other work: divide the task-clock of the `select` phase (printed) by the iteration count.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Instant;

use ldp_router::{
    Candidate, ClaimType, Observation, Quality, QualityClaim, Router, RouterConfig, SelectionRequest, SkillOffer,
    Strategy, VerificationSource,
};
use time::macros::datetime;

fn main() {
    let now = datetime!(2026-03-15 12:00 UTC);
    let mut router = Router::new(RouterConfig::default()).unwrap();
    for i in 0..10_000_usize {
        let id = format!("ldp:delegate:bench-{i:05}");
        let quality = Quality::new(0.4 + 0.5 * ((i * 7919) % 10_000) as f64 / 10_000.0).unwrap();
        let mut candidate = Candidate::new(id.clone(), "research.internal")
            .offering(SkillOffer::new("reasoning", 0.001 * (1 + i % 50) as f64, 200 + (i % 40) as u64 * 100))
            .with_claim(QualityClaim::self_claimed("reasoning", quality));
        if i % 3 == 1 {
            let at = now - time::Duration::days((i % 60) as i64);
            candidate = candidate.with_claim(
                QualityClaim::attested(ClaimType::IssuerAttested, "reasoning", quality, "ldp:issuer:evals", at)
                    .expiring_at(at + time::Duration::days(45)),
            );
        }
        router.upsert(&candidate).unwrap();
        if i % 3 == 2 {
            let outcome = Observation {
                delegate_id: id,
                skill: "reasoning".into(),
                score: quality,
                source: VerificationSource::Caller,
            };
            router.record_outcome(&outcome, now).unwrap();
        }
    }
    let request = SelectionRequest::new("reasoning").strategy(Strategy::Balanced);
    let iterations = 20_000;
    let cpu_before = cpu_seconds();
    let wall = Instant::now();
    for _ in 0..iterations {
        std::hint::black_box(router.select(&request, now).unwrap());
    }
    let cpu = cpu_seconds() - cpu_before;
    println!(
        "{iterations} balanced selections among 10,000 delegates: {:.1} us CPU, {:.1} us wall per selection",
        cpu * 1e6 / iterations as f64,
        wall.elapsed().as_secs_f64() * 1e6 / iterations as f64
    );
}

/// User plus system CPU time of this process, from /proc (Linux); 0 elsewhere.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0.0 };
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th of them.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11..13).map_or(0.0, |f| f.iter().filter_map(|v| v.parse::<f64>().ok()).sum());
    ticks / 100.0
}
