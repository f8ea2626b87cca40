//! The router: a registry of candidates, the claim policy, the learner and the selection loop, with no IO.

use std::collections::HashMap;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

mod rank;

use crate::learner::{ArmStats, ObservedQuality};
use crate::policy::{CompiledClaim, PolicyClock, unix_seconds};
use crate::{
    Assessment, Candidate, ClaimNote, ClaimPolicy, ClaimType, Decision, Explanation, LearnerConfig, Observation,
    Rejections, RouterError, ScoredCandidate, SelectionRequest,
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

/// One delegate's offer of one skill; its claims for that skill live in the skill table's flat claim list.
#[derive(Debug, Clone)]
struct Entry {
    delegate: u32,
    arm: u32,
    domain: u32,
    jurisdiction: u32,
    claims_start: u32,
    claims_len: u32,
    latency_ms: u64,
    cost_usd: f64,
}

/// Everything selection reads for one skill, laid out contiguously: selection over thousands of candidates is
/// bound by memory traffic, not arithmetic.
#[derive(Debug, Clone, Default)]
struct SkillTable {
    entries: Vec<Entry>,
    claims: Vec<CompiledClaim>,
    /// Claims of removed entries not yet compacted away.
    dead_claims: usize,
    /// Observation statistics per delegate, indexed by `Entry::arm`; kept when a delegate leaves, in case it returns.
    arms: Vec<ArmStats>,
    arm_last_at: Vec<Option<OffsetDateTime>>,
    /// Memoised assessments per arm; an assessment changes only with an outcome, a re-registration, an expiry or
    /// (slowly) with the decay of dated claims.
    memo: Vec<Memo>,
    memo_detail: Vec<Assessment>,
    /// Largest cost and latency among the skill's offers: the balanced strategy's normalisers. They describe the
    /// market for the skill, so a candidate's score does not change with which others a filter removed.
    max_cost: f64,
    max_latency: u64,
    /// A removal may have lowered the maxima; recompute before the next selection.
    scale_dirty: bool,
}

/// The part of an assessment that ranking reads for every candidate, and the half-open interval of unix seconds
/// in which it may be reused; the full [`Assessment`] is kept apart and read only for the ranked few.
#[derive(Debug, Clone, Copy)]
struct Memo {
    mean: f64,
    /// `1 / √strength`, so exploration needs neither a division nor a square root per candidate.
    unit_sd: f64,
    from_s: f64,
    until_s: f64,
}

impl Memo {
    const STALE: Memo = Memo { mean: 0.0, unit_sd: 0.0, from_s: f64::INFINITY, until_s: f64::NEG_INFINITY };
}

impl SkillTable {
    fn claims_of(&self, entry: &Entry) -> &[CompiledClaim] {
        let start = entry.claims_start as usize;
        self.claims.get(start..start + entry.claims_len as usize).unwrap_or(&[])
    }

    fn observed(&self, arm: u32) -> Option<ObservedQuality> {
        let last_at = self.arm_last_at.get(arm as usize).copied().flatten();
        self.arms.get(arm as usize)?.observed(last_at)
    }

    fn remove(&mut self, delegate: u32) {
        let mut dead = 0;
        self.entries.retain(|e| {
            let keep = e.delegate != delegate;
            if !keep {
                dead += e.claims_len as usize;
            }
            keep
        });
        self.dead_claims += dead;
        self.scale_dirty = true;
        if self.dead_claims * 2 > self.claims.len() {
            let mut claims = Vec::with_capacity(self.claims.len() - self.dead_claims);
            for entry in &mut self.entries {
                let start = entry.claims_start as usize;
                let live = self.claims.get(start..start + entry.claims_len as usize).unwrap_or(&[]);
                entry.claims_start = u32::try_from(claims.len()).unwrap_or(u32::MAX);
                claims.extend_from_slice(live);
            }
            self.claims = claims;
            self.dead_claims = 0;
        }
    }
}

/// Brings an arm's memoised assessment up to date at `clock` and returns it.
fn refresh_memo<'m>(
    policy: &ClaimPolicy,
    clock: &PolicyClock,
    entry: &Entry,
    claims: &[CompiledClaim],
    arms: &[ArmStats],
    memo: &'m mut [Memo],
    memo_detail: &mut [Assessment],
) -> Option<&'m Memo> {
    let slot = memo.get_mut(entry.arm as usize)?;
    if !(slot.from_s <= clock.now_s && clock.now_s < slot.until_s) {
        let observed = arms.get(entry.arm as usize).and_then(|a| a.observed(None));
        let start = entry.claims_start as usize;
        let own = claims.get(start..start + entry.claims_len as usize).unwrap_or(&[]);
        let (assessment, until_s) = policy.assess_until(clock, own.iter().copied(), observed.as_ref());
        let unit_sd = 1.0 / assessment.strength.max(f64::MIN_POSITIVE).sqrt();
        *slot = Memo { mean: assessment.mean, unit_sd, from_s: clock.now_s, until_s };
        if let Some(detail) = memo_detail.get_mut(entry.arm as usize) {
            *detail = assessment;
        }
    }
    Some(slot)
}

