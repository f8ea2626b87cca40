//! `ldp_router::stats` against SciPy (installed by `scripts/py-tools.sh` under target/; never skipped): the
//! Mann–Whitney U statistic and two-sided p-value of `scipy.stats.mannwhitneyu(a, b, method="asymptotic")` on
//! random samples with and without ties, of the sizes the paradox experiment uses and smaller ones.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Stdio};

use ldp_router::stats::mann_whitney_u;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

const SCIPY: &str = r#"
import json, sys
from scipy.stats import mannwhitneyu
cases = json.load(sys.stdin)
out = []
for a, b in cases:
    r = mannwhitneyu(a, b, alternative="two-sided", method="asymptotic", use_continuity=True)
    out.append([float(r.statistic), float(r.pvalue)])
print(json.dumps(out))
"#;

fn scipy(cases: &Value) -> Vec<(f64, f64)> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let py = Command::new("bash").arg(repo.join("scripts/py-tools.sh")).stderr(Stdio::inherit()).output().unwrap();
    assert!(py.status.success(), "scripts/py-tools.sh could not install SciPy (see stderr)");
    let py = String::from_utf8(py.stdout).unwrap().trim().to_owned();
    let mut child = Command::new(py).args(["-c", SCIPY]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    serde_json::to_writer(child.stdin.take().unwrap(), cases).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let answers: Vec<(f64, f64)> = serde_json::from_slice(&out.stdout).unwrap();
    answers
}

#[test]
fn mann_whitney_matches_scipy() {
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    let mut cases = Vec::new();
    for case in 0..60 {
        let (n1, n2) = match case % 3 {
            0 => (rng.random_range(1..12), rng.random_range(1..12)),
            1 => (rng.random_range(20..200), rng.random_range(20..200)),
            _ => (1000, 1000),
        };
        let shift = rng.random_range(-0.2..0.2);
        // Every other case rounds to two decimals, so that ties are common (as clamped qualities at 0 and 1 are).
        let ties = case % 2 == 0;
        let draw = |rng: &mut ChaCha8Rng, n: usize, shift: f64| -> Vec<f64> {
            (0..n)
                .map(|_| {
                    let x: f64 = (rng.random_range(0.0..1.0) + shift).clamp(0.0, 1.0);
                    if ties { (x * 100.0).round() / 100.0 } else { x }
                })
                .collect()
        };
        let a = draw(&mut rng, n1, shift);
        let b = draw(&mut rng, n2, 0.0);
        cases.push((a, b));
    }
    let reference = scipy(&json!(cases));
    for ((a, b), (u, p)) in cases.iter().zip(reference) {
        let ours = mann_whitney_u(a, b).unwrap();
        assert_eq!(ours.u, u, "U for sizes {} and {}", a.len(), b.len());
        let tolerance = 1e-9 * p.max(1e-300) + 1e-300;
        assert!(
            (ours.p_two_sided - p).abs() <= tolerance.max(1e-12 * p),
            "p {} vs SciPy {p} (sizes {}, {})",
            ours.p_two_sided,
            a.len(),
            b.len()
        );
    }
}
