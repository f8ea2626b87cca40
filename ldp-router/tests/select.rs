//! Selection: strategies, filters, explanations and registration.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp_router::{
    Candidate, ClaimType, ExplainDepth, Exploration, LearnerConfig, Quality, QualityClaim, Router, RouterConfig,
    RouterError, SelectionRequest, SkillOffer, Strategy,
};
use time::OffsetDateTime;
use time::macros::datetime;

const NOW: OffsetDateTime = datetime!(2026-03-15 12:00 UTC);

fn greedy() -> Router {
    Router::new(RouterConfig {
        learner: LearnerConfig { exploration: Exploration::Greedy, ..LearnerConfig::default() },
        ..RouterConfig::default()
    })
    .unwrap()
}

fn attested(id: &str, skill: &str, quality: f64, cost: f64, latency: u64) -> Candidate {
    Candidate::new(format!("ldp:delegate:{id}"), "research.internal")
        .offering(SkillOffer::new(skill, cost, latency))
        .with_claim(QualityClaim::attested(
            ClaimType::IssuerAttested,
            skill,
            Quality::new(quality).unwrap(),
            "ldp:issuer:evals",
            NOW,
        ))
}

/// Three delegates with a clear winner for each single-objective strategy.
fn trio() -> Router {
    let mut router = greedy();
    router.upsert(&attested("best", "reasoning", 0.95, 0.05, 4000)).unwrap();
    router.upsert(&attested("cheap", "reasoning", 0.60, 0.001, 3000)).unwrap();
    router.upsert(&attested("fast", "reasoning", 0.70, 0.02, 200)).unwrap();
    router
}

fn pick(router: &mut Router, request: &SelectionRequest) -> String {
    router.select(request, NOW).unwrap().delegate_id
}

#[test]
fn each_strategy_optimises_its_objective() {
    let mut router = trio();
    let req = |s| SelectionRequest::new("reasoning").strategy(s);
    assert_eq!(pick(&mut router, &req(Strategy::Quality)), "ldp:delegate:best");
    assert_eq!(pick(&mut router, &req(Strategy::Cost)), "ldp:delegate:cheap");
    assert_eq!(pick(&mut router, &req(Strategy::Latency)), "ldp:delegate:fast");
    // Balanced: "fast" is good, cheap and quick; "best" is slow and expensive.
    assert_eq!(pick(&mut router, &req(Strategy::Balanced)), "ldp:delegate:fast");
}

#[test]
fn cost_and_latency_ties_are_broken_by_quality() {
    let mut router = greedy();
    router.upsert(&attested("worse", "reasoning", 0.5, 0.01, 100)).unwrap();
    router.upsert(&attested("better", "reasoning", 0.9, 0.01, 100)).unwrap();
    for strategy in [Strategy::Cost, Strategy::Latency] {
        let req = SelectionRequest::new("reasoning").strategy(strategy);
        assert_eq!(pick(&mut router, &req), "ldp:delegate:better");
    }
}

#[test]
fn budget_ceiling_trust_domain_jurisdiction_and_exclusion_filter() {
    let mut router = trio();
    router
        .upsert(
            &Candidate::new("ldp:delegate:eu", "partner.external")
                .in_jurisdiction("eu-west")
                .offering(SkillOffer::new("reasoning", 0.01, 1000))
                .with_claim(QualityClaim::attested(
                    ClaimType::IssuerAttested,
                    "reasoning",
                    Quality::new(0.99).unwrap(),
                    "ldp:issuer:evals",
                    NOW,
                )),
        )
        .unwrap();
    let quality = SelectionRequest::new("reasoning").strategy(Strategy::Quality);
    assert_eq!(pick(&mut router, &quality), "ldp:delegate:eu");
    assert_eq!(pick(&mut router, &quality.clone().trust_domain("research.internal")), "ldp:delegate:best");
    assert_eq!(pick(&mut router, &quality.clone().jurisdiction("eu-west")), "ldp:delegate:eu");
    assert_eq!(pick(&mut router, &quality.clone().max_cost_usd(0.005)), "ldp:delegate:cheap");
    let decision = router.select(&quality.clone().exclude("ldp:delegate:eu"), NOW).unwrap();
    assert_eq!(decision.delegate_id, "ldp:delegate:best");
    assert_eq!(decision.explanation.rejected.excluded, 1);

    let impossible = quality.clone().jurisdiction("ap-south").max_cost_usd(0.0001);
    match router.select(&impossible, NOW) {
        Err(RouterError::NoEligibleDelegate { rejected, .. }) => {
            assert_eq!(rejected.jurisdiction, 4);
            assert_eq!(rejected.total(), 4);
        }
        other => panic!("expected no eligible delegate, got {other:?}"),
    }
    let unknown_domain = quality.trust_domain("nobody.internal");
    assert!(matches!(router.select(&unknown_domain, NOW), Err(RouterError::NoEligibleDelegate { .. })));
}