const NO_ASSESSMENT: Assessment =
    Assessment { mean: 0.0, strength: 0.0, basis: None, self_claim_ignored: false, expired_claims: 0 };

/// One ranked candidate of a selection.
#[derive(Debug, Clone, Copy)]
struct Row {
    entry: usize,
    drawn: f64,
    score: f64,
    tiebreak: f64,
}

impl Row {
    fn beats(&self, other: &Row) -> bool {
        (self.score, self.tiebreak) > (other.score, other.tiebreak)
    }
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
    /// Each delegate's explanation notes; read only for the few ranked candidates of a decision.
    delegate_notes: Vec<Vec<ClaimNote>>,
    skills: Interner,
    tables: Vec<SkillTable>,
    /// (delegate, skill) to the arm index within that skill's table.
    arm_index: HashMap<(u32, u32), u32>,
    domains: Interner,
    jurisdictions: Interner,
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
            delegate_notes: Vec::new(),
            skills: Interner::default(),
            tables: Vec::new(),
            arm_index: HashMap::new(),
            domains: Interner::default(),
            jurisdictions: Interner::default(),
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
            if self.tables.len() <= skill as usize {
                self.tables.resize_with(skill as usize + 1, SkillTable::default);
            }
            let Some(table) = self.tables.get_mut(skill as usize) else { continue };
            let next_arm = u32::try_from(table.arms.len()).unwrap_or(NONE - 1);
            let arm = *self.arm_index.entry((delegate, skill)).or_insert(next_arm);
            if arm == next_arm {
                table.arms.push(ArmStats::default());
                table.arm_last_at.push(None);
                table.memo.push(Memo::STALE);
                table.memo_detail.push(NO_ASSESSMENT);
            }
            if let Some(memo) = table.memo.get_mut(arm as usize) {
                *memo = Memo::STALE;
            }
            let claims_start = u32::try_from(table.claims.len()).unwrap_or(NONE);
            table.claims.extend(candidate.claims.iter().filter(|c| c.skill == offer.skill).map(CompiledClaim::new));
            let claims_len = u32::try_from(table.claims.len()).unwrap_or(NONE).saturating_sub(claims_start);
            table.max_cost = table.max_cost.max(offer.cost_usd);
            table.max_latency = table.max_latency.max(offer.latency_ms);
            table.entries.push(Entry {
                delegate,
                arm,
                domain,
                jurisdiction,
                claims_start,
                claims_len,
                latency_ms: offer.latency_ms,
                cost_usd: offer.cost_usd,
            });
            skills.push(skill);
        }
        if self.delegate_skills.len() <= delegate as usize {
            self.delegate_skills.resize_with(delegate as usize + 1, Vec::new);
        }
        if let Some(slot) = self.delegate_skills.get_mut(delegate as usize) {
            *slot = skills;
        }
        if self.delegate_notes.len() <= delegate as usize {
            self.delegate_notes.resize_with(delegate as usize + 1, Vec::new);
        }
        if let Some(slot) = self.delegate_notes.get_mut(delegate as usize) {
            slot.clone_from(&candidate.notes);
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
        if let Some(notes) = self.delegate_notes.get_mut(delegate as usize) {
            notes.clear();
        }
        for &skill in &skills {
            if let Some(table) = self.tables.get_mut(skill as usize) {
                table.remove(delegate);
            }
        }
        !skills.is_empty()
    }

    /// Number of registered delegate-skill offers.
    pub fn offers(&self) -> usize {
        self.tables.iter().map(|t| t.entries.len()).sum()
    }

    /// Feeds back a verified outcome; returns the updated runtime-observed estimate.
    pub fn record_outcome(
        &mut self,
        outcome: &Observation,
        now: OffsetDateTime,
    ) -> Result<ObservedQuality, RouterError> {
        let unknown =
            || RouterError::UnknownDelegate { delegate_id: outcome.delegate_id.clone(), skill: outcome.skill.clone() };
        let delegate = self.delegates.get(&outcome.delegate_id).ok_or_else(unknown)?;
        let skill = self.skills.get(&outcome.skill).ok_or_else(unknown)?;
        let arm = *self.arm_index.get(&(delegate, skill)).ok_or_else(unknown)?;
        let table = self.tables.get_mut(skill as usize).ok_or_else(unknown)?;
        table.arms.get_mut(arm as usize).ok_or_else(unknown)?.record(outcome.score, self.config.learner.recency);
        if let Some(last_at) = table.arm_last_at.get_mut(arm as usize) {
            *last_at = Some(now);
        }
        if let Some(memo) = table.memo.get_mut(arm as usize) {
            *memo = Memo::STALE;
        }
        table.observed(arm).ok_or_else(unknown)
    }

    /// The runtime-observed estimate of a delegate on a skill, if any outcome was recorded.
    pub fn observed(&self, delegate_id: &str, skill: &str) -> Option<ObservedQuality> {
        let skill = self.skills.get(skill)?;
        let arm = self.arm_index.get(&(self.delegates.get(delegate_id)?, skill))?;
        self.tables.get(skill as usize)?.observed(*arm)
    }

    /// The policy's assessment of a registered delegate on a skill at `now`, without exploration.
    pub fn assess(&self, delegate_id: &str, skill: &str, now: OffsetDateTime) -> Result<Assessment, RouterError> {
        let unknown = || RouterError::UnknownDelegate { delegate_id: delegate_id.to_owned(), skill: skill.to_owned() };
        let delegate = self.delegates.get(delegate_id).ok_or_else(unknown)?;
        let skill_id = self.skills.get(skill).ok_or_else(unknown)?;
        let table = self.tables.get(skill_id as usize).ok_or_else(unknown)?;
        let entry = table.entries.iter().find(|e| e.delegate == delegate).ok_or_else(unknown)?;
        let clock = self.config.policy.clock(unix_seconds(now));
        let observed = table.observed(entry.arm);
        Ok(self.config.policy.assess_with(&clock, table.claims_of(entry).iter().copied(), observed.as_ref()))
    }

    /// Picks one delegate for `request` at `now`, with the explanation of the choice.
    ///
    /// Balanced scores normalise cost and latency by the largest among all registered offers of the skill, so a
    /// candidate's score does not depend on which others the filters removed.
    pub fn select(&mut self, request: &SelectionRequest, now: OffsetDateTime) -> Result<Decision, RouterError> {
        let table = self
            .skills
            .get(&request.skill)
            .map(|s| s as usize)
            .filter(|&s| self.tables.get(s).is_some_and(|t| !t.entries.is_empty()))
            .ok_or_else(|| RouterError::UnknownSkill(request.skill.clone()))?;
        let filter = self.filter(request);
        let clock = self.config.policy.clock(unix_seconds(now));
        let Router { config, rng, tables, .. } = self;
        let Some(skill_table) = tables.get_mut(table) else {
            return Err(RouterError::UnknownSkill(request.skill.clone()));
        };
        let ranked = rank::rank(config, rng, skill_table, request, &filter, &clock);
        self.explain(request, table, ranked)
    }

    /// The filter step: the request's filters resolved to interned ids. Names the router has never seen cannot
    /// match anything, so they drop out of the filter sets.
    fn filter(&self, request: &SelectionRequest) -> Filter {
        Filter {
            domains: request.trust_domains.as_ref().map(|d| ids(&self.domains, d)),
            jurisdictions: request.jurisdictions.as_ref().map(|j| ids(&self.jurisdictions, j)),
            excluded: ids(&self.delegates, &request.exclude),
            ceiling: request.max_cost_usd.unwrap_or(f64::INFINITY),
        }
    }

    /// The explain step: the kept ranking as candidates with their assessments and notes, and the decision (the
    /// first of them), or why no candidate was eligible.
    fn explain(&self, request: &SelectionRequest, table: usize, ranked: rank::Ranked) -> Result<Decision, RouterError> {
        let rank::Ranked { top, eligible, rejected, pool_has_better } = ranked;
        let Some(SkillTable { entries, memo_detail, .. }) = self.tables.get(table) else {
            return Err(RouterError::UnknownSkill(request.skill.clone()));
        };
        let policy = &self.config.policy;
        let ranking: Vec<ScoredCandidate> = top
            .iter()
            .filter_map(|row| {
                let entry = entries.get(row.entry)?;
                Some(ScoredCandidate {
                    delegate_id: self.delegates.name(entry.delegate).to_owned(),
                    score: row.score,
                    quality_drawn: row.drawn,
                    assessment: match memo_detail.get(entry.arm as usize) {
                        Some(a) if pool_has_better && a.basis == Some(ClaimType::SelfClaimed) => Assessment {
                            mean: policy.prior_mean,
                            strength: policy.prior_strength,
                            basis: None,
                            self_claim_ignored: true,
                            expired_claims: a.expired_claims,
                        },
                        Some(a) => *a,
                        None => NO_ASSESSMENT,
                    },
                    cost_usd: entry.cost_usd,
                    latency_ms: entry.latency_ms,
                    notes: self.notes(entry.delegate, &request.skill),
                })
            })
            .collect();
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

    /// A delegate's explanation notes that apply to `skill`.
    fn notes(&self, delegate: u32, skill: &str) -> Vec<ClaimNote> {
        self.delegate_notes
            .get(delegate as usize)
            .map(|notes| notes.iter().filter(|n| n.skill.as_deref().is_none_or(|s| s == skill)).cloned().collect())
            .unwrap_or_default()
    }
}

