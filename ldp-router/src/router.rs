//! The router: a registry of candidates, the claim policy, the learner and the selection loop, with no IO.

use std::collections::HashMap;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::learner::{ArmStats, ObservedQuality};
use crate::policy::{CompiledClaim, unix_seconds};
use crate::select::{BalancedWeights, ExplainDepth};
use crate::{
    Assessment, Candidate, ClaimPolicy, Decision, Explanation, LearnerConfig, Outcome, Rejections, RouterError,
    ScoredCandidate, SelectionRequest, Strategy,
};

/// Everything that shapes the router's decisions, including the seed of its randomness.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RouterConfig {
    /// How claims and observations are weighed.
    pub policy: ClaimPolicy,
    /// How outcomes are aggregated and how much the router explores.
    pub learner: LearnerConfig,
}

const NONE: u32 = u32::MAX;
/// Up to this explanation depth the ranking is kept by insertion rather than by sorting every row.
const SHORT_LIST: usize = 16;

/// One delegate's offer of one skill, with its claims for that skill compiled.
#[derive(Debug, Clone)]
struct Entry {
    delegate: u32,
    arm: u32,
    domain: u32,
    jurisdiction: u32,
    cost_usd: f64,
    latency_ms: u64,
    claims: Box<[CompiledClaim]>,
}

/// Scratch row of one selection.
#[derive(Debug, Clone, Copy)]
struct Row {
    entry: u32,
    assessment: Assessment,
    drawn: f64,
    score: f64,
    tiebreak: f64,
}

#[derive(Debug, Default, Clone)]
struct Interner {
    index: HashMap<String, u32>,
    names: Vec<String>,
}

impl Interner {
    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.index.get(name) {
            return id;
        }
        // Ids are dense indexes; more than u32::MAX - 1 distinct names cannot fit in memory anyway.
        let id = u32::try_from(self.names.len()).unwrap_or(NONE - 1);
        self.names.push(name.to_owned());
        self.index.insert(name.to_owned(), id);
        id
    }

    fn get(&self, name: &str) -> Option<u32> {
        self.index.get(name).copied()
    }

    fn name(&self, id: u32) -> &str {
        self.names.get(id as usize).map_or("", String::as_str)
    }
}

/// Identity-aware router: register [`Candidate`]s, [`select`](Router::select) one per task,
/// [`record_outcome`](Router::record_outcome) when a verifier has scored the result.
///
/// Calling order: `upsert`/`remove` whenever discovery changes the pool; for each task `select`, then after the
/// task `record_outcome` (or nothing, if no verifier scored it). Time is always an argument; the router never reads
/// a clock, and all randomness comes from [`LearnerConfig::seed`].
#[derive(Debug, Clone)]
pub struct Router {
    config: RouterConfig,
    rng: ChaCha8Rng,
    delegates: Interner,
    /// Skills each delegate is registered for, so re-registration replaces rather than accumulates.
    delegate_skills: Vec<Vec<u32>>,
    skills: Interner,
    entries: Vec<Vec<Entry>>,
    arms: Vec<ArmStats>,
    arm_index: HashMap<(u32, u32), u32>,
    domains: Interner,
    jurisdictions: Interner,
    rows: Vec<Row>,
}

