//! Selection requests and the decisions that explain themselves.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Assessment, ClaimNote, ClaimType};

/// Relative weights of the balanced strategy; costs and latencies are normalised by the largest among the
/// registered offers of the skill, so each term lies in `[0, 1]` and a candidate's score does not depend on which
/// others a filter removed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BalancedWeights {
    /// Weight of estimated quality.
    pub quality: f64,
    /// Weight of (normalised) cost, subtracted.
    pub cost: f64,
    /// Weight of (normalised) latency, subtracted.
    pub latency: f64,
}

impl Default for BalancedWeights {
    fn default() -> Self {
        BalancedWeights { quality: 0.6, cost: 0.2, latency: 0.2 }
    }
}

/// What "best" means for a selection.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Strategy {
    /// Highest quality (with exploration).
    Quality,
    /// Cheapest; quality breaks ties.
    Cost,
    /// Fastest; quality breaks ties.
    Latency,
    /// A weighted trade-off of quality, cost and latency.
    #[default]
    Balanced,
    /// Balanced with explicit weights.
    Weighted(BalancedWeights),
}

impl Strategy {
    /// The name used in explanations and on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            Strategy::Quality => "quality",
            Strategy::Cost => "cost",
            Strategy::Latency => "latency",
            Strategy::Balanced => "balanced",
            Strategy::Weighted(_) => "weighted",
        }
    }
}

/// How much of the ranking a decision keeps for its explanation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ExplainDepth {
    /// The best `n` eligible candidates (the winner first).
    Top(usize),
    /// Every eligible candidate; costs an allocation per candidate.
    All,
}

impl Default for ExplainDepth {
    fn default() -> Self {
        ExplainDepth::Top(3)
    }
}

/// A request to pick one delegate for one task.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SelectionRequest {
    /// The skill the task needs.
    pub skill: String,
    /// What to optimise.
    pub strategy: Strategy,
    /// Accept only these trust domains; `None` accepts any.
    pub trust_domains: Option<Vec<String>>,
    /// Accept only these jurisdictions (a delegate that states none is then rejected); `None` accepts any.
    pub jurisdictions: Option<Vec<String>>,
    /// Budget ceiling: reject delegates whose estimated cost per task exceeds it.
    pub max_cost_usd: Option<f64>,
    /// Reject delegates whose estimated quality (before exploration) is below this.
    pub min_quality: Option<f64>,
    /// Never pick these delegates (for example, ones that just failed).
    pub exclude: Vec<String>,
    /// How much of the ranking to keep.
    pub explain: ExplainDepth,
}

impl SelectionRequest {
    /// A request for `skill` with the balanced strategy and no filters.
    pub fn new(skill: impl Into<String>) -> Self {
        SelectionRequest { skill: skill.into(), ..SelectionRequest::default() }
    }

    /// Sets the strategy.
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// Accepts `domain` (call again to accept several).
    pub fn trust_domain(mut self, domain: impl Into<String>) -> Self {
        self.trust_domains.get_or_insert_with(Vec::new).push(domain.into());
        self
    }

    /// Accepts `jurisdiction` (call again to accept several).
    pub fn jurisdiction(mut self, jurisdiction: impl Into<String>) -> Self {
        self.jurisdictions.get_or_insert_with(Vec::new).push(jurisdiction.into());
        self
    }

    /// Sets the budget ceiling per task.
    pub fn max_cost_usd(mut self, ceiling: f64) -> Self {
        self.max_cost_usd = Some(ceiling);
        self
    }

    /// Sets the quality floor.
    pub fn min_quality(mut self, floor: f64) -> Self {
        self.min_quality = Some(floor);
        self
    }

    /// Excludes a delegate.
    pub fn exclude(mut self, delegate_id: impl Into<String>) -> Self {
        self.exclude.push(delegate_id.into());
        self
    }

    /// Sets the explanation depth.
    pub fn explain(mut self, depth: ExplainDepth) -> Self {
        self.explain = depth;
        self
    }
}

/// How many candidates each filter turned away, checked in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Rejections {
    /// Named in the request's `exclude`.
    pub excluded: usize,
    /// Outside the accepted trust domains.
    pub trust_domain: usize,
    /// Outside the accepted jurisdictions.
    pub jurisdiction: usize,
    /// Above the budget ceiling.
    pub budget: usize,
    /// Estimated quality below the floor.
    pub min_quality: usize,
}

impl Rejections {
    /// All rejected candidates.
    pub fn total(&self) -> usize {
        self.excluded + self.trust_domain + self.jurisdiction + self.budget + self.min_quality
    }
}

impl fmt::Display for Rejections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts = [
            ("excluded", self.excluded),
            ("trust domain", self.trust_domain),
            ("jurisdiction", self.jurisdiction),
            ("over budget", self.budget),
            ("below quality floor", self.min_quality),
        ];
        let mut first = true;
        for (name, n) in parts.into_iter().filter(|(_, n)| *n > 0) {
            write!(f, "{}{n} {name}", if first { "" } else { ", " })?;
            first = false;
        }
        if first {
            f.write_str("none rejected")?;
        }
        Ok(())
    }
}

/// One candidate's scores in a decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoredCandidate {
    /// The delegate.
    pub delegate_id: String,
    /// The strategy's score; higher is better.
    pub score: f64,
    /// The quality used for ranking: the estimate plus exploration.
    pub quality_drawn: f64,
    /// The policy's assessment behind it.
    pub assessment: Assessment,
    /// Estimated cost per task.
    pub cost_usd: f64,
    /// Median latency.
    pub latency_ms: u64,
    /// The candidate's notes for this skill (or for the whole delegate): evidence that was set aside and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<ClaimNote>,
}

impl fmt::Display for ScoredCandidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let basis = self.assessment.basis.map_or("no evidence", ClaimType::as_str);
        write!(
            f,
            "{} score {:.3} (quality {:.3} drawn, {:.3} estimated from {basis}, weight {:.1}{}; ${:.4}, {} ms)",
            self.delegate_id,
            self.score,
            self.quality_drawn,
            self.assessment.mean,
            self.assessment.strength,
            if self.assessment.self_claim_ignored { ", self-claim ignored" } else { "" },
            self.cost_usd,
            self.latency_ms,
        )?;
        for note in &self.notes {
            write!(f, "; note: {}", note.text)?;
        }
        Ok(())
    }
}

/// Why a decision came out as it did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// Registered delegates offering the skill.
    pub considered: usize,
    /// Those that passed every filter.
    pub eligible: usize,
    /// What the filters rejected.
    pub rejected: Rejections,
    /// The best eligible candidates, best first, as deep as the request asked.
    pub ranking: Vec<ScoredCandidate>,
}

/// The router's choice for one task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// The chosen delegate.
    pub delegate_id: String,
    /// The skill it was chosen for.
    pub skill: String,
    /// The strategy used.
    pub strategy: Strategy,
    /// The winner's scores (also `explanation.ranking[0]`).
    pub chosen: ScoredCandidate,
    /// Candidates, scores and filters behind the choice.
    pub explanation: Explanation,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &self.explanation;
        writeln!(f, "skill {:?}, strategy {}: chose {}", self.skill, self.strategy.name(), self.chosen)?;
        write!(f, "{} offered the skill, {} eligible ({})", e.considered, e.eligible, e.rejected)?;
        for (rank, c) in e.ranking.iter().enumerate().skip(1) {
            write!(f, "\n  #{} {c}", rank + 1)?;
        }
        Ok(())
    }
}