#[test]
fn quality_floor_uses_the_estimate() {
    let mut router = trio();
    let req = SelectionRequest::new("reasoning").strategy(Strategy::Cost).min_quality(0.65);
    let decision = router.select(&req, NOW).unwrap();
    assert_eq!(decision.delegate_id, "ldp:delegate:fast");
    assert_eq!(decision.explanation.rejected.min_quality, 1);
}

#[test]
fn decisions_explain_candidates_scores_and_reasons() {
    let mut router = trio();
    let req = SelectionRequest::new("reasoning").strategy(Strategy::Quality).max_cost_usd(0.03);
    let decision = router.select(&req, NOW).unwrap();
    let e = &decision.explanation;
    assert_eq!((e.considered, e.eligible, e.rejected.budget), (3, 2, 1));
    let ids: Vec<_> = e.ranking.iter().map(|c| c.delegate_id.as_str()).collect();
    assert_eq!(ids, ["ldp:delegate:fast", "ldp:delegate:cheap"]);
    assert!(e.ranking.windows(2).all(|w| w[0].score >= w[1].score));
    assert_eq!(decision.chosen.assessment.basis, Some(ClaimType::IssuerAttested));
    let text = decision.to_string();
    assert!(text.contains("ldp:delegate:fast") && text.contains("issuer_attested") && text.contains("1 over budget"));

    let all = router.select(&req.clone().explain(ExplainDepth::All), NOW).unwrap();
    assert_eq!(all.explanation.ranking.len(), 2);
    let top1 = router.select(&req.explain(ExplainDepth::Top(1)), NOW).unwrap();
    assert_eq!(top1.explanation.ranking.len(), 1);
}

#[test]
fn explain_all_ranks_every_eligible_candidate_in_order() {
    let mut router = greedy();
    for i in 0..40 {
        router.upsert(&attested(&format!("d{i:02}"), "reasoning", 0.4 + 0.01 * i as f64, 0.01, 100)).unwrap();
    }
    let req = SelectionRequest::new("reasoning").strategy(Strategy::Quality).explain(ExplainDepth::All);
    let decision = router.select(&req, NOW).unwrap();
    assert_eq!(decision.explanation.ranking.len(), 40);
    assert_eq!(decision.delegate_id, "ldp:delegate:d39");
    assert!(decision.explanation.ranking.windows(2).all(|w| w[0].score >= w[1].score));
}

#[test]
fn claims_for_other_skills_do_not_leak_into_selection() {
    let mut router = greedy();
    // "coder" is attested excellent at code but only self-claims reasoning; "thinker" is attested at reasoning.
    let coder = Candidate::new("ldp:delegate:coder", "research.internal")
        .offering(SkillOffer::new("reasoning", 0.01, 100))
        .offering(SkillOffer::new("code", 0.01, 100))
        .with_claim(QualityClaim::attested(ClaimType::IssuerAttested, "code", Quality::MAX, "ldp:issuer:evals", NOW))
        .with_claim(QualityClaim::self_claimed("reasoning", Quality::new(0.5).unwrap()));
    router.upsert(&coder).unwrap();
    router.upsert(&attested("thinker", "reasoning", 0.8, 0.01, 100)).unwrap();
    let reasoning = router.assess("ldp:delegate:coder", "reasoning", NOW).unwrap();
    assert_eq!(reasoning.basis, Some(ClaimType::SelfClaimed));
    let req = SelectionRequest::new("reasoning").strategy(Strategy::Quality);
    assert_eq!(pick(&mut router, &req), "ldp:delegate:thinker");
    assert_eq!(pick(&mut router, &SelectionRequest::new("code").strategy(Strategy::Quality)), "ldp:delegate:coder");
}

