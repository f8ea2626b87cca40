//! The runtime-observed learner: inflation loses traffic, honesty earns it, and everything is reproducible.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp_router::{
    Candidate, ClaimType, LearnerConfig, Observation, Quality, QualityClaim, Router, RouterConfig, SelectionRequest,
    SkillOffer, Strategy, VerificationSource, Verifier,
};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use time::OffsetDateTime;
use time::macros::datetime;

const START: OffsetDateTime = datetime!(2026-03-15 12:00 UTC);

fn router(seed: u64) -> Router {
    Router::new(RouterConfig { learner: LearnerConfig { seed, ..LearnerConfig::default() }, ..RouterConfig::default() })
        .unwrap()
}

fn self_claiming(id: &str, claim: f64) -> Candidate {
    Candidate::new(id, "research.internal")
        .offering(SkillOffer::new("reasoning", 0.01, 500))
        .with_claim(QualityClaim::self_claimed("reasoning", Quality::new(claim).unwrap()))
}

/// Routes `tasks` tasks, scoring each output as `truth(delegate) + N(0, 0.05)`; returns the chosen ids.
fn run(router: &mut Router, truth: &dyn Fn(&str) -> f64, tasks: usize, seed: u64) -> Vec<String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let noise = Normal::new(0.0, 0.05).unwrap();
    let request = SelectionRequest::new("reasoning").strategy(Strategy::Quality);
    // The verification hook: here the caller's own scorer, a closure.
    let mut verifier = |output: &f64| Some(Quality::saturating(*output));
    (0..tasks)
        .map(|i| {
            let now = START + time::Duration::seconds(i as i64);
            let chosen = router.select(&request, now).unwrap().delegate_id;
            let output = truth(&chosen) + noise.sample(&mut rng);
            let score = verifier.verify(&output).unwrap();
            let outcome = Observation {
                delegate_id: chosen.clone(),
                skill: "reasoning".into(),
                score,
                source: VerificationSource::Caller,
            };
            router.record_outcome(&outcome, now).unwrap();
            chosen
        })
        .collect()
}

fn share(chosen: &[String], id: &str) -> f64 {
    chosen.iter().filter(|c| *c == id).count() as f64 / chosen.len() as f64
}

#[test]
fn an_inflating_delegate_loses_traffic_once_outcomes_arrive() {
    for seed in 0..5 {
        let mut router = router(seed);
        router.upsert(&self_claiming("inflator", 0.99)).unwrap();
        router.upsert(&self_claiming("honest", 0.80)).unwrap();
        router.upsert(&self_claiming("weak", 0.60)).unwrap();
        let truth = |id: &str| match id {
            "inflator" => 0.50,
            "honest" => 0.80,
            _ => 0.60,
        };
        let chosen = run(&mut router, &truth, 200, seed);
        // Its claim is the highest, so it is tried first...
        assert_eq!(chosen[0], "inflator", "seed {seed}");
        // ...and then starved.
        assert!(share(&chosen[100..], "inflator") < 0.05, "seed {seed}: {}", share(&chosen[100..], "inflator"));
        assert!(share(&chosen[100..], "honest") > 0.85, "seed {seed}");
        let observed = router.observed("inflator", "reasoning").unwrap();
        assert!((observed.mean - 0.5).abs() < 0.1);
        let assessment = router.assess("inflator", "reasoning", START).unwrap();
        assert!(assessment.self_claim_ignored);
        assert_eq!(assessment.basis, Some(ClaimType::RuntimeObserved));
    }
}

#[test]
fn a_new_honest_delegate_earns_traffic() {
    for seed in 0..5 {
        let mut router = router(seed);
        router.upsert(&self_claiming("incumbent", 0.75)).unwrap();
        let truth = |id: &str| if id == "incumbent" { 0.70 } else { 0.90 };
        run(&mut router, &truth, 100, seed);
        assert!(router.observed("incumbent", "reasoning").unwrap().count == 100);
        // A newcomer with no claims at all: only exploration can find it.
        router
            .upsert(&Candidate::new("newcomer", "research.internal").offering(SkillOffer::new("reasoning", 0.01, 500)))
            .unwrap();
        let chosen = run(&mut router, &truth, 400, seed + 100);
        assert!(share(&chosen[300..], "newcomer") > 0.8, "seed {seed}: {}", share(&chosen[300..], "newcomer"));
    }
}

