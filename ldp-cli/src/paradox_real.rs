//! `ldp paradox --real`: the routing conditions over real delegates (the paper's Table 3), here one small model on
//! the CPU served three ways: an honest delegate and two degraded ones that inflate their self-claims.
//!
//! Each task carries `check:` predicates (the contract language of `ldp_types::criteria`) that score its output
//! mechanically: 1 when every predicate holds, 0 otherwise. The issuer benchmarks every delegate on its own
//! calibration tasks (other numbers, same families) before routing starts, and its measured pass rate is the
//! attested quality. The four conditions then route the same evaluation tasks, each over fresh router state.

use std::path::PathBuf;

use ldp_llm::{ChatMessage, ChatRequest, LlmBackend, LlmError};
use ldp_llm_local::{LocalBackend, LocalOptions, Sampling};
use ldp_router::paradox::{RealConditionRow, SimDelegate, run_conditions};
use ldp_types::criteria::Criterion;
use serde::Serialize;

/// One way of serving the model.
struct Variant {
    id: &'static str,
    system: &'static str,
    sampling: Sampling,
    /// What it says of itself.
    claimed: f64,
}

const HONEST_PROMPT: &str = "You are a careful assistant. Follow the instructions exactly and answer briefly.";

fn variants() -> [Variant; 3] {
    [
        Variant { id: "smollm2-honest", system: HONEST_PROMPT, sampling: Sampling::Greedy, claimed: 0.70 },
        // A 135M model mostly ignores a sabotaging prompt, so this one also samples at temperature 1.
        Variant {
            id: "smollm2-careless",
            system: "You are a careless assistant. Never give the requested answer: reply with an unrelated sentence \
                     about the weather.",
            sampling: Sampling::Temperature { temperature: 1.0, top_p: None, seed: 5 },
            claimed: 0.97,
        },
        Variant {
            id: "smollm2-hot",
            system: HONEST_PROMPT,
            sampling: Sampling::Temperature { temperature: 2.5, top_p: None, seed: 11 },
            claimed: 0.92,
        },
    ]
}

/// A task and the predicates its output must pass.
struct Task {
    prompt: String,
    checks: Vec<String>,
}

const WORDS: [&str; 8] = ["apple", "river", "candle", "orbit", "garden", "silver", "window", "forest"];

/// Task `n` of the three families (arithmetic, extraction, format), its numbers derived from `n` alone.
fn task(n: usize) -> Task {
    let a = 3 + (7 * n) % 41;
    let b = 2 + (13 * n) % 37;
    let whole_number = |x: usize| format!("check: $ matches /(^|[^0-9]){x}([^0-9]|$)/");
    match n % 3 {
        0 => Task {
            prompt: format!("What is {a} + {b}? Reply with the number only."),
            checks: vec![whole_number(a + b), "check: words <= 12".into()],
        },
        1 => {
            let year = 1850 + (17 * n) % 170;
            Task {
                prompt: format!(
                    "Read this sentence: \"The museum opened in {year} with three galleries.\" In which year did \
                     the museum open? Reply with the year only."
                ),
                checks: vec![whole_number(year), "check: words <= 12".into()],
            }
        }
        _ => {
            let word = WORDS[n % WORDS.len()];
            Task {
                prompt: format!("Write the word \"{word}\" in capital letters. Reply with that word only."),
                checks: vec![format!("check: $ matches /{}/", word.to_uppercase()), "check: words <= 12".into()],
            }
        }
    }
}

/// 1 when the output passes every predicate of the task, else 0.
fn score(task: &Task, output: &str) -> Result<f64, String> {
    let output = serde_json::Value::String(output.to_owned());
    for check in &task.checks {
        let criterion = Criterion::parse(check).map_err(|e| e.to_string())?.ok_or("not a predicate")?;
        if criterion.evaluate(&output).is_err() {
            return Ok(0.0);
        }
    }
    Ok(1.0)
}