#[test]
fn an_expired_attestation_stops_winning() {
    let mut router = greedy();
    let stale = attested("stale", "reasoning", 0.95, 0.01, 100);
    let mut stale_claim = stale.claims[0].clone();
    stale_claim.expires_at = Some(NOW + time::Duration::days(1));
    let stale = Candidate {
        claims: vec![stale_claim, QualityClaim::self_claimed("reasoning", Quality::new(0.6).unwrap())],
        ..stale
    };
    router.upsert(&stale).unwrap();
    router.upsert(&attested("steady", "reasoning", 0.8, 0.01, 100)).unwrap();
    let req = SelectionRequest::new("reasoning").strategy(Strategy::Quality);
    assert_eq!(router.select(&req, NOW).unwrap().delegate_id, "ldp:delegate:stale");
    let later = router.select(&req, NOW + time::Duration::days(2)).unwrap();
    assert_eq!(later.delegate_id, "ldp:delegate:steady");
    let fallback = router.assess("ldp:delegate:stale", "reasoning", NOW + time::Duration::days(2)).unwrap();
    assert_eq!((fallback.basis, fallback.expired_claims), (Some(ClaimType::SelfClaimed), 1));
}

#[test]
fn re_registration_replaces_and_removal_forgets() {
    let mut router = trio();
    assert_eq!(router.offers(), 3);
    // "best" now only offers code.
    router.upsert(&attested("best", "code", 0.95, 0.05, 4000)).unwrap();
    assert_eq!(router.offers(), 3);
    let req = SelectionRequest::new("reasoning").strategy(Strategy::Quality);
    assert_eq!(pick(&mut router, &req), "ldp:delegate:fast");
    assert!(router.remove("ldp:delegate:fast"));
    assert!(!router.remove("ldp:delegate:fast"));
    assert!(!router.remove("ldp:delegate:never"));
    assert_eq!(pick(&mut router, &req), "ldp:delegate:cheap");
    assert!(router.remove("ldp:delegate:cheap"));
    assert_eq!(router.select(&req, NOW), Err(RouterError::UnknownSkill("reasoning".into())));
}

#[test]
fn malformed_candidates_and_requests_are_errors() {
    let mut router = greedy();
    assert_eq!(router.upsert(&Candidate::new("", "d")), Err(RouterError::EmptyName("delegate_id")));
    assert_eq!(router.upsert(&Candidate::new("x", "")), Err(RouterError::EmptyName("trust_domain")));
    let negative = Candidate::new("x", "d").offering(SkillOffer::new("s", -1.0, 1));
    assert!(matches!(router.upsert(&negative), Err(RouterError::InvalidFigure { field: "cost_usd", .. })));
    let nan = Candidate::new("x", "d").offering(SkillOffer::new("s", f64::NAN, 1));
    assert!(router.upsert(&nan).is_err());
    let twice = Candidate::new("x", "d").offering(SkillOffer::new("s", 0.0, 1)).offering(SkillOffer::new("s", 0.0, 1));
    assert!(matches!(router.upsert(&twice), Err(RouterError::DuplicateSkill { .. })));
    assert!(Quality::new(1.5).is_err() && Quality::new(f64::NAN).is_err() && Quality::new(-0.1).is_err());
    assert!(serde_json_like_quality_rejects());
    assert_eq!(router.select(&SelectionRequest::new("nothing"), NOW), Err(RouterError::UnknownSkill("nothing".into())));
    let bad =
        RouterConfig { learner: LearnerConfig { recency: 0.0, ..LearnerConfig::default() }, ..RouterConfig::default() };
    assert!(Router::new(bad).is_err());
}

/// Quality is "parse, don't validate" through serde too.
fn serde_json_like_quality_rejects() -> bool {
    use serde::Deserialize;
    use serde::de::IntoDeserializer;
    use serde::de::value::{Error, F64Deserializer};
    let de = |v: f64| -> F64Deserializer<Error> { v.into_deserializer() };
    Quality::deserialize(de(0.5)).is_ok() && Quality::deserialize(de(1.5)).is_err()
}
