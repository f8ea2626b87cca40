//! The paper's Figure 4: output quality against the dishonest fraction, for a pool of 10 at medium inflation, with
//! the "paradox zone" where self-claimed routing falls below random.

use std::fmt::{self, Write as _};

use serde::Serialize;

use super::{Condition, InflationLevel, Qualities, Scenario, format_p, run_experiment};
use crate::RouterError;

/// The dishonest fractions of the slice: every tenth from 10% to 90% (the sensitivity analysis's four among them).
pub const FIGURE4_FRACTIONS: [f64; 9] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9];
/// The pool size of the slice.
const POOL: usize = 10;

/// One point of the slice.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure4Row {
    /// Share of inflators.
    pub dishonest_fraction: f64,
    /// Number of inflators in the pool.
    pub inflators: usize,
    /// Mean quality of blind routing.
    pub blind: f64,
    /// Mean quality of self-claimed routing.
    pub self_claimed: f64,
    /// Mean quality of attested routing.
    pub attested: f64,
    /// Mean quality of this router, runtime-observed.
    pub ours: f64,
    /// Two-sided Mann–Whitney p-value of self-claimed against blind.
    pub p_self_vs_blind: Option<f64>,
    /// Self-claimed is worse than blind: the point lies in the paradox zone.
    pub paradox: bool,
}

/// The slice.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure4Report {
    /// Seed of the first run of each point.
    pub base_seed: u64,
    /// Seeds per point.
    pub seeds: u64,
    /// Tasks per condition and seed.
    pub tasks: usize,
    /// One row per dishonest fraction, ascending.
    pub rows: Vec<Figure4Row>,
}

/// Runs the slice: pool 10, medium inflation (δ in `[0.25, 0.35]`), additive claims as in the sensitivity analysis.
pub fn run_figure4(base_seed: u64, seeds: u64, tasks: usize) -> Result<Figure4Report, RouterError> {
    let mut rows = Vec::with_capacity(FIGURE4_FRACTIONS.len());
    for fraction in FIGURE4_FRACTIONS {
        let scenario = Scenario::sensitivity(fraction, InflationLevel::Medium, POOL, tasks);
        let report = run_experiment(&scenario, base_seed, seeds)?;
        let blind = report.mean_of(Condition::Blind);
        let self_claimed = report.mean_of(Condition::SelfClaimed);
        rows.push(Figure4Row {
            dishonest_fraction: fraction,
            inflators: scenario.inflators(),
            blind,
            self_claimed,
            attested: report.mean_of(Condition::Attested),
            ours: report.mean_of(Condition::Ours),
            p_self_vs_blind: report.stats(Condition::SelfClaimed).and_then(|s| s.p_vs_blind),
            paradox: self_claimed < blind,
        });
    }
    Ok(Figure4Report { base_seed, seeds, tasks, rows })
}

impl Figure4Report {
    /// The fractions in the paradox zone.
    pub fn paradox_zone(&self) -> Vec<f64> {
        self.rows.iter().filter(|r| r.paradox).map(|r| r.dishonest_fraction).collect()
    }

    /// The report as CSV, one row per fraction.
    pub fn to_csv(&self) -> String {
        let mut out =
            String::from("dishonest_pct,inflators,blind,self_claimed,attested,ours,p_self_vs_blind,paradox\n");
        for r in &self.rows {
            let qualities = Qualities([r.blind, r.self_claimed, r.attested, r.ours]);
            let p = r.p_self_vs_blind.map(|p| format!("{p:.3e}")).unwrap_or_default();
            let (pct, inflators) = (100.0 * r.dishonest_fraction, r.inflators);
            let _ = writeln!(out, "{pct:.0},{inflators},{},{p},{}", qualities.csv(), r.paradox);
        }
        out
    }
}

impl fmt::Display for Figure4Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Figure 4 slice: pool {POOL}, medium inflation (0.25-0.35, claim = true + inflation), {} tasks x {} seeds \
             from seed {}",
            self.tasks, self.seeds, self.base_seed
        )?;
        writeln!(f)?;
        writeln!(
            f,
            "{:>9} {:>9} {:>7} {:>7} {:>8} {:>7} {:>12}  paradox zone",
            "dishonest", "inflators", "blind", "self", "attested", "ours", "p self/blind"
        )?;
        for r in &self.rows {
            let qualities = Qualities([r.blind, r.self_claimed, r.attested, r.ours]);
            let p = r.p_self_vs_blind.map_or_else(|| "-".to_owned(), format_p);
            let (pct, inflators) = (100.0 * r.dishonest_fraction, r.inflators);
            let zone = if r.paradox { "yes (self-claimed below random)" } else { "" };
            writeln!(f, "{pct:>8.0}% {inflators:>9} {} {p:>12}  {zone}", qualities.table())?;
        }
        writeln!(f)?;
        let zone = self.paradox_zone();
        if zone.is_empty() {
            write!(f, "no paradox zone: self-claimed routing is at least as good as random at every fraction")
        } else {
            let points: Vec<String> = zone.iter().map(|x| format!("{:.0}%", 100.0 * x)).collect();
            write!(f, "paradox zone at {} dishonest", points.join(", "))
        }
    }
}
