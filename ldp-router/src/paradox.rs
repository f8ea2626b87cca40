//! The provenance-paradox experiment (paper, sections 5.2 and 5.3), run on this crate's [`Router`].
//!
//! # Setting
//!
//! A pool of simulated delegates, each with a true quality; a task routed to one yields output quality
//! `true + N(0, noise_sd)` clamped to `[0, 1]`. Four routers, each over the same pool and tasks of a seed:
//!
//! * **blind**: a uniformly random delegate;
//! * **self-claimed**: the [`Router`] with [`SelfClaimedRule::Weigh`] and greedy selection, over the delegates'
//!   own claims: the paper's router that trusts reported scores;
//! * **attested**: the default [`Router`] policy, greedy, over the self-claims plus an `issuer_attested` claim of
//!   each delegate's true quality (fresh, with issuer): the paper's "route by true quality";
//! * **ours**: the default [`Router`] ([`Exploration::Thompson`], self-claims ignored once anything better exists)
//!   over the self-claims only, recording every output quality as a verified outcome. No attestation at all.
//!
//! All but blind go through [`Router::select`] with [`Strategy::Quality`], so "ours" is exactly the code a real
//! deployment runs, with its seeded exploration.
//!
//! # How true qualities and claims are generated
//!
//! The paper fixes: true qualities within `[0.45, 0.95]`; honest delegates claim within 0.02 of the truth; the
//! inflators are the low-quality delegates (section 5.4: "dishonest delegates had much lower true quality") and
//! inflate by a given range. It does not give the exact draw, and its two sections describe different regimes, so
//! two documented claim models are used:
//!
//! * [`InflatorClaims::Additive`] (the sensitivity analysis): true qualities evenly spaced on `[0.45, 0.95]`, the
//!   `k = round(fraction · n)` lowest are inflators (at least 1, at most `n - 1`); an inflator claims
//!   `min(true + δ, 1)` with `δ ~ U(inflation)`; honest delegates claim `true + U(-0.015, 0.015)`. Whether the
//!   inflators out-claim the best honest delegate is left to the numbers, which is what section 5.3 studies:
//!   "it emerges specifically when inflators are numerous and their inflation is large enough to dominate the
//!   ranking".
//! * [`InflatorClaims::AboveHonest`] (Table 2): section 5.2 states that the inflators' claims are the highest in
//!   the pool although they inflate by only 0.35 to 0.45 and the best delegate is at 0.95. With additive claims on
//!   an even grid that cannot hold (the third-lowest delegate at 0.56 would need δ > 0.39 to beat 0.95), so here
//!   the `n - k` honest delegates are evenly spaced on `[0.45, 0.95]`, each inflator's claim is drawn uniformly
//!   between the best honest claim (plus 0.005) and 1, and its true quality lies `δ ~ U(inflation)` below its
//!   claim. The inflators then always out-claim everyone and their true qualities land in about `[0.52, 0.65]`.
//!
//! The pool is shuffled per seed before registration so that ties (claims clamped at 1) break randomly.
//!
//! # Figures
//!
//! Quality mean and standard deviation pool all tasks of all seeds, like the paper's; `seed_sd` is the standard
//! deviation of the per-seed means. Accuracy is the share of tasks routed to the delegate of highest true quality;
//! "inflation selected" the share routed to an inflator; `d` is Cohen's d against blind.

use std::fmt::{self, Write as _};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use serde::Serialize;
use time::OffsetDateTime;
use time::macros::datetime;

mod figure4;
mod real;
mod sensitivity;

pub use figure4::{FIGURE4_FRACTIONS, Figure4Report, Figure4Row, run_figure4};
pub use real::{RealConditionRow, RealRunError, run_conditions};
pub use sensitivity::{DISHONEST_FRACTIONS, POOL_SIZES, SensitivityReport, SensitivityRow, run_sensitivity};

use crate::{
    Candidate, ClaimPolicy, ClaimType, ExplainDepth, Exploration, LearnerConfig, Observation, Quality, QualityClaim,
    Router, RouterConfig, RouterError, SelectionRequest, SelfClaimedRule, SkillOffer, Strategy, VerificationSource,
};

