//! The rank step of [`Router::select`](crate::Router::select): the candidates of one skill that pass the filter and
//! the quality floor, scored by the request's strategy with a quality drawn for exploration, the best kept.

use std::cmp::Ordering;

use rand_chacha::ChaCha8Rng;

use crate::policy::{CompiledClaim, PolicyClock};
use crate::select::{BalancedWeights, ExplainDepth};
use crate::{Assessment, ClaimType, Rejections, SelectionRequest, SelfClaimedRule, Strategy};

use super::{Filter, Memo, RouterConfig, Row, SHORT_LIST, SkillTable, refresh_memo};

/// What the rank step hands the explain step.
pub(super) struct Ranked {
    /// The kept rows, best first.
    pub(super) top: Vec<Row>,
    /// Candidates that passed every filter and the quality floor.
    pub(super) eligible: usize,
    /// Why the others did not.
    pub(super) rejected: Rejections,
    /// Whether self-claim-only candidates were judged by the prior (the pool had third-party evidence).
    pub(super) pool_has_better: bool,
}

/// How much quality, cost and latency count under `strategy` (the single-criterion strategies rank by quality here;
/// cost and latency are their primary key in [`rank`]).
fn weights(strategy: Strategy) -> BalancedWeights {
    match strategy {
        Strategy::Balanced => BalancedWeights::default(),
        Strategy::Weighted(w) => w,
        Strategy::Quality | Strategy::Cost | Strategy::Latency => {
            BalancedWeights { quality: 1.0, cost: 0.0, latency: 0.0 }
        }
    }
}

/// Whether self-claim-only candidates are judged by the prior: under the pool-wide self-claim rule, when an eligible
/// candidate rests on third-party evidence (attested or benchmarked). Runtime observations alone do not trigger it:
/// honest self-claims still guide exploration until outcomes replace them, which the paradox experiment shows to be
/// the better trade.
fn pool_has_better(config: &RouterConfig, clock: &PolicyClock, filter: &Filter, table: &mut SkillTable) -> bool {
    let policy = &config.policy;
    // Cheap gate first: without a live third-party claim in the skill's table there is nothing to find.
    let third_party = |c: &CompiledClaim| {
        matches!(c.kind, ClaimType::IssuerAttested | ClaimType::ExternallyBenchmarked) && c.expires_s > clock.now_s
    };
    if policy.self_claimed != SelfClaimedRule::IgnoreWhenPoolHasBetter || !table.claims.iter().any(third_party) {
        return false;
    }
    let unfiltered = filter.is_empty();
    let SkillTable { entries, claims, arms, memo, memo_detail, .. } = table;
    for entry in entries.iter() {
        if !unfiltered && filter.check(entry).is_err() {
            continue;
        }
        refresh_memo(policy, clock, entry, claims, arms, memo, memo_detail);
        let basis = memo_detail.get(entry.arm as usize).and_then(|a| a.basis);
        if basis.is_some_and(|b| matches!(b, ClaimType::IssuerAttested | ClaimType::ExternallyBenchmarked)) {
            return true;
        }
    }
    false
}

/// Assesses, draws and ranks the candidates of `table` that pass `filter` and the request's quality floor, keeping
/// only the best the request's explanation depth asks for.
pub(super) fn rank(
    config: &RouterConfig,
    rng: &mut ChaCha8Rng,
    table: &mut SkillTable,
    request: &SelectionRequest,
    filter: &Filter,
    clock: &PolicyClock,
) -> Ranked {
    let weights = weights(request.strategy);
    let floor = request.min_quality.unwrap_or(f64::NEG_INFINITY);
    if table.scale_dirty {
        table.max_cost = table.entries.iter().map(|e| e.cost_usd).fold(0.0, f64::max);
        table.max_latency = table.entries.iter().map(|e| e.latency_ms).max().unwrap_or(0);
        table.scale_dirty = false;
    }
    let cost_scale = if table.max_cost > 0.0 { weights.cost / table.max_cost } else { 0.0 };
    let latency_scale = if table.max_latency > 0 { weights.latency / table.max_latency as f64 } else { 0.0 };
    let keep = match request.explain {
        ExplainDepth::Top(n) => n.max(1),
        ExplainDepth::All => usize::MAX,
    };
    let pool_has_better = pool_has_better(config, clock, filter, table);
    let policy = &config.policy;
    let prior = Memo {
        mean: policy.prior_mean,
        unit_sd: 1.0 / policy.prior_strength.max(f64::MIN_POSITIVE).sqrt(),
        from_s: 0.0,
        until_s: 0.0,
    };
    let self_only = |detail: Option<&Assessment>| detail.is_some_and(|a| a.basis == Some(ClaimType::SelfClaimed));
    let unfiltered = filter.is_empty();
    let SkillTable { entries, claims, arms, memo, memo_detail, .. } = table;
    let (entries, claims, arms) = (&*entries, &*claims, &*arms);
    let learner = &config.learner;
    let mut rejected = Rejections::default();
    let mut eligible = 0;
    let mut top: Vec<Row> = Vec::with_capacity(keep.min(entries.len()).min(SHORT_LIST) + 1);
    for (index, entry) in entries.iter().enumerate() {
        if !unfiltered && let Err(reason) = filter.check(entry) {
            *reason.counter(&mut rejected) += 1;
            continue;
        }
        let Some(&slot) = refresh_memo(policy, clock, entry, claims, arms, memo, memo_detail) else { continue };
        let Memo { mean, unit_sd, .. } =
            if pool_has_better && self_only(memo_detail.get(entry.arm as usize)) { prior } else { slot };
        if mean < floor {
            rejected.min_quality += 1;
            continue;
        }
        eligible += 1;
        let (primary, uses_draw_in_primary) = match request.strategy {
            Strategy::Cost => (-entry.cost_usd, false),
            Strategy::Latency => (-(entry.latency_ms as f64), false),
            Strategy::Quality | Strategy::Balanced | Strategy::Weighted(_) => {
                (-(cost_scale * entry.cost_usd) - latency_scale * entry.latency_ms as f64, true)
            }
        };
        // Skip the random draw of a candidate that cannot enter the kept ranking even at its most optimistic.
        if top.len() >= keep
            && let Some(last) = top.last()
        {
            let best_case = learner.upper(mean, unit_sd);
            let hopeless = if uses_draw_in_primary {
                primary + weights.quality * best_case < last.score
            } else {
                primary < last.score
            };
            if hopeless {
                continue;
            }
        }
        let drawn = learner.draw(mean, unit_sd, rng);
        let row = if uses_draw_in_primary {
            Row { entry: index, drawn, score: primary + weights.quality * drawn, tiebreak: 0.0 }
        } else {
            Row { entry: index, drawn, score: primary, tiebreak: drawn }
        };
        if keep == usize::MAX {
            top.push(row);
        } else {
            // Strictly better only, so equal scores keep registration order and decisions are reproducible.
            let position = top.iter().position(|r| row.beats(r)).unwrap_or(top.len());
            if position < keep {
                top.insert(position, row);
                top.truncate(keep);
            }
        }
    }
    if keep == usize::MAX {
        top.sort_by(|a, b| (b.score, b.tiebreak).partial_cmp(&(a.score, a.tiebreak)).unwrap_or(Ordering::Equal));
    }
    Ranked { top, eligible, rejected, pool_has_better }
}