#[test]
fn recency_weighting_follows_a_delegate_that_degrades() {
    let mut router = router(7);
    router.upsert(&self_claiming("drifter", 0.9)).unwrap();
    let record = |router: &mut Router, score: f64| {
        let outcome = Observation {
            delegate_id: "drifter".into(),
            skill: "reasoning".into(),
            score: Quality::new(score).unwrap(),
            source: VerificationSource::Judge("ldp:delegate:judge".into()),
        };
        router.record_outcome(&outcome, START).unwrap()
    };
    for _ in 0..200 {
        record(&mut router, 0.9);
    }
    for _ in 0..100 {
        record(&mut router, 0.3);
    }
    let observed = router.observed("drifter", "reasoning").unwrap();
    // A plain average would say 0.7; recency weighting has mostly forgotten the good days.
    assert!(observed.mean < 0.45, "{observed:?}");
    assert!(observed.weight < 60.0 && observed.count == 300);
    assert_eq!(observed.last_at, Some(START));
}

#[test]
fn the_same_seed_gives_the_same_decisions() {
    let truth = |id: &str| if id == "a" { 0.7 } else { 0.72 };
    let decisions = |seed: u64| {
        let mut router = router(seed);
        router.upsert(&self_claiming("a", 0.7)).unwrap();
        router.upsert(&self_claiming("b", 0.72)).unwrap();
        run(&mut router, &truth, 60, 1)
    };
    assert_eq!(decisions(3), decisions(3));
    assert_ne!(decisions(3), decisions(4));
}

#[test]
fn outcomes_for_unknown_delegates_are_rejected() {
    let mut router = router(0);
    router.upsert(&self_claiming("a", 0.7)).unwrap();
    let outcome = |id: &str, skill: &str| Observation {
        delegate_id: id.into(),
        skill: skill.into(),
        score: Quality::MAX,
        source: VerificationSource::Validator("schema".into()),
    };
    assert!(router.record_outcome(&outcome("ghost", "reasoning"), START).is_err());
    assert!(router.record_outcome(&outcome("a", "poetry"), START).is_err());
    assert!(router.record_outcome(&outcome("a", "reasoning"), START).is_ok());
}

#[test]
fn observations_survive_re_registration() {
    let mut router = router(0);
    router.upsert(&self_claiming("a", 0.99)).unwrap();
    let outcome = Observation {
        delegate_id: "a".into(),
        skill: "reasoning".into(),
        score: Quality::MIN,
        source: VerificationSource::Caller,
    };
    router.record_outcome(&outcome, START).unwrap();
    // A refreshed identity card repeating the boast does not wipe the evidence.
    router.upsert(&self_claiming("a", 0.99)).unwrap();
    let assessment = router.assess("a", "reasoning", START).unwrap();
    assert_eq!(assessment.basis, Some(ClaimType::RuntimeObserved));
    assert!(assessment.mean < 0.01);
}

/// The default pool-wide rule: once any candidate rests on an attestation, a self-claim-only candidate is judged
/// by the prior, so a forger's inflated self-claim cannot outrank attested quality, even before any outcome.
#[test]
fn an_inflated_self_claim_never_outranks_attested_quality() {
    use ldp_router::{ClaimPolicy, Exploration, SelfClaimedRule};
    let attested = Candidate::new("attested", "research.internal")
        .offering(SkillOffer::new("reasoning", 0.01, 500))
        .with_claim(QualityClaim::attested(
            ClaimType::IssuerAttested,
            "reasoning",
            Quality::new(0.90).unwrap(),
            "ldp:delegate:evaluator",
            START,
        ));
    let pick = |rule: SelfClaimedRule| {
        let config = RouterConfig {
            policy: ClaimPolicy { self_claimed: rule, ..ClaimPolicy::default() },
            learner: LearnerConfig { exploration: Exploration::Greedy, ..LearnerConfig::default() },
        };
        let mut router = Router::new(config).unwrap();
        router.upsert(&self_claiming("forger", 0.99)).unwrap();
        router.upsert(&attested).unwrap();
        let decision = router.select(&SelectionRequest::new("reasoning").strategy(Strategy::Quality), START).unwrap();
        let forger = decision.explanation.ranking.iter().find(|c| c.delegate_id == "forger").map(|c| c.assessment);
        (decision.delegate_id, forger)
    };
    let (chosen, forger) = pick(SelfClaimedRule::default());
    assert_eq!(chosen, "attested");
    let forger = forger.expect("the forger is in the explanation");
    assert!(forger.self_claim_ignored && forger.basis.is_none(), "{forger:?}");
    // The per-delegate rule alone lets the forger win the first task.
    assert_eq!(pick(SelfClaimedRule::IgnoreWhenBetterExists).0, "forger");
}