const SKILL: &str = "reasoning";
const START: OffsetDateTime = datetime!(2026-03-15 00:00 UTC);

/// How inflators' claims relate to the honest ones; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InflatorClaims {
    /// Inflators are the lowest delegates of an even grid and claim `min(true + δ, 1)`.
    Additive,
    /// Inflators claim above every honest claim and their true quality lies `δ` below.
    AboveHonest,
}

/// Inflation ranges of the sensitivity analysis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InflationLevel {
    /// δ in `[0.10, 0.15]`.
    Low,
    /// δ in `[0.25, 0.35]`.
    Medium,
    /// δ in `[0.40, 0.50]`.
    High,
}

impl InflationLevel {
    /// All levels, low first.
    pub const ALL: [InflationLevel; 3] = [InflationLevel::Low, InflationLevel::Medium, InflationLevel::High];

    /// The range of δ.
    pub fn range(self) -> (f64, f64) {
        match self {
            InflationLevel::Low => (0.10, 0.15),
            InflationLevel::Medium => (0.25, 0.35),
            InflationLevel::High => (0.40, 0.50),
        }
    }

    /// The level's name.
    pub fn name(self) -> &'static str {
        match self {
            InflationLevel::Low => "low",
            InflationLevel::Medium => "medium",
            InflationLevel::High => "high",
        }
    }
}

/// One configuration of the experiment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scenario {
    /// Delegates in the pool.
    pub pool_size: usize,
    /// Share of inflating delegates.
    pub dishonest_fraction: f64,
    /// Range of the inflation δ.
    pub inflation: (f64, f64),
    /// How inflators' claims are generated.
    pub inflator_claims: InflatorClaims,
    /// Tasks per condition and seed.
    pub tasks: usize,
    /// Standard deviation of output quality around true quality.
    pub noise_sd: f64,
}

impl Scenario {
    /// The setting of the paper's Table 2: 10 delegates, 3 inflating by 0.35 to 0.45 above every honest claim,
    /// `tasks` tasks.
    pub fn table2(tasks: usize) -> Self {
        Scenario {
            pool_size: 10,
            dishonest_fraction: 0.3,
            inflation: (0.35, 0.45),
            inflator_claims: InflatorClaims::AboveHonest,
            tasks,
            noise_sd: 0.05,
        }
    }

    /// One configuration of the sensitivity analysis.
    pub fn sensitivity(dishonest_fraction: f64, level: InflationLevel, pool_size: usize, tasks: usize) -> Self {
        Scenario {
            pool_size,
            dishonest_fraction,
            inflation: level.range(),
            inflator_claims: InflatorClaims::Additive,
            tasks,
            noise_sd: 0.05,
        }
    }

    fn validate(&self) -> Result<(), RouterError> {
        if self.pool_size < 2 {
            return Err(RouterError::InvalidConfig("the pool needs at least 2 delegates"));
        }
        if self.tasks == 0 {
            return Err(RouterError::InvalidConfig("at least one task per condition"));
        }
        if !(0.0..1.0).contains(&self.dishonest_fraction) {
            return Err(RouterError::InvalidConfig("dishonest_fraction must lie within [0, 1)"));
        }
        let (lo, hi) = self.inflation;
        if !(0.0 <= lo && lo <= hi && hi <= 1.0) {
            return Err(RouterError::InvalidConfig("inflation must be a range within [0, 1]"));
        }
        if !(self.noise_sd.is_finite() && self.noise_sd >= 0.0) {
            return Err(RouterError::InvalidFigure { field: "noise_sd", value: self.noise_sd });
        }
        Ok(())
    }

    /// Number of inflators.
    pub fn inflators(&self) -> usize {
        let k = (self.dishonest_fraction * self.pool_size as f64).round() as usize;
        if self.dishonest_fraction > 0.0 { k.max(1).min(self.pool_size.saturating_sub(1)) } else { 0 }
    }
}

