//! Runtime-observed quality: outcomes in, a recency-weighted estimate and an exploration draw out.

use rand::Rng;
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::{Quality, RouterError};

/// How the router trades exploiting the best-looking delegate against learning about the others.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Exploration {
    /// Thompson sampling: score each delegate by a draw from `N(mean, outcome_sd² / strength)`. The default: an
    /// uncertain delegate sometimes wins, a well-known poor one almost never does.
    #[default]
    Thompson,
    /// Optimism in the face of uncertainty (UCB-style): score `mean + c · outcome_sd / √strength`. Deterministic.
    Optimistic {
        /// How many posterior standard deviations of optimism.
        c: f64,
    },
    /// Always the best estimate; never explores. For routers that do not learn.
    Greedy,
}

/// Settings of the runtime-observed learner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LearnerConfig {
    /// Each new outcome for a delegate and skill multiplies the weight of the earlier ones by this factor in
    /// `(0, 1]`; 0.98 keeps an effective memory of about 50 outcomes, so a delegate that changes is re-learned.
    pub recency: f64,
    /// Assumed standard deviation of one verification score around the delegate's true quality.
    pub outcome_sd: f64,
    /// The exploration rule.
    pub exploration: Exploration,
    /// Seed of the router's random generator: the same seed, candidates and inputs give the same decisions.
    pub seed: u64,
}

impl Default for LearnerConfig {
    fn default() -> Self {
        LearnerConfig { recency: 0.98, outcome_sd: 0.1, exploration: Exploration::Thompson, seed: 0 }
    }
}

impl LearnerConfig {
    /// Checks that every figure is within its documented range.
    pub fn validate(&self) -> Result<(), RouterError> {
        if !(self.recency > 0.0 && self.recency <= 1.0) {
            return Err(RouterError::InvalidConfig("recency must lie within (0, 1]"));
        }
        if !(self.outcome_sd.is_finite() && self.outcome_sd > 0.0) {
            return Err(RouterError::InvalidConfig("outcome_sd must be positive"));
        }
        if let Exploration::Optimistic { c } = self.exploration
            && !(c.is_finite() && c >= 0.0)
        {
            return Err(RouterError::InvalidConfig("exploration c must be non-negative"));
        }
        Ok(())
    }

    /// The quality used for ranking: the mean plus exploration, for evidence of weight `1 / unit_sd²`.
    pub(crate) fn draw(&self, mean: f64, unit_sd: f64, rng: &mut impl Rng) -> f64 {
        match self.exploration {
            Exploration::Greedy => mean,
            Exploration::Optimistic { c } => mean + c * self.outcome_sd * unit_sd,
            Exploration::Thompson => {
                let z: f64 = rng.sample(StandardNormal);
                mean + z.clamp(-THOMPSON_TAIL, THOMPSON_TAIL) * self.outcome_sd * unit_sd
            }
        }
    }

    /// The largest value [`LearnerConfig::draw`] can return, so that hopeless candidates need no draw.
    pub(crate) fn upper(&self, mean: f64, unit_sd: f64) -> f64 {
        match self.exploration {
            Exploration::Greedy => mean,
            Exploration::Optimistic { c } => mean + c * self.outcome_sd * unit_sd,
            Exploration::Thompson => mean + THOMPSON_TAIL * self.outcome_sd * unit_sd,
        }
    }
}

/// Thompson draws are truncated at this many standard deviations (a 6e-5 tail), which bounds every draw and lets
/// selection skip candidates that could not win even with the luckiest draw.
const THOMPSON_TAIL: f64 = 4.0;

/// The router's own estimate of one delegate on one skill, treated as a `runtime_observed` claim.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ObservedQuality {
    /// Recency-weighted mean of the verification scores.
    pub mean: f64,
    /// Effective number of outcomes after recency weighting.
    pub weight: f64,
    /// Outcomes ever recorded.
    pub count: u64,
    /// When the latest outcome was recorded.
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_at: Option<OffsetDateTime>,
}

/// Running recency-weighted sums for one delegate and skill.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct ArmStats {
    sum_w: f64,
    sum_wx: f64,
    count: u64,
}

impl ArmStats {
    pub(crate) fn record(&mut self, score: Quality, recency: f64) {
        self.sum_w = self.sum_w * recency + 1.0;
        self.sum_wx = self.sum_wx * recency + score.get();
        self.count += 1;
    }

    pub(crate) fn observed(&self, last_at: Option<OffsetDateTime>) -> Option<ObservedQuality> {
        (self.count > 0 && self.sum_w > 0.0).then(|| ObservedQuality {
            mean: self.sum_wx / self.sum_w,
            weight: self.sum_w,
            count: self.count,
            last_at,
        })
    }
}

/// Who scored an outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "name")]
#[non_exhaustive]
pub enum VerificationSource {
    /// A rule-based validator (schema, length, required fields), by name.
    Validator(String),
    /// A judge delegate, by delegate id.
    Judge(String),
    /// The caller's own score.
    Caller,
}

/// A verified observation of one task's quality (its outcome as judged), fed back with
/// [`crate::Router::record_outcome`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// The delegate that did the task.
    pub delegate_id: String,
    /// The skill the task asked for.
    pub skill: String,
    /// How good the result was judged to be.
    pub score: Quality,
    /// Who judged it.
    pub source: VerificationSource,
}

/// A verification hook: turns a task's output into a quality score, or `None` when it cannot judge.
///
/// Closures `FnMut(&T) -> Option<Quality>` are verifiers, so a rule-based validator is one line; a judge delegate
/// implements it over whatever the transport returns.
pub trait Verifier<T: ?Sized> {
    /// Scores `output`.
    fn verify(&mut self, output: &T) -> Option<Quality>;
}

impl<T: ?Sized, F: FnMut(&T) -> Option<Quality>> Verifier<T> for F {
    fn verify(&mut self, output: &T) -> Option<Quality> {
        self(output)
    }
}
