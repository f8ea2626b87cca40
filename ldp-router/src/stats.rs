//! Two-sample statistics, as the paper reports its routing experiment (Table 2: "Effect sizes and p-values computed
//! vs. blind (Mann-Whitney U)"): Cohen's d with the pooled standard deviation, and the two-sided Mann–Whitney U test.
//!
//! ```
//! use ldp_router::stats::{cohen_d, mann_whitney_u};
//!
//! let blind = [0.61, 0.72, 0.55, 0.80, 0.67];
//! let attested = [0.94, 0.97, 0.93, 0.96, 0.95];
//! assert!(cohen_d(&attested, &blind).is_some_and(|d| d > 2.0));
//! let test = mann_whitney_u(&attested, &blind).unwrap();
//! assert_eq!(test.u, 25.0); // every attested value beats every blind one
//! assert!(test.p_two_sided < 0.05);
//! ```

/// Mean and sample standard deviation (`n - 1` in the denominator); `None` for an empty sample. One value has a
/// standard deviation of 0.
pub fn mean_sd(xs: &[f64]) -> Option<(f64, f64)> {
    if xs.is_empty() {
        return None;
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = if xs.len() > 1 { xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0) } else { 0.0 };
    Some((mean, var.sqrt()))
}

/// Cohen's d of `a` against `b`: `(mean(a) - mean(b)) / s_pooled`, with
/// `s_pooled = sqrt(((n_a - 1) s_a² + (n_b - 1) s_b²) / (n_a + n_b - 2))` (for equal sizes, the root of the mean of
/// the two variances). `None` when a sample is empty, both have one value, or the pooled deviation is 0.
pub fn cohen_d(a: &[f64], b: &[f64]) -> Option<f64> {
    let ((mean_a, sd_a), (mean_b, sd_b)) = (mean_sd(a)?, mean_sd(b)?);
    let dof = (a.len() + b.len()).checked_sub(2).filter(|&d| d > 0)?;
    let pooled = (((a.len() - 1) as f64 * sd_a * sd_a + (b.len() - 1) as f64 * sd_b * sd_b) / dof as f64).sqrt();
    (pooled > 0.0).then(|| (mean_a - mean_b) / pooled)
}

/// The result of a two-sided Mann–Whitney U test of `a` against `b`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct MannWhitney {
    /// `U` of the first sample: the number of pairs `(x in a, y in b)` with `x > y`, ties counting one half.
    pub u: f64,
    /// The standardised statistic, with the tie and continuity corrections (0 when every value is tied).
    pub z: f64,
    /// The two-sided p-value from the normal approximation.
    pub p_two_sided: f64,
}

/// The two-sided Mann–Whitney U test (Wilcoxon rank-sum) of `a` against `b`, with the normal approximation, the
/// correction of the variance for ties and a continuity correction of one half: what `scipy.stats.mannwhitneyu(a, b,
/// method="asymptotic")` computes, and what samples of the experiment's size (hundreds per condition) call for.
/// `None` when a sample is empty or holds a NaN.
pub fn mann_whitney_u(a: &[f64], b: &[f64]) -> Option<MannWhitney> {
    if a.is_empty() || b.is_empty() || a.iter().chain(b).any(|x| x.is_nan()) {
        return None;
    }
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    let n = n1 + n2;
    // Sort all values once, remembering which sample each came from, then give tied runs their average rank.
    let mut all: Vec<(f64, bool)> = a.iter().map(|&x| (x, true)).chain(b.iter().map(|&y| (y, false))).collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mut rank_sum_a = 0.0;
    let mut tie_term = 0.0;
    let mut start = 0;
    while start < all.len() {
        let value = all[start].0;
        let end = all[start..].iter().position(|&(x, _)| x != value).map_or(all.len(), |offset| start + offset);
        let tied = (end - start) as f64;
        // Ranks start at 1: the run covers ranks start+1 ..= end.
        let average_rank = (start + 1 + end) as f64 / 2.0;
        rank_sum_a += average_rank * all[start..end].iter().filter(|&&(_, from_a)| from_a).count() as f64;
        tie_term += tied * tied * tied - tied;
        start = end;
    }
    let u = rank_sum_a - n1 * (n1 + 1.0) / 2.0;
    let mean_u = n1 * n2 / 2.0;
    let variance = n1 * n2 / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)));
    // Every value is the same (or the variance is NaN): no evidence either way.
    if variance.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
        return Some(MannWhitney { u, z: 0.0, p_two_sided: 1.0 });
    }
    let distance = ((u - mean_u).abs() - 0.5).max(0.0);
    let z = (distance / variance.sqrt()).copysign(u - mean_u);
    let p_two_sided = libm::erfc(z.abs() / std::f64::consts::SQRT_2).min(1.0);
    Some(MannWhitney { u, z, p_two_sided })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn u_counts_pairs_ties_as_halves() {
        // Brute force: U is the number of (x, y) pairs with x > y plus half the ties.
        let a = [1.0, 2.0, 2.0, 5.0, 7.0];
        let b = [2.0, 3.0, 4.0, 7.0];
        let brute: f64 = a
            .iter()
            .flat_map(|x| {
                b.iter().map(move |y| {
                    if x > y {
                        1.0
                    } else if x == y {
                        0.5
                    } else {
                        0.0
                    }
                })
            })
            .sum();
        let test = mann_whitney_u(&a, &b).unwrap();
        assert_eq!(test.u, brute);
        // U of b against a is the complement, and the p-value is symmetric.
        let reverse = mann_whitney_u(&b, &a).unwrap();
        assert_eq!(test.u + reverse.u, (a.len() * b.len()) as f64);
        assert!((test.p_two_sided - reverse.p_two_sided).abs() < 1e-12);
    }

    #[test]
    fn identical_samples_give_no_evidence() {
        let same = [0.5; 8];
        let test = mann_whitney_u(&same, &same).unwrap();
        assert_eq!((test.u, test.z, test.p_two_sided), (32.0, 0.0, 1.0));
        assert_eq!(mann_whitney_u(&[], &same), None);
        assert_eq!(mann_whitney_u(&[f64::NAN], &same), None);
    }

    #[test]
    fn cohen_d_uses_the_pooled_deviation() {
        // Equal sizes: the pooled variance is the mean of the two variances.
        let a = [1.0, 2.0, 3.0, 4.0];
        let b = [3.0, 5.0, 7.0, 9.0];
        let (ma, sa) = mean_sd(&a).unwrap();
        let (mb, sb) = mean_sd(&b).unwrap();
        let expected = (ma - mb) / ((sa * sa + sb * sb) / 2.0).sqrt();
        assert!((cohen_d(&a, &b).unwrap() - expected).abs() < 1e-12);
        assert_eq!(cohen_d(&[1.0], &[2.0]), None);
        assert_eq!(cohen_d(&[1.0, 1.0], &[1.0, 1.0]), None);
    }
}