/// A simulated delegate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimDelegate {
    /// Its id.
    pub id: String,
    /// Its true quality.
    pub true_quality: f64,
    /// Its self-claimed quality.
    pub claimed: f64,
    /// Whether it inflates.
    pub inflating: bool,
}

/// Draws the pool of `scenario` (shuffled) from `rng`.
pub fn generate_pool(scenario: &Scenario, rng: &mut impl Rng) -> Result<Vec<SimDelegate>, RouterError> {
    scenario.validate()?;
    let n = scenario.pool_size;
    let k = scenario.inflators();
    let (lo, hi) = scenario.inflation;
    let grid = |i: usize, len: usize| if len < 2 { 0.95 } else { 0.45 + 0.5 * i as f64 / (len - 1) as f64 };
    let honest_claim = |q: f64, rng: &mut dyn rand::RngCore| (q + rng.random_range(-0.015..=0.015)).clamp(0.0, 1.0);
    let mut pool = Vec::with_capacity(n);
    match scenario.inflator_claims {
        InflatorClaims::Additive => {
            for i in 0..n {
                let true_quality = grid(i, n);
                let inflating = i < k;
                let claimed = if inflating {
                    (true_quality + rng.random_range(lo..=hi)).min(1.0)
                } else {
                    honest_claim(true_quality, rng)
                };
                pool.push((true_quality, claimed, inflating));
            }
        }
        InflatorClaims::AboveHonest => {
            for i in 0..n - k {
                let true_quality = grid(i, n - k);
                pool.push((true_quality, honest_claim(true_quality, rng), false));
            }
            let top = pool.iter().map(|d| d.1).fold(0.0, f64::max);
            let floor = (top + 0.005).min(1.0);
            for _ in 0..k {
                let claimed = rng.random_range(floor..=1.0);
                let true_quality = (claimed - rng.random_range(lo..=hi)).clamp(0.0, 1.0);
                pool.push((true_quality, claimed, true));
            }
        }
    }
    pool.shuffle(rng);
    Ok(pool
        .into_iter()
        .enumerate()
        .map(|(i, (true_quality, claimed, inflating))| SimDelegate {
            id: format!("ldp:delegate:sim-{i:02}"),
            true_quality,
            claimed,
            inflating,
        })
        .collect())
}

/// A routing condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Condition {
    /// Uniformly random.
    Blind,
    /// Greedy on self-claims.
    SelfClaimed,
    /// Greedy on attested true quality.
    Attested,
    /// This router: runtime-observed, exploring, no attestation.
    Ours,
}

impl Condition {
    /// All conditions, in table order.
    pub const ALL: [Condition; 4] = [Condition::Blind, Condition::SelfClaimed, Condition::Attested, Condition::Ours];

    /// The condition's name.
    pub fn name(self) -> &'static str {
        match self {
            Condition::Blind => "blind",
            Condition::SelfClaimed => "self-claimed",
            Condition::Attested => "attested",
            Condition::Ours => "ours (runtime-observed)",
        }
    }

    /// A machine-friendly identifier, as in JSON.
    pub fn id(self) -> &'static str {
        match self {
            Condition::Blind => "blind",
            Condition::SelfClaimed => "self_claimed",
            Condition::Attested => "attested",
            Condition::Ours => "ours",
        }
    }

    fn stream(self) -> u64 {
        match self {
            Condition::Blind => 1,
            Condition::SelfClaimed => 2,
            Condition::Attested => 3,
            Condition::Ours => 4,
        }
    }
}