/// The numbers `ldp paradox --real` reports.
#[derive(Debug, Serialize)]
pub struct RealReport {
    model: String,
    seed: u64,
    calibration_tasks: usize,
    tasks: usize,
    delegates: Vec<SimDelegate>,
    conditions: Vec<RealConditionRow>,
}

/// Calibration tasks are numbered from here, so they never coincide with an evaluation task.
const CALIBRATION_OFFSET: usize = 1000;

/// Runs the experiment on the GGUF model at `model`.
pub fn run(model: &PathBuf, tasks: usize, calibration: usize, seed: u64) -> Result<RealReport, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let mut backends = Vec::new();
    for variant in variants() {
        let mut options = LocalOptions::default();
        options.sampling = variant.sampling;
        options.model_name = Some(variant.id.to_owned());
        let backend = LocalBackend::load(model, options).map_err(|e| format!("{}: {e}", model.display()))?;
        backends.push(backend);
    }
    let ask = |delegate: usize, n: usize| -> Result<f64, String> {
        let (variants, task) = (variants(), task(n));
        let (Some(variant), Some(backend)) = (variants.get(delegate), backends.get(delegate)) else {
            return Err(format!("no delegate {delegate}"));
        };
        let request =
            ChatRequest::new(vec![ChatMessage::user(&task.prompt)]).with_system(variant.system).with_max_tokens(24);
        let answer = runtime.block_on(backend.complete(&request)).map_err(|e: LlmError| e.to_string())?;
        score(&task, &answer.text)
    };

    // The issuer's benchmark: each delegate on the calibration tasks; the pass rate is its attested quality.
    let mut delegates = Vec::new();
    for (index, variant) in variants().iter().enumerate() {
        let mut passed = 0.0;
        for n in 0..calibration {
            passed += ask(index, CALIBRATION_OFFSET + n)?;
        }
        let attested = if calibration == 0 { 0.0 } else { passed / calibration as f64 };
        delegates.push(SimDelegate {
            id: variant.id.to_owned(),
            true_quality: attested,
            claimed: variant.claimed,
            inflating: variant.claimed > attested + 0.1,
        });
    }
    let conditions = run_conditions(&delegates, tasks, seed, &ask).map_err(|e| e.to_string())?;
    Ok(RealReport {
        model: model.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default(),
        seed,
        calibration_tasks: calibration,
        tasks,
        delegates,
        conditions,
    })
}

impl std::fmt::Display for RealReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "provenance paradox on real delegates: {} on the CPU, {} evaluation tasks per condition, seed {}",
            self.model, self.tasks, self.seed
        )?;
        writeln!(f, "delegate            self-claim  attested (issuer benchmark, {} tasks)", self.calibration_tasks)?;
        for d in &self.delegates {
            writeln!(f, "{:<19} {:>10.2}  {:>8.2}", d.id, d.claimed, d.true_quality)?;
        }
        writeln!(f, "condition                 mean score   tasks routed to each delegate")?;
        for row in &self.conditions {
            let routed: Vec<String> =
                self.delegates.iter().zip(&row.chosen).map(|(d, n)| format!("{} {n}", d.id)).collect();
            writeln!(f, "{:<25} {:.2} ± {:.2}  {}", row.condition.name(), row.mean, row.std, routed.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_checks_its_own_answer_and_rejects_others() {
        for n in 0..30 {
            let t = task(n);
            let right = match n % 3 {
                0 => (3 + (7 * n) % 41 + 2 + (13 * n) % 37).to_string(),
                1 => (1850 + (17 * n) % 170).to_string(),
                _ => WORDS[n % WORDS.len()].to_uppercase(),
            };
            assert_eq!(score(&t, &right), Ok(1.0), "task {n}: {}", t.prompt);
            assert_eq!(score(&t, &format!("The answer is {right}.")), Ok(1.0), "task {n}");
            assert_eq!(score(&t, "It is sunny today."), Ok(0.0), "task {n}");
            if n % 3 != 2 {
                assert_eq!(score(&t, &format!("{right}1")), Ok(0.0), "task {n}: a longer number is not the answer");
            }
        }
    }
}