impl Router {
    /// A router with no candidates.
    pub fn new(config: RouterConfig) -> Result<Self, RouterError> {
        config.policy.validate()?;
        config.learner.validate()?;
        Ok(Router {
            rng: ChaCha8Rng::seed_from_u64(config.learner.seed),
            config,
            delegates: Interner::default(),
            delegate_skills: Vec::new(),
            skills: Interner::default(),
            entries: Vec::new(),
            arms: Vec::new(),
            arm_index: HashMap::new(),
            domains: Interner::default(),
            jurisdictions: Interner::default(),
            rows: Vec::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &RouterConfig {
        &self.config
    }

    /// Registers `candidate`, replacing any earlier registration of the same delegate. Observed outcomes survive
    /// re-registration; claims for skills the candidate does not offer are dropped.
    pub fn upsert(&mut self, candidate: &Candidate) -> Result<(), RouterError> {
        validate(candidate)?;
        let delegate = self.delegates.intern(&candidate.delegate_id);
        self.unregister(delegate);
        let domain = self.domains.intern(&candidate.trust_domain);
        let jurisdiction = candidate.jurisdiction.as_deref().map_or(NONE, |j| self.jurisdictions.intern(j));
        let mut skills = Vec::with_capacity(candidate.skills.len());
        for offer in &candidate.skills {
            let skill = self.skills.intern(&offer.skill);
            if self.entries.len() <= skill as usize {
                self.entries.resize_with(skill as usize + 1, Vec::new);
            }
            let next_arm = u32::try_from(self.arms.len()).unwrap_or(NONE - 1);
            let arm = *self.arm_index.entry((delegate, skill)).or_insert(next_arm);
            if arm == next_arm {
                self.arms.push(ArmStats::default());
            }
            let claims = candidate.claims.iter().filter(|c| c.skill == offer.skill).map(CompiledClaim::new).collect();
            if let Some(list) = self.entries.get_mut(skill as usize) {
                list.push(Entry {
                    delegate,
                    arm,
                    domain,
                    jurisdiction,
                    cost_usd: offer.cost_usd,
                    latency_ms: offer.latency_ms,
                    claims,
                });
            }
            skills.push(skill);
        }
        if self.delegate_skills.len() <= delegate as usize {
            self.delegate_skills.resize_with(delegate as usize + 1, Vec::new);
        }
        if let Some(slot) = self.delegate_skills.get_mut(delegate as usize) {
            *slot = skills;
        }
        Ok(())
    }

    /// Unregisters a delegate; returns whether it was registered. Its observed outcomes are kept in case it
    /// comes back.
    pub fn remove(&mut self, delegate_id: &str) -> bool {
        match self.delegates.get(delegate_id) {
            Some(delegate) => self.unregister(delegate),
            None => false,
        }
    }

    fn unregister(&mut self, delegate: u32) -> bool {
        let Some(skills) = self.delegate_skills.get_mut(delegate as usize) else {
            return false;
        };
        let skills = std::mem::take(skills);
        for &skill in &skills {
            if let Some(list) = self.entries.get_mut(skill as usize) {
                list.retain(|e| e.delegate != delegate);
            }
        }
        !skills.is_empty()
    }

    /// Number of registered delegate-skill offers.
    pub fn offers(&self) -> usize {
        self.entries.iter().map(Vec::len).sum()
    }

    /// Feeds back a verified outcome; returns the updated runtime-observed estimate.
    pub fn record_outcome(&mut self, outcome: &Outcome, now: OffsetDateTime) -> Result<ObservedQuality, RouterError> {
        let unknown =
            || RouterError::UnknownDelegate { delegate_id: outcome.delegate_id.clone(), skill: outcome.skill.clone() };
        let delegate = self.delegates.get(&outcome.delegate_id).ok_or_else(unknown)?;
        let skill = self.skills.get(&outcome.skill).ok_or_else(unknown)?;
        let arm = *self.arm_index.get(&(delegate, skill)).ok_or_else(unknown)?;
        let stats = self.arms.get_mut(arm as usize).ok_or_else(unknown)?;
        stats.record(outcome.score, self.config.learner.recency, now);
        stats.observed().ok_or_else(unknown)
    }

    /// The runtime-observed estimate of a delegate on a skill, if any outcome was recorded.
    pub fn observed(&self, delegate_id: &str, skill: &str) -> Option<ObservedQuality> {
        let arm = self.arm_index.get(&(self.delegates.get(delegate_id)?, self.skills.get(skill)?))?;
        self.arms.get(*arm as usize)?.observed()
    }

    /// The policy's assessment of a registered delegate on a skill at `now`, without exploration.
    pub fn assess(&self, delegate_id: &str, skill: &str, now: OffsetDateTime) -> Result<Assessment, RouterError> {
        let unknown = || RouterError::UnknownDelegate { delegate_id: delegate_id.to_owned(), skill: skill.to_owned() };
        let delegate = self.delegates.get(delegate_id).ok_or_else(unknown)?;
        let skill_id = self.skills.get(skill).ok_or_else(unknown)?;
        let entry = self
            .entries
            .get(skill_id as usize)
            .and_then(|list| list.iter().find(|e| e.delegate == delegate))
            .ok_or_else(unknown)?;
        Ok(self.assess_entry(entry, unix_seconds(now)))
    }

    fn assess_entry(&self, entry: &Entry, now_s: f64) -> Assessment {
        let observed = self.arms.get(entry.arm as usize).and_then(ArmStats::observed);
        self.config.policy.assess_compiled(entry.claims.iter().copied(), observed.as_ref(), now_s)
    }

    /// Picks one delegate for `request` at `now`, with the explanation of the choice.
    pub fn select(&mut self, request: &SelectionRequest, now: OffsetDateTime) -> Result<Decision, RouterError> {
        let skill_id = self.skills.get(&request.skill);
        let entries = match skill_id.and_then(|s| self.entries.get(s as usize)) {
            Some(list) if !list.is_empty() => list,
            _ => return Err(RouterError::UnknownSkill(request.skill.clone())),
        };
        // Names the router has never seen cannot match anything, so they simply drop out of the filter sets.
        let domains = request.trust_domains.as_ref().map(|d| ids(&self.domains, d));
        let jurisdictions = request.jurisdictions.as_ref().map(|j| ids(&self.jurisdictions, j));
        let excluded = ids(&self.delegates, &request.exclude);
        let ceiling = request.max_cost_usd.unwrap_or(f64::INFINITY);
        let floor = request.min_quality.unwrap_or(f64::NEG_INFINITY);
        let now_s = unix_seconds(now);

        let mut rows = std::mem::take(&mut self.rows);
        rows.clear();
        let mut rejected = Rejections::default();
        let (mut max_cost, mut max_latency) = (0.0_f64, 0_u64);
        for (index, entry) in entries.iter().enumerate() {
            if excluded.contains(&entry.delegate) {
                rejected.excluded += 1;
            } else if domains.as_ref().is_some_and(|d| !d.contains(&entry.domain)) {
                rejected.trust_domain += 1;
            } else if jurisdictions.as_ref().is_some_and(|j| !j.contains(&entry.jurisdiction)) {
                rejected.jurisdiction += 1;
            } else if entry.cost_usd > ceiling {
                rejected.budget += 1;
            } else {
                let assessment = self.assess_entry(entry, now_s);
                if assessment.mean < floor {
                    rejected.min_quality += 1;
                    continue;
                }
                let drawn = self.config.learner.draw(assessment.mean, assessment.strength, &mut self.rng);
                max_cost = max_cost.max(entry.cost_usd);
                max_latency = max_latency.max(entry.latency_ms);
                let entry = u32::try_from(index).unwrap_or(NONE);
                rows.push(Row { entry, assessment, drawn, score: 0.0, tiebreak: 0.0 });
            }
        }
        if rows.is_empty() {
            self.rows = rows;
            return Err(RouterError::NoEligibleDelegate { skill: request.skill.clone(), rejected });
        }

        let weights = match request.strategy {
            Strategy::Balanced => BalancedWeights::default(),
            Strategy::Weighted(w) => w,
            _ => BalancedWeights { quality: 1.0, cost: 0.0, latency: 0.0 },
        };
        let inv_cost = if max_cost > 0.0 { 1.0 / max_cost } else { 0.0 };
        let inv_latency = if max_latency > 0 { 1.0 / max_latency as f64 } else { 0.0 };
        let keep = match request.explain {
            ExplainDepth::Top(n) => n.max(1),
            ExplainDepth::All => rows.len(),
        };
        for row in rows.iter_mut() {
            let Some(entry) = entries.get(row.entry as usize) else { continue };
            (row.score, row.tiebreak) = match request.strategy {
                Strategy::Cost => (-entry.cost_usd, row.drawn),
                Strategy::Latency => (-(entry.latency_ms as f64), row.drawn),
                Strategy::Quality | Strategy::Balanced | Strategy::Weighted(_) => (
                    weights.quality * row.drawn
                        - weights.cost * entry.cost_usd * inv_cost
                        - weights.latency * entry.latency_ms as f64 * inv_latency,
                    0.0,
                ),
            };
        }
        // Best first; equal scores keep registration order so that decisions are reproducible.
        let better = |a: &Row, b: &Row| (b.score, b.tiebreak).partial_cmp(&(a.score, a.tiebreak));
        let top: Vec<usize> = if keep <= SHORT_LIST {
            // A short insertion list beats sorting thousands of rows.
            let mut top: Vec<usize> = Vec::with_capacity(keep + 1);
            for (i, row) in rows.iter().enumerate() {
                let key = (row.score, row.tiebreak);
                let beats = |j: &usize| rows.get(*j).is_none_or(|r| key > (r.score, r.tiebreak));
                let position = top.iter().position(beats).unwrap_or(top.len());
                if position < keep {
                    top.insert(position, i);
                    top.truncate(keep);
                }
            }
            top
        } else {
            let mut order: Vec<usize> = (0..rows.len()).collect();
            order.sort_by(|&a, &b| match (rows.get(a), rows.get(b)) {
                (Some(x), Some(y)) => better(x, y).unwrap_or(std::cmp::Ordering::Equal),
                _ => std::cmp::Ordering::Equal,
            });
            order.truncate(keep);
            order
        };

        let ranking: Vec<ScoredCandidate> = top
            .iter()
            .filter_map(|&i| rows.get(i))
            .filter_map(|row| {
                let entry = entries.get(row.entry as usize)?;
                Some(ScoredCandidate {
                    delegate_id: self.delegates.name(entry.delegate).to_owned(),
                    score: row.score,
                    quality_drawn: row.drawn,
                    assessment: row.assessment,
                    cost_usd: entry.cost_usd,
                    latency_ms: entry.latency_ms,
                })
            })
            .collect();
        let eligible = rows.len();
        self.rows = rows;
        let chosen = ranking
            .first()
            .cloned()
            .ok_or_else(|| RouterError::NoEligibleDelegate { skill: request.skill.clone(), rejected })?;
        Ok(Decision {
            delegate_id: chosen.delegate_id.clone(),
            skill: request.skill.clone(),
            strategy: request.strategy,
            chosen,
            explanation: Explanation { considered: entries.len(), eligible, rejected, ranking },
        })
    }
}

fn ids(interner: &Interner, names: &[String]) -> Vec<u32> {
    names.iter().filter_map(|n| interner.get(n)).collect()
}

fn validate(candidate: &Candidate) -> Result<(), RouterError> {
    if candidate.delegate_id.is_empty() {
        return Err(RouterError::EmptyName("delegate_id"));
    }
    if candidate.trust_domain.is_empty() {
        return Err(RouterError::EmptyName("trust_domain"));
    }
    for (i, offer) in candidate.skills.iter().enumerate() {
        if offer.skill.is_empty() {
            return Err(RouterError::EmptyName("skill"));
        }
        if !(offer.cost_usd.is_finite() && offer.cost_usd >= 0.0) {
            return Err(RouterError::InvalidFigure { field: "cost_usd", value: offer.cost_usd });
        }
        if candidate.skills.iter().take(i).any(|o| o.skill == offer.skill) {
            return Err(RouterError::DuplicateSkill {
                delegate_id: candidate.delegate_id.clone(),
                skill: offer.skill.clone(),
            });
        }
    }
    Ok(())
}