/// Results of one condition over all seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConditionStats {
    /// The condition.
    pub condition: Condition,
    /// Mean output quality over all tasks and seeds.
    pub mean: f64,
    /// Standard deviation of output quality over all tasks and seeds.
    pub std: f64,
    /// Standard deviation of the per-seed means.
    pub seed_sd: f64,
    /// Percentage of tasks routed to the best delegate.
    pub accuracy_pct: f64,
    /// Percentage of tasks routed to an inflator.
    pub inflation_selected_pct: f64,
    /// Cohen's d against blind (pooled standard deviation, [`crate::stats::cohen_d`]).
    pub cohen_d_vs_blind: f64,
    /// Two-sided p-value of the Mann–Whitney U test against blind over all tasks of all seeds, as the paper's
    /// Table 2 reports it (`None` for blind itself).
    pub p_vs_blind: Option<f64>,
    /// Cohen's d against self-claimed: the comparison whose figure the paper's abstract quotes for attested
    /// routing (`d = 9.51`; `docs/paradox.md` shows why).
    pub cohen_d_vs_self_claimed: f64,
}

/// Results of one scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExperimentReport {
    /// The scenario.
    pub scenario: Scenario,
    /// Seed of the first run; run `i` uses `base_seed + i`.
    pub base_seed: u64,
    /// Number of seeds.
    pub seeds: u64,
    /// Mean over seeds of the best true quality in the pool.
    pub best_true_quality: f64,
    /// One entry per condition, in [`Condition::ALL`] order.
    pub conditions: Vec<ConditionStats>,
}

impl ExperimentReport {
    /// The stats of `condition`.
    pub fn stats(&self, condition: Condition) -> Option<&ConditionStats> {
        self.conditions.iter().find(|c| c.condition == condition)
    }

    pub(crate) fn mean_of(&self, condition: Condition) -> f64 {
        self.stats(condition).map_or(f64::NAN, |s| s.mean)
    }

    /// Share of the blind-to-attested quality gap that "ours" closes (1 = as good as attested).
    pub fn gap_closed(&self) -> f64 {
        let blind = self.mean_of(Condition::Blind);
        (self.mean_of(Condition::Ours) - blind) / (self.mean_of(Condition::Attested) - blind)
    }

    /// The report as CSV, one row per condition.
    pub fn to_csv(&self) -> String {
        let mut out = String::from(
            "condition,mean,std,seed_sd,accuracy_pct,inflation_selected_pct,cohen_d_vs_blind,p_vs_blind,\
             cohen_d_vs_self_claimed\n",
        );
        for c in &self.conditions {
            let _ = writeln!(
                out,
                "{},{:.4},{:.4},{:.4},{:.1},{:.1},{:.3},{},{:.3}",
                c.condition.id(),
                c.mean,
                c.std,
                c.seed_sd,
                c.accuracy_pct,
                c.inflation_selected_pct,
                c.cohen_d_vs_blind,
                c.p_vs_blind.map(|p| format!("{p:.3e}")).unwrap_or_default(),
                c.cohen_d_vs_self_claimed
            );
        }
        out
    }
}

impl fmt::Display for ExperimentReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.scenario;
        writeln!(
            f,
            "{} delegates, {} inflating by {:.2}-{:.2} ({}), {} tasks x {} seeds from seed {}; best true quality {:.3}",
            s.pool_size,
            s.inflators(),
            s.inflation.0,
            s.inflation.1,
            match s.inflator_claims {
                InflatorClaims::AboveHonest => "claims above every honest claim",
                InflatorClaims::Additive => "claim = true + inflation",
            },
            s.tasks,
            self.seeds,
            self.base_seed,
            self.best_true_quality,
        )?;
        writeln!(f)?;
        writeln!(
            f,
            "{:<24} {:>16} {:>8} {:>10} {:>12} {:>11} {:>10} {:>10}",
            "condition", "quality", "seed sd", "accuracy", "inflation", "d vs blind", "p (MWU)", "d vs self"
        )?;
        for c in &self.conditions {
            let d = if c.condition == Condition::Blind { "-".to_owned() } else { format!("{:.2}", c.cohen_d_vs_blind) };
            let d_self = if c.condition == Condition::SelfClaimed {
                "-".to_owned()
            } else {
                format!("{:.2}", c.cohen_d_vs_self_claimed)
            };
            writeln!(
                f,
                "{:<24} {:>16} {:>8.3} {:>9.1}% {:>11.1}% {:>11} {:>10} {:>10}",
                c.condition.name(),
                format!("{:.3} ± {:.3}", c.mean, c.std),
                c.seed_sd,
                c.accuracy_pct,
                c.inflation_selected_pct,
                d,
                c.p_vs_blind.map_or_else(|| "-".to_owned(), format_p),
                d_self
            )?;
        }
        writeln!(f)?;
        write!(f, "ours closes {:.0}% of the blind-to-attested gap without any attestation", 100.0 * self.gap_closed())
    }
}

