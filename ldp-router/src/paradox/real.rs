//! The four routing conditions over delegates whose outputs are real (the paper's Table 3): the caller runs each
//! routed task on the chosen delegate and scores the output; this module only routes, exactly as the simulation
//! does, so the two experiments differ in nothing but where the scores come from.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::{Condition, SKILL, START, SimDelegate, mean_sd, router_for};
use crate::{ExplainDepth, Observation, Quality, RouterError, SelectionRequest, Strategy, VerificationSource};

/// One condition's result over real delegates.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct RealConditionRow {
    /// The condition.
    pub condition: Condition,
    /// Mean score of the routed outputs.
    pub mean: f64,
    /// Standard deviation of those scores.
    pub std: f64,
    /// How many tasks went to each delegate, in pool order.
    pub chosen: Vec<usize>,
}

impl RealConditionRow {
    /// The delegate most tasks went to (its index in the pool).
    pub fn mostly_chosen(&self) -> Option<usize> {
        self.chosen.iter().enumerate().max_by_key(|(_, n)| **n).map(|(i, _)| i)
    }
}

/// Routes `tasks` tasks under each condition over `pool` (claims as in the simulation: `claimed` is the
/// self-claim, `true_quality` the issuer's attested score) and asks `run` for the score in `[0, 1]` of task `t` on
/// delegate `d` (called as `run(d, t)`). The runtime-observed condition learns from those scores as verified
/// outcomes. `seed` drives the blind draw and the learner's exploration.
pub fn run_conditions<E>(
    pool: &[SimDelegate],
    tasks: usize,
    seed: u64,
    mut run: impl FnMut(usize, usize) -> Result<f64, E>,
) -> Result<Vec<RealConditionRow>, RealRunError<E>> {
    if pool.is_empty() || tasks == 0 {
        return Err(RealRunError::Router(RouterError::InvalidConfig("a pool and at least one task")));
    }
    let request = SelectionRequest::new(SKILL).strategy(Strategy::Quality).explain(ExplainDepth::Top(1));
    let mut rows = Vec::new();
    for condition in Condition::ALL {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(condition.stream());
        let mut router = router_for(condition, pool, seed ^ 0x5eed_1d90_0000_0000).map_err(RealRunError::Router)?;
        let mut scores = Vec::with_capacity(tasks);
        let mut chosen = vec![0; pool.len()];
        for task in 0..tasks {
            let now = START + time::Duration::minutes(task as i64);
            let index = match router.as_mut() {
                None => rng.random_range(0..pool.len()),
                Some(router) => {
                    let decision = router.select(&request, now).map_err(RealRunError::Router)?;
                    pool.iter().position(|d| d.id == decision.delegate_id).unwrap_or(0)
                }
            };
            let score = run(index, task).map_err(RealRunError::Run)?.clamp(0.0, 1.0);
            if condition == Condition::Ours
                && let (Some(router), Some(delegate)) = (router.as_mut(), pool.get(index))
            {
                let outcome = Observation {
                    delegate_id: delegate.id.clone(),
                    skill: SKILL.to_owned(),
                    score: Quality::saturating(score),
                    source: VerificationSource::Validator("contract-predicates".to_owned()),
                };
                router.record_outcome(&outcome, now).map_err(RealRunError::Router)?;
            }
            if let Some(n) = chosen.get_mut(index) {
                *n += 1;
            }
            scores.push(score);
        }
        let (mean, std) = mean_sd(&scores);
        rows.push(RealConditionRow { condition, mean, std, chosen });
    }
    Ok(rows)
}

/// Why [`run_conditions`] stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RealRunError<E> {
    /// The router refused the pool or a selection.
    #[error(transparent)]
    Router(RouterError),
    /// Running a task failed.
    #[error("running a task: {0}")]
    Run(E),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delegate(id: &str, attested: f64, claimed: f64) -> SimDelegate {
        SimDelegate { id: id.into(), true_quality: attested, claimed, inflating: claimed > attested + 0.1 }
    }

    /// Scores come from the caller: a delegate that always fails and claims the most is what self-claimed routing
    /// picks and what attested and runtime-observed routing avoid.
    #[test]
    fn conditions_route_on_what_each_trusts() {
        let pool = [delegate("honest", 0.9, 0.6), delegate("inflator", 0.1, 0.99)];
        let rows = run_conditions::<std::convert::Infallible>(&pool, 40, 7, |d, _| Ok(if d == 0 { 1.0 } else { 0.0 }))
            .expect("run");
        let row = |c: Condition| rows.iter().find(|r| r.condition == c).expect("row");
        assert_eq!(row(Condition::SelfClaimed).mostly_chosen(), Some(1));
        assert_eq!(row(Condition::SelfClaimed).mean, 0.0);
        assert_eq!(row(Condition::Attested).mostly_chosen(), Some(0));
        assert_eq!(row(Condition::Attested).mean, 1.0);
        assert_eq!(row(Condition::Ours).mostly_chosen(), Some(0));
        assert!(row(Condition::Ours).mean > row(Condition::Blind).mean);
        assert_eq!(rows.iter().map(|r| r.chosen.iter().sum::<usize>()).collect::<Vec<_>>(), vec![40; 4]);
    }

    #[test]
    fn a_failing_run_stops_the_experiment_with_its_error() {
        let pool = [delegate("a", 0.5, 0.5)];
        let error =
            run_conditions(&pool, 3, 1, |_, t| if t == 1 { Err("model gone") } else { Ok(1.0) }).expect_err("stops");
        assert!(matches!(error, RealRunError::Run("model gone")));
    }
}
