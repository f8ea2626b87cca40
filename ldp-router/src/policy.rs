//! The claim trust policy: how much each kind of claim, and the router's own observations, count.
//!
//! The model is a weighted mean in which every piece of evidence carries a weight measured in *pseudo-observations*:
//! one runtime observation weighs `observation_weight`, a claim weighs its type's weight times its freshness. The
//! total weight is also the estimate's confidence, so a lone self-claim is a weak prior that a few observations
//! overturn, while a fresh third-party attestation needs many.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::learner::ObservedQuality;
use crate::{ClaimType, QualityClaim, RouterError};

/// Weight, in pseudo-observations, of one fresh claim of each type.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClaimWeights {
    /// Weight of a `self_claimed` score.
    pub self_claimed: f64,
    /// Weight of a `runtime_observed` score reported by another runtime (this router's own observations are
    /// weighed by [`ClaimPolicy::observation_weight`] instead).
    pub runtime_observed: f64,
    /// Weight of an `issuer_attested` score.
    pub issuer_attested: f64,
    /// Weight of an `externally_benchmarked` score.
    pub externally_benchmarked: f64,
}

impl ClaimWeights {
    /// The weight of `claim_type`.
    pub fn of(&self, claim_type: ClaimType) -> f64 {
        match claim_type {
            ClaimType::SelfClaimed => self.self_claimed,
            ClaimType::RuntimeObserved => self.runtime_observed,
            ClaimType::IssuerAttested => self.issuer_attested,
            ClaimType::ExternallyBenchmarked => self.externally_benchmarked,
            // A claim type added to the wire model later counts as no more than a self-claim until weighed here.
            _ => self.self_claimed,
        }
    }
}

impl Default for ClaimWeights {
    fn default() -> Self {
        ClaimWeights { self_claimed: 1.0, runtime_observed: 5.0, issuer_attested: 20.0, externally_benchmarked: 30.0 }
    }
}

/// What to do with `self_claimed` scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SelfClaimedRule {
    /// Per delegate as [`SelfClaimedRule::IgnoreWhenBetterExists`], and in addition: once an eligible candidate of
    /// the selection rests on third-party evidence (a verified `issuer_attested` or `externally_benchmarked` claim),
    /// every candidate that has nothing but a self-claim is judged by the uninformed prior, so an inflated
    /// self-claim can never outrank attested quality. Runtime observations alone do not trigger this (honest
    /// self-claims keep guiding exploration until outcomes replace them).
    /// The default. ([`Router::assess`](crate::Router::assess), which sees one delegate, applies
    /// [`SelfClaimedRule::IgnoreWhenBetterExists`].)
    #[default]
    IgnoreWhenPoolHasBetter,
    /// Use a self-claim only while there is no other evidence for that delegate and skill: no live third-party
    /// claim and no runtime observation.
    IgnoreWhenBetterExists,
    /// Always weigh self-claims with their configured weight. Reproduces the paper's vulnerable "self-claimed"
    /// router when combined with greedy exploration.
    Weigh,
    /// Never use self-claims.
    Ignore,
}

/// How claims and observations turn into a quality estimate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimPolicy {
    /// Per-type weights.
    pub weights: ClaimWeights,
    /// Treatment of self-claims.
    pub self_claimed: SelfClaimedRule,
    /// A timestamped claim loses half its weight every `freshness_half_life`; `None` disables decay.
    pub freshness_half_life: Option<Duration>,
    /// A timestamped claim older than this counts for nothing even before its `expires_at`; `None` for no limit.
    pub max_claim_age: Option<Duration>,
    /// Weight of one of this router's own (recency-weighted) observations.
    pub observation_weight: f64,
    /// Estimate used when there is no evidence at all.
    pub prior_mean: f64,
    /// Weight of that prior; small, so that an unknown delegate is uncertain and gets explored.
    pub prior_strength: f64,
}