/// A p-value as papers print it: `< 0.001` below that, else three decimals.
pub fn format_p(p: f64) -> String {
    if p < 0.001 { "< 0.001".to_owned() } else { format!("{p:.3}") }
}

struct Tally {
    qualities: Vec<f64>,
    seed_means: Vec<f64>,
    best: usize,
    inflated: usize,
}

impl Tally {
    fn new() -> Self {
        Tally { qualities: Vec::new(), seed_means: Vec::new(), best: 0, inflated: 0 }
    }
}

fn mean_sd(xs: &[f64]) -> (f64, f64) {
    crate::stats::mean_sd(xs).unwrap_or((f64::NAN, f64::NAN))
}

fn candidates(pool: &[SimDelegate], attested: bool) -> Result<Vec<Candidate>, RouterError> {
    pool.iter()
        .map(|d| {
            let mut c = Candidate::new(d.id.clone(), "sim.internal")
                .offering(SkillOffer::new(SKILL, 0.01, 1000))
                .with_claim(QualityClaim::self_claimed(SKILL, Quality::new(d.claimed)?));
            if attested {
                let at = START - time::Duration::days(1);
                c = c.with_claim(
                    QualityClaim::attested(
                        ClaimType::IssuerAttested,
                        SKILL,
                        Quality::new(d.true_quality)?,
                        "ldp:issuer:sim-evaluator",
                        at,
                    )
                    .expiring_at(START + time::Duration::days(90)),
                );
            }
            Ok(c)
        })
        .collect()
}

fn router_for(condition: Condition, pool: &[SimDelegate], seed: u64) -> Result<Option<Router>, RouterError> {
    let (config, attested) = match condition {
        Condition::Blind => return Ok(None),
        Condition::SelfClaimed => (
            RouterConfig {
                policy: ClaimPolicy { self_claimed: SelfClaimedRule::Weigh, ..ClaimPolicy::default() },
                learner: LearnerConfig { exploration: Exploration::Greedy, seed, ..LearnerConfig::default() },
            },
            false,
        ),
        Condition::Attested => (
            RouterConfig {
                policy: ClaimPolicy::default(),
                learner: LearnerConfig { exploration: Exploration::Greedy, seed, ..LearnerConfig::default() },
            },
            true,
        ),
        Condition::Ours => (
            RouterConfig { learner: LearnerConfig { seed, ..LearnerConfig::default() }, ..RouterConfig::default() },
            false,
        ),
    };
    let mut router = Router::new(config)?;
    for candidate in candidates(pool, attested)? {
        router.upsert(&candidate)?;
    }
    Ok(Some(router))
}

