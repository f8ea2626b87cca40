//! Selection latency among 10,000 registered delegates.
//!
//! Run with: `cargo bench -p ldp-router --bench select`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use ldp_router::{
    Candidate, ClaimType, Exploration, LearnerConfig, Observation, Quality, QualityClaim, Router, RouterConfig,
    SelectionRequest, SkillOffer, Strategy, VerificationSource,
};
use time::macros::datetime;

const POOL: usize = 10_000;

/// A pool with a realistic mix: every delegate self-claims, a third also carry an issuer attestation (some
/// expiring), a third have runtime observations, and they spread over two trust domains and three jurisdictions.
fn pool(config: RouterConfig) -> Router {
    let now = datetime!(2026-03-15 12:00 UTC);
    let mut router = Router::new(config).unwrap();
    for i in 0..POOL {
        let id = format!("ldp:delegate:bench-{i:05}");
        let quality = Quality::new(0.4 + 0.5 * ((i * 7919) % POOL) as f64 / POOL as f64).unwrap();
        let mut candidate =
            Candidate::new(id.clone(), if i % 10 == 0 { "partner.external" } else { "research.internal" })
                .in_jurisdiction(["us-east", "eu-west", "ap-south"][i % 3])
                .offering(SkillOffer::new("reasoning", 0.001 * (1 + i % 50) as f64, 200 + (i % 40) as u64 * 100))
                .offering(SkillOffer::new("summarization", 0.002, 500))
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
            for _ in 0..5 {
                let outcome = Observation {
                    delegate_id: id.clone(),
                    skill: "reasoning".into(),
                    score: quality,
                    source: VerificationSource::Caller,
                };
                router.record_outcome(&outcome, now).unwrap();
            }
        }
    }
    router
}

fn bench_select(c: &mut Criterion) {
    let now = datetime!(2026-03-15 12:00 UTC);
    let mut router = pool(RouterConfig::default());
    let mut greedy = pool(RouterConfig {
        learner: LearnerConfig { exploration: Exploration::Greedy, ..LearnerConfig::default() },
        ..RouterConfig::default()
    });
    let balanced = SelectionRequest::new("reasoning").strategy(Strategy::Balanced);
    let filtered = SelectionRequest::new("reasoning")
        .strategy(Strategy::Balanced)
        .trust_domain("research.internal")
        .jurisdiction("eu-west")
        .jurisdiction("us-east")
        .max_cost_usd(0.04);
    let mut group = c.benchmark_group("select_10k");
    group.bench_function("balanced", |b| b.iter(|| router.select(&balanced, now).unwrap()));
    group.bench_function("balanced_greedy", |b| b.iter(|| greedy.select(&balanced, now).unwrap()));
    group.bench_function("balanced_filtered", |b| b.iter(|| router.select(&filtered, now).unwrap()));
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50).warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(4));
    targets = bench_select
}
criterion_main!(benches);