impl Default for ClaimPolicy {
    fn default() -> Self {
        ClaimPolicy {
            weights: ClaimWeights::default(),
            self_claimed: SelfClaimedRule::default(),
            freshness_half_life: Some(Duration::from_secs(30 * 24 * 3600)),
            max_claim_age: Some(Duration::from_secs(365 * 24 * 3600)),
            observation_weight: 1.0,
            prior_mean: 0.5,
            prior_strength: 0.5,
        }
    }
}

/// The policy's verdict on one delegate for one skill.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Assessment {
    /// Estimated quality in `[0, 1]`.
    pub mean: f64,
    /// Total evidence weight in pseudo-observations; the learner's uncertainty shrinks with it.
    pub strength: f64,
    /// The kind of evidence that weighed most; `None` when only the uninformed prior was left.
    pub basis: Option<ClaimType>,
    /// A self-claim existed but was set aside by the policy.
    pub self_claim_ignored: bool,
    /// Claims for this skill that had expired or aged out.
    pub expired_claims: u32,
}

/// A claim reduced to numbers once, at registration, so selection does no string or calendar work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CompiledClaim {
    pub(crate) kind: ClaimType,
    pub(crate) value: f64,
    /// Unix seconds, NaN when the claim carries no timestamp.
    pub(crate) attested_s: f64,
    /// Unix seconds, infinity when the claim never expires.
    pub(crate) expires_s: f64,
}

impl CompiledClaim {
    pub(crate) fn new(claim: &QualityClaim) -> Self {
        CompiledClaim {
            kind: claim.effective_type(),
            value: claim.value.get(),
            attested_s: claim.attested_at.map_or(f64::NAN, unix_seconds),
            expires_s: claim.expires_at.map_or(f64::INFINITY, unix_seconds),
        }
    }
}

/// How long, in seconds, a memoised assessment with decaying claims is reused: with the default 30-day half-life
/// a minute changes a claim's weight by less than 0.002%.
pub(crate) const DECAY_QUANTUM_S: f64 = 60.0;

/// Time-dependent constants of one assessment pass.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PolicyClock {
    pub(crate) now_s: f64,
    inv_half_life: f64,
    max_age: f64,
}

pub(crate) fn unix_seconds(t: OffsetDateTime) -> f64 {
    // f64 keeps sub-microsecond precision for present-day timestamps, far finer than claim freshness needs.
    t.unix_timestamp_nanos() as f64 / 1e9
}

