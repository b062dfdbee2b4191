//! The Mann–Whitney U test (Wilcoxon rank-sum): whether one run's spans tend to be longer than
//! the other's, from their ranks alone. The test of the means weighs each span by its size, so
//! one 34 ms span among 2 ms ones widens the standard error until a +27% change of every other
//! span is "within the noise"; in ranks that span is just the largest, and the other 19 still
//! sit below the 20 of the slower run.
//!
//! Exact (the count of arrangements of the two runs' ranks) for small runs without ties, where
//! the normal approximation is poor in the tails; otherwise the normal approximation with the
//! tie correction of the variance and a continuity correction.

/// What the test found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankTest {
    /// The two-sided p-value: how likely ranks at least this lopsided are when both runs'
    /// spans come from one distribution.
    pub p: f64,
    /// The share of (before, after) pairs in which the after span is the longer (ties count
    /// half): above 0.5 the after run tends to be slower.
    pub after_longer: f64,
}

/// Runs up to this size without ties get the exact distribution (at most 30·30 + 1 counts per
/// cell of a 31 × 31 table: well under a millisecond).
const EXACT_MAX: usize = 30;

/// The test of `before` against `after`, both sorted ascending. None when either is empty.
pub fn mann_whitney(before: &[u64], after: &[u64]) -> Option<RankTest> {
    let (n1, n2) = (before.len(), after.len());
    if n1 == 0 || n2 == 0 {
        return None;
    }
    debug_assert!(before.is_sorted() && after.is_sorted());
    // Walk both sorted runs at once: each group of equal values gets the mean of its ranks;
    // `tie_sum` is Σ(t³ - t) over the groups, for the variance's tie correction.
    let (mut i, mut j, mut rank) = (0usize, 0usize, 0f64);
    let (mut r2, mut tie_sum) = (0f64, 0f64);
    while i < n1 || j < n2 {
        let v = match (before.get(i), after.get(j)) {
            (Some(&x), Some(&y)) => x.min(y),
            (Some(&x), None) => x,
            (None, Some(&y)) => y,
            (None, None) => unreachable!(),
        };
        let (i0, j0) = (i, j);
        while before.get(i) == Some(&v) {
            i += 1;
        }
        while after.get(j) == Some(&v) {
            j += 1;
        }
        let t = ((i - i0) + (j - j0)) as f64;
        let mean_rank = rank + (t + 1.0) / 2.0;
        r2 += mean_rank * (j - j0) as f64;
        rank += t;
        tie_sum += t * t * t - t;
    }
    let (f1, f2) = (n1 as f64, n2 as f64);
    // U of the after run: the pairs in which its span is the longer, ties counting half.
    let u = r2 - f2 * (f2 + 1.0) / 2.0;
    let pairs = f1 * f2;
    let p = if tie_sum == 0.0 && n1 <= EXACT_MAX && n2 <= EXACT_MAX {
        exact_p(n1, n2, u.round() as usize)
    } else {
        let n = f1 + f2;
        let var = pairs / 12.0 * ((n + 1.0) - tie_sum / (n * (n - 1.0)));
        if var <= 0.0 {
            // Every span the same length in both runs.
            1.0
        } else {
            let d = (u - pairs / 2.0).abs();
            let z = (d - 0.5).max(0.0) / var.sqrt();
            erfc(z / std::f64::consts::SQRT_2).min(1.0)
        }
    };
    Some(RankTest {
        p,
        after_longer: u / pairs,
    })
}