/// The request's filters, resolved to interned ids.
struct Filter {
    domains: Option<Vec<u32>>,
    jurisdictions: Option<Vec<u32>>,
    excluded: Vec<u32>,
    ceiling: f64,
}

#[derive(Debug, Clone, Copy)]
enum Reject {
    Excluded,
    TrustDomain,
    Jurisdiction,
    Budget,
}

impl Reject {
    fn counter(self, r: &mut Rejections) -> &mut usize {
        match self {
            Reject::Excluded => &mut r.excluded,
            Reject::TrustDomain => &mut r.trust_domain,
            Reject::Jurisdiction => &mut r.jurisdiction,
            Reject::Budget => &mut r.budget,
        }
    }
}

impl Filter {
    fn is_empty(&self) -> bool {
        self.excluded.is_empty()
            && self.domains.is_none()
            && self.jurisdictions.is_none()
            && self.ceiling == f64::INFINITY
    }

    // Inlined: a call per candidate costs as much as the comparisons themselves.
    #[inline(always)]
    fn check(&self, entry: &Entry) -> Result<(), Reject> {
        if self.excluded.contains(&entry.delegate) {
            Err(Reject::Excluded)
        } else if self.domains.as_ref().is_some_and(|d| !d.contains(&entry.domain)) {
            Err(Reject::TrustDomain)
        } else if self.jurisdictions.as_ref().is_some_and(|j| !j.contains(&entry.jurisdiction)) {
            Err(Reject::Jurisdiction)
        } else if entry.cost_usd > self.ceiling {
            Err(Reject::Budget)
        } else {
            Ok(())
        }
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