impl ClaimPolicy {
    /// Checks that every figure is within its documented range.
    pub fn validate(&self) -> Result<(), RouterError> {
        let w = &self.weights;
        for (field, value) in [
            ("weights.self_claimed", w.self_claimed),
            ("weights.runtime_observed", w.runtime_observed),
            ("weights.issuer_attested", w.issuer_attested),
            ("weights.externally_benchmarked", w.externally_benchmarked),
            ("observation_weight", self.observation_weight),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(RouterError::InvalidFigure { field, value });
            }
        }
        if !(0.0..=1.0).contains(&self.prior_mean) {
            return Err(RouterError::InvalidConfig("prior_mean must lie within [0, 1]"));
        }
        if !(self.prior_strength.is_finite() && self.prior_strength > 0.0) {
            return Err(RouterError::InvalidConfig("prior_strength must be positive"));
        }
        if self.freshness_half_life.is_some_and(|h| h.is_zero()) {
            return Err(RouterError::InvalidConfig("freshness_half_life must be positive"));
        }
        Ok(())
    }

    /// Assesses a delegate's quality on `skill` from its `claims` (claims for other skills are ignored) and the
    /// router's own `observed` outcomes, as of `now`.
    pub fn assess(
        &self,
        skill: &str,
        claims: &[QualityClaim],
        observed: Option<&ObservedQuality>,
        now: OffsetDateTime,
    ) -> Assessment {
        let compiled = claims.iter().filter(|c| c.skill == skill).map(CompiledClaim::new);
        self.assess_compiled(compiled, observed, unix_seconds(now))
    }

    /// The one implementation behind [`ClaimPolicy::assess`] and the router's hot path.
    pub(crate) fn assess_compiled(
        &self,
        claims: impl IntoIterator<Item = CompiledClaim>,
        observed: Option<&ObservedQuality>,
        now_s: f64,
    ) -> Assessment {
        self.assess_with(&self.clock(now_s), claims, observed)
    }

    /// The per-call constants of an assessment, computed once per selection rather than once per candidate.
    pub(crate) fn clock(&self, now_s: f64) -> PolicyClock {
        PolicyClock {
            now_s,
            inv_half_life: self.freshness_half_life.map_or(0.0, |h| 1.0 / h.as_secs_f64()),
            max_age: self.max_claim_age.map_or(f64::INFINITY, |a| a.as_secs_f64()),
        }
    }

    pub(crate) fn assess_with(
        &self,
        clock: &PolicyClock,
        claims: impl IntoIterator<Item = CompiledClaim>,
        observed: Option<&ObservedQuality>,
    ) -> Assessment {
        self.assess_until(clock, claims, observed).0
    }

    /// The assessment and the instant (unix seconds) until which it may be reused: the next expiry or age limit,
    /// or [`DECAY_QUANTUM_S`] ahead while a dated claim is decaying.
    pub(crate) fn assess_until(
        &self,
        clock: &PolicyClock,
        claims: impl IntoIterator<Item = CompiledClaim>,
        observed: Option<&ObservedQuality>,
    ) -> (Assessment, f64) {
        let PolicyClock { now_s, inv_half_life, max_age } = *clock;
        let mut until = f64::INFINITY;

        let (mut self_w, mut self_wv) = (0.0, 0.0);
        let (mut other_w, mut other_wv) = (0.0, 0.0);
        let mut top = (0.0, None);
        let mut has_self = false;
        let mut expired_claims = 0;
        for claim in claims {
            let age = if claim.attested_s.is_nan() { 0.0 } else { (now_s - claim.attested_s).max(0.0) };
            if now_s >= claim.expires_s || age > max_age {
                expired_claims += 1;
                continue;
            }
            until = until.min(claim.expires_s);
            if !claim.attested_s.is_nan() {
                until = until.min(claim.attested_s + max_age);
                if inv_half_life > 0.0 {
                    until = until.min(now_s + DECAY_QUANTUM_S);
                }
            }
            let decay = age * inv_half_life;
            // exp2 dominates selection time; undated and brand-new claims, the common case, need none.
            let freshness = if decay > 0.0 { (-decay).exp2() } else { 1.0 };
            let weight = self.weights.of(claim.kind) * freshness;
            if weight <= 0.0 {
                continue;
            }
            if claim.kind == ClaimType::SelfClaimed {
                has_self = true;
                self_w += weight;
                self_wv += weight * claim.value;
            } else {
                other_w += weight;
                other_wv += weight * claim.value;
                if weight > top.0 {
                    top = (weight, Some(claim.kind));
                }
            }
        }
        if let Some(obs) = observed {
            let weight = obs.weight * self.observation_weight;
            if weight > 0.0 {
                other_w += weight;
                other_wv += weight * obs.mean;
                if weight > top.0 {
                    top = (weight, Some(ClaimType::RuntimeObserved));
                }
            }
        }
        let use_self = match self.self_claimed {
            SelfClaimedRule::Weigh => true,
            SelfClaimedRule::Ignore => false,
            SelfClaimedRule::IgnoreWhenBetterExists | SelfClaimedRule::IgnoreWhenPoolHasBetter => other_w <= 0.0,
        };
        if use_self && self_w > 0.0 {
            other_w += self_w;
            other_wv += self_wv;
            if self_w > top.0 {
                top = (self_w, Some(ClaimType::SelfClaimed));
            }
        }
        let assessment = if other_w > 0.0 {
            Assessment {
                mean: (other_wv / other_w).clamp(0.0, 1.0),
                strength: other_w,
                basis: top.1,
                self_claim_ignored: has_self && !use_self,
                expired_claims,
            }
        } else {
            Assessment {
                mean: self.prior_mean,
                strength: self.prior_strength,
                basis: None,
                self_claim_ignored: has_self,
                expired_claims,
            }
        };
        (assessment, until)
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;
    use crate::Quality;

    const NOW: OffsetDateTime = datetime!(2026-03-15 12:00 UTC);

    fn q(v: f64) -> Quality {
        Quality::new(v).unwrap()
    }

    fn attested(skill: &str, v: f64, days_ago: i64) -> QualityClaim {
        QualityClaim::attested(
            ClaimType::IssuerAttested,
            skill,
            q(v),
            "ldp:issuer:evals",
            NOW - time::Duration::days(days_ago),
        )
    }

    fn observed(mean: f64, weight: f64) -> ObservedQuality {
        ObservedQuality { mean, weight, count: weight as u64, last_at: Some(NOW) }
    }

    #[test]
    fn a_lone_self_claim_is_used_as_a_weak_prior() {
        let a =
            ClaimPolicy::default().assess("reasoning", &[QualityClaim::self_claimed("reasoning", q(0.9))], None, NOW);
        assert_eq!(a.basis, Some(ClaimType::SelfClaimed));
        assert!((a.mean - 0.9).abs() < 1e-12);
        assert!((a.strength - 1.0).abs() < 1e-12);
        assert!(!a.self_claim_ignored);
    }

    #[test]
    fn self_claim_is_ignored_when_an_attestation_exists() {
        let claims = [QualityClaim::self_claimed("reasoning", q(0.99)), attested("reasoning", 0.6, 0)];
        let a = ClaimPolicy::default().assess("reasoning", &claims, None, NOW);
        assert!((a.mean - 0.6).abs() < 1e-12, "{a:?}");
        assert_eq!(a.basis, Some(ClaimType::IssuerAttested));
        assert!(a.self_claim_ignored);
    }

    #[test]
    fn self_claim_is_ignored_once_the_router_has_observations() {
        let claims = [QualityClaim::self_claimed("reasoning", q(0.99))];
        let a = ClaimPolicy::default().assess("reasoning", &claims, Some(&observed(0.5, 1.0)), NOW);
        assert!((a.mean - 0.5).abs() < 1e-12);
        assert_eq!(a.basis, Some(ClaimType::RuntimeObserved));
        assert!(a.self_claim_ignored);
    }

    #[test]
    fn weigh_rule_mixes_self_claims_and_ignore_rule_drops_them() {
        let claims = [QualityClaim::self_claimed("reasoning", q(1.0)), attested("reasoning", 0.5, 0)];
        let weigh = ClaimPolicy { self_claimed: SelfClaimedRule::Weigh, ..ClaimPolicy::default() };
        let a = weigh.assess("reasoning", &claims, None, NOW);
        assert!((a.mean - (1.0 + 20.0 * 0.5) / 21.0).abs() < 1e-12, "{a:?}");
        let ignore = ClaimPolicy { self_claimed: SelfClaimedRule::Ignore, ..ClaimPolicy::default() };
        let a = ignore.assess("reasoning", &claims[..1], None, NOW);
        assert_eq!(a.basis, None);
        assert!((a.mean - ignore.prior_mean).abs() < 1e-12);
    }

    #[test]
    fn expired_attestation_falls_back_to_the_self_claim() {
        let claims = [
            QualityClaim::self_claimed("reasoning", q(0.7)),
            attested("reasoning", 0.95, 10).expiring_at(NOW - time::Duration::hours(1)),
        ];
        let a = ClaimPolicy::default().assess("reasoning", &claims, None, NOW);
        assert_eq!(a.basis, Some(ClaimType::SelfClaimed));
        assert!((a.mean - 0.7).abs() < 1e-12);
        assert_eq!(a.expired_claims, 1);
        // One second before expiry it still counts.
        let before = NOW - time::Duration::hours(1) - time::Duration::seconds(1);
        let a = ClaimPolicy::default().assess("reasoning", &claims, None, before);
        assert_eq!(a.basis, Some(ClaimType::IssuerAttested));
    }

    #[test]
    fn claims_older_than_the_age_limit_count_for_nothing() {
        let policy = ClaimPolicy { max_claim_age: Some(Duration::from_secs(30 * 86_400)), ..ClaimPolicy::default() };
        let a = policy.assess("reasoning", &[attested("reasoning", 0.9, 31)], None, NOW);
        assert_eq!((a.basis, a.expired_claims), (None, 1));
    }

    #[test]
    fn attestations_lose_half_their_weight_per_half_life() {
        let policy = ClaimPolicy::default();
        let fresh = policy.assess("reasoning", &[attested("reasoning", 0.9, 0)], None, NOW);
        let month = policy.assess("reasoning", &[attested("reasoning", 0.9, 30)], None, NOW);
        assert!((fresh.strength - 20.0).abs() < 1e-9);
        assert!((month.strength - 10.0).abs() < 1e-9, "{month:?}");
        // An old attestation and fresh observations: the observations now weigh as much as the attestation.
        let mixed = policy.assess("reasoning", &[attested("reasoning", 0.9, 30)], Some(&observed(0.5, 10.0)), NOW);
        assert!((mixed.mean - 0.7).abs() < 1e-9, "{mixed:?}");
    }

    #[test]
    fn a_claim_for_one_skill_says_nothing_of_another() {
        let claims = [attested("code", 0.95, 0), QualityClaim::self_claimed("code", q(0.95))];
        let a = ClaimPolicy::default().assess("reasoning", &claims, None, NOW);
        assert_eq!(a.basis, None);
        assert!((a.mean - 0.5).abs() < 1e-12);
        let b = ClaimPolicy::default().assess("code", &claims, None, NOW);
        assert_eq!(b.basis, Some(ClaimType::IssuerAttested));
    }

    #[test]
    fn an_attestation_without_issuer_or_time_is_only_a_self_claim() {
        let mut bare = attested("reasoning", 0.99, 0);
        bare.issuer = None;
        assert_eq!(bare.effective_type(), ClaimType::SelfClaimed);
        let mut undated = attested("reasoning", 0.99, 0);
        undated.attested_at = None;
        assert_eq!(undated.effective_type(), ClaimType::SelfClaimed);
        let mut labelled = QualityClaim::self_claimed("reasoning", q(0.99));
        labelled.claim_type = ClaimType::RuntimeObserved;
        assert_eq!(labelled.effective_type(), ClaimType::SelfClaimed);
        let a = ClaimPolicy::default().assess("reasoning", &[bare], None, NOW);
        assert!((a.strength - 1.0).abs() < 1e-12);
    }

    #[test]
    fn externally_benchmarked_outweighs_a_higher_self_claim() {
        // The paper's example: a self-claimed 0.95 counts for less than a benchmarked 0.85.
        let claims = [
            QualityClaim::self_claimed("reasoning", q(0.95)),
            QualityClaim::attested(ClaimType::ExternallyBenchmarked, "reasoning", q(0.85), "ldp:bench:helm", NOW),
        ];
        let a = ClaimPolicy::default().assess("reasoning", &claims, None, NOW);
        assert!((a.mean - 0.85).abs() < 1e-12);
    }

    #[test]
    fn invalid_policies_are_rejected() {
        let bad_weight = ClaimPolicy {
            weights: ClaimWeights { issuer_attested: f64::NAN, ..ClaimWeights::default() },
            ..ClaimPolicy::default()
        };
        assert!(matches!(bad_weight.validate(), Err(RouterError::InvalidFigure { .. })));
        let bad_prior = ClaimPolicy { prior_strength: 0.0, ..ClaimPolicy::default() };
        assert!(bad_prior.validate().is_err());
        let bad_half_life = ClaimPolicy { freshness_half_life: Some(Duration::ZERO), ..ClaimPolicy::default() };
        assert!(bad_half_life.validate().is_err());
        assert!(ClaimPolicy::default().validate().is_ok());
    }
}