/// Runs `scenario` for `seeds` seeds starting at `base_seed`.
pub fn run_experiment(scenario: &Scenario, base_seed: u64, seeds: u64) -> Result<ExperimentReport, RouterError> {
    scenario.validate()?;
    if seeds == 0 {
        return Err(RouterError::InvalidConfig("at least one seed"));
    }
    let noise = Normal::new(0.0, scenario.noise_sd)
        .map_err(|_| RouterError::InvalidFigure { field: "noise_sd", value: scenario.noise_sd })?;
    let mut tallies: Vec<Tally> = Condition::ALL.iter().map(|_| Tally::new()).collect();
    let mut best_sum = 0.0;
    let request = SelectionRequest::new(SKILL).strategy(Strategy::Quality).explain(ExplainDepth::Top(1));
    for seed in base_seed..base_seed.saturating_add(seeds) {
        let mut pool_rng = ChaCha8Rng::seed_from_u64(seed);
        let pool = generate_pool(scenario, &mut pool_rng)?;
        let best_quality = pool.iter().map(|d| d.true_quality).fold(f64::NEG_INFINITY, f64::max);
        best_sum += best_quality;
        for (condition, tally) in Condition::ALL.into_iter().zip(tallies.iter_mut()) {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(condition.stream());
            // The learner's seed is derived from, not equal to, the task seed so the two streams are independent.
            let mut router = router_for(condition, &pool, seed ^ 0x5eed_1d90_0000_0000)?;
            let mut seed_sum = 0.0;
            for task in 0..scenario.tasks {
                let now = START + time::Duration::minutes(task as i64);
                let index = match router.as_mut() {
                    None => rng.random_range(0..pool.len()),
                    Some(router) => {
                        let decision = router.select(&request, now)?;
                        pool.iter().position(|d| d.id == decision.delegate_id).unwrap_or(0)
                    }
                };
                let Some(delegate) = pool.get(index) else { continue };
                let quality = (delegate.true_quality + noise.sample(&mut rng)).clamp(0.0, 1.0);
                if condition == Condition::Ours
                    && let Some(router) = router.as_mut()
                {
                    let outcome = Observation {
                        delegate_id: delegate.id.clone(),
                        skill: SKILL.to_owned(),
                        score: Quality::saturating(quality),
                        source: VerificationSource::Validator("simulated-judge".to_owned()),
                    };
                    router.record_outcome(&outcome, now)?;
                }
                tally.qualities.push(quality);
                seed_sum += quality;
                tally.best += usize::from(delegate.true_quality >= best_quality);
                tally.inflated += usize::from(delegate.inflating);
            }
            tally.seed_means.push(seed_sum / scenario.tasks as f64);
        }
    }
    let of = |condition: Condition| {
        Condition::ALL.iter().position(|&c| c == condition).and_then(|i| tallies.get(i)).map(|t| t.qualities.as_slice())
    };
    let (blind, self_claimed) =
        (of(Condition::Blind).unwrap_or_default(), of(Condition::SelfClaimed).unwrap_or_default());
    let conditions = Condition::ALL
        .into_iter()
        .zip(&tallies)
        .map(|(condition, t)| {
            let (mean, std) = mean_sd(&t.qualities);
            let total = t.qualities.len().max(1) as f64;
            ConditionStats {
                condition,
                mean,
                std,
                seed_sd: mean_sd(&t.seed_means).1,
                accuracy_pct: 100.0 * t.best as f64 / total,
                inflation_selected_pct: 100.0 * t.inflated as f64 / total,
                cohen_d_vs_blind: crate::stats::cohen_d(&t.qualities, blind).unwrap_or(0.0),
                p_vs_blind: (condition != Condition::Blind)
                    .then(|| crate::stats::mann_whitney_u(&t.qualities, blind).map(|test| test.p_two_sided))
                    .flatten(),
                cohen_d_vs_self_claimed: crate::stats::cohen_d(&t.qualities, self_claimed).unwrap_or(0.0),
            }
        })
        .collect();
    Ok(ExperimentReport {
        scenario: scenario.clone(),
        base_seed,
        seeds,
        best_true_quality: best_sum / seeds as f64,
        conditions,
    })
}

/// A report row's mean qualities of blind, self-claimed, attested and this router's routing: the columns every
/// paradox report writes in this order.
struct Qualities([f64; 4]);

impl Qualities {
    /// The four as CSV cells (four decimals).
    fn csv(&self) -> String {
        let [blind, self_claimed, attested, ours] = self.0;
        format!("{blind:.4},{self_claimed:.4},{attested:.4},{ours:.4}")
    }

    /// The four as table cells under the headers `blind`, `self`, `attested`, `ours` (widths 7, 7, 8, 7).
    fn table(&self) -> String {
        let [blind, self_claimed, attested, ours] = self.0;
        format!("{blind:>7.3} {self_claimed:>7.3} {attested:>8.3} {ours:>7.3}")
    }
}