/// The exact two-sided p-value of U = `u` for runs of `n1` and `n2` values without ties: twice
/// the smaller tail, counted over all C(n1 + n2, n1) equally likely arrangements.
fn exact_p(n1: usize, n2: usize, u: usize) -> f64 {
    // counts[a][b][k]: arrangements of a values of one run and b of the other with U = k.
    // Adding a value of the first run above all the b others adds b pairs it wins:
    // counts[a][b][k] = counts[a-1][b][k-b] + counts[a][b-1][k].
    let mut counts: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); n2 + 1]; n1 + 1];
    for a in 0..=n1 {
        for b in 0..=n2 {
            let mut c = vec![0.0; a * b + 1];
            if a == 0 || b == 0 {
                c[0] = 1.0;
            } else {
                for (k, ck) in c.iter_mut().enumerate() {
                    let with_a = if k >= b {
                        counts[a - 1][b].get(k - b).copied().unwrap_or(0.0)
                    } else {
                        0.0
                    };
                    let with_b = counts[a][b - 1].get(k).copied().unwrap_or(0.0);
                    *ck = with_a + with_b;
                }
            }
            counts[a][b] = c;
        }
    }
    let dist = &counts[n1][n2];
    let total: f64 = dist.iter().sum();
    let u = u.min(dist.len() - 1);
    let low: f64 = dist[..=u].iter().sum();
    let high: f64 = dist[u..].iter().sum();
    (2.0 * low.min(high) / total).min(1.0)
}

/// The complementary error function, within 1.2e-7 relative (Chebyshev fit, Numerical Recipes'
/// `erfcc`): the normal tail for the approximation.
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_separation_of_small_runs_has_the_exact_p_value() {
        // 6 against 6, every after span longer: 1 arrangement of C(12, 6) = 924 in each
        // tail.
        let b = [1, 2, 3, 4, 5, 6];
        let a = [7, 8, 9, 10, 11, 12];
        let t = mann_whitney(&b, &a).unwrap();
        assert!((t.p - 2.0 / 924.0).abs() < 1e-12, "{t:?}");
        assert_eq!(t.after_longer, 1.0);
        let t = mann_whitney(&a, &b).unwrap();
        assert!((t.p - 2.0 / 924.0).abs() < 1e-12, "{t:?}");
        assert_eq!(t.after_longer, 0.0);
        // 3 against 3: 20 arrangements; U = 8 or more (or 1 or less) in 2 each.
        let t = mann_whitney(&[1, 2, 4], &[3, 5, 6]).unwrap();
        assert!((t.p - 4.0 / 20.0).abs() < 1e-12, "{t:?}");
    }

    #[test]
    fn interleaved_runs_are_not_significant() {
        let b: Vec<u64> = (0..20).map(|i| 2 * i).collect();
        let a: Vec<u64> = (0..20).map(|i| 2 * i + 1).collect();
        let t = mann_whitney(&b, &a).unwrap();
        assert!(t.p > 0.5, "{t:?}");
        assert!((t.after_longer - 0.5).abs() < 0.05, "{t:?}");
    }

    #[test]
    fn the_normal_approximation_with_ties_agrees_with_the_exact_test() {
        // Large runs: the approximation's p-value for a clear shift is tiny, for none large.
        let b: Vec<u64> = (0..200).map(|i| 1_000 + i * 10).collect();
        let a: Vec<u64> = (0..200).map(|i| 1_500 + i * 10).collect();
        let t = mann_whitney(&b, &a).unwrap();
        assert!(t.p < 1e-10, "{t:?}");
        let t = mann_whitney(&b, &b).unwrap();
        assert!(t.p > 0.99, "{t:?}");
        // Ties (the same values in both runs) take the approximation; all equal: p = 1.
        let same = vec![5u64; 40];
        assert_eq!(mann_whitney(&same, &same).unwrap().p, 1.0);
        // Near the exact test where both apply (no ties, 30 against 31 takes the normal).
        let b: Vec<u64> = (0..30).map(|i| i * 3).collect();
        let a30: Vec<u64> = (0..30).map(|i| i * 3 + 20).collect();
        let mut a31 = a30.clone();
        a31.push(10_000);
        let (e, n) = (
            mann_whitney(&b, &a30).unwrap().p,
            mann_whitney(&b, &a31).unwrap().p,
        );
        assert!(
            e < 0.05 && n < 0.05 && (e.ln() - n.ln()).abs() < 1.0,
            "{e} {n}"
        );
    }

    #[test]
    fn erfc_matches_known_values() {
        for (x, want) in [
            (0.0, 1.0),
            (1.0, 0.157_299_207),
            (2.0, 0.004_677_735),
            (-1.0, 1.842_700_793),
        ] {
            assert!(
                (erfc(x) - want).abs() < 1e-6 * want.max(1e-3),
                "{x}: {}",
                erfc(x)
            );
        }
    }
}
