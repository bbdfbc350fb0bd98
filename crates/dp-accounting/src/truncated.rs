//! Truncated Poisson sampling: a Poisson sample whose size is capped at B by keeping a
//! uniformly random B of its records, then the Gaussian mechanism on the kept records.
//!
//! # Privacy
//! Let D′ = D ∪ {z} with |D′| = N, q the sampling rate, σ the noise multiplier (records
//! clipped to norm 1, noise `N(0, σ²I)`), and m the number of the other N − 1 records the
//! Poisson draw takes (the same distribution under D and D′).
//!
//! * m < B: nothing is truncated with or without z (m + 1 ≤ B), so the pair is the
//!   Poisson-subsampled Gaussian's: rate q, noise multiplier σ.
//! * m ≥ B: let R be a uniform B-subset of the m others (D's batch) and y uniform in R.
//!   D′'s batch is R when z is not drawn or not kept, and R ∖ {y} ∪ {z} — a uniform
//!   B-subset of the others and z, given that z is kept — with probability
//!   q·B/(m + 1). So, given (m, R, y), D's output is `N(s, σ²I)` and D′'s is
//!   `(1 − q_m)·N(s, σ²I) + q_m·N(s + z − y, σ²I)` with `q_m = qB/(m + 1) ≤ qB/(B + 1)`
//!   and `‖z − y‖ ≤ 2`: the Poisson-subsampled Gaussian pair with noise multiplier σ/2
//!   and rate at most qB/(B + 1) (a lower rate is a post-processing of a higher one).
//!
//! (m, R, y) has the same distribution under D and D′, so revealing it with the output
//! only adds information; the revealed pair's privacy loss distribution is the mixture
//! of the two branches' with weight `p = P[Binomial(N − 1, q) ≥ B]` on the second, and
//! the mechanism's is dominated by it (post-processing). Both directions (remove and add)
//! follow the same way. This is the decomposition of Tighter Privacy Analysis for
//! Truncated Poisson Sampling (arXiv 2508.15089, as dp_accounting 0.6's
//! `from_truncated_subsampled_gaussian_mechanism` builds it), with the second branch
//! bounded as derived above: dp_accounting bounds it by a replace-one pair at σ/2 with
//! the conditional rate `E[q_m | m ≥ B]`; the two differ, and
//! `xtask/scripts/truncated_poisson_reference.py` compares them (docs/accounting.md).

use libm::lgamma;
use serde::{Deserialize, Serialize};

/// Which bound of the truncated branch the PLD accountant composes. Both are upper
/// bounds of the same mechanism; neither dominates the other (docs/accounting.md lists
/// 24 settings: the revealed bound is up to 9% tighter over hundreds of steps, up to 15%
/// looser for one step with frequent truncation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TruncatedPoissonBound {
    /// Derived in this module: the add/remove Poisson Gaussian at σ/2 and rate qB/(B + 1).
    #[default]
    Revealed,
    /// arXiv 2508.15089 as dp_accounting 0.6 builds it: the replace-one Poisson Gaussian
    /// at σ/2 and the rate `P[Binomial(N, q) > B]·B/(p·N)` (z's inclusion probability
    /// given truncation); agrees with dp_accounting's `TruncatedSubsampledGaussianDpEvent`.
    Conditional,
}

/// The two branches of a truncated Poisson Gaussian: the weight of the truncated
/// branch, and that branch's noise multiplier and rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct TruncationSplit {
    /// `P[Binomial(N − 1, q) ≥ B]`.
    pub truncation_probability: f64,
    /// σ/2.
    pub truncated_sigma: f64,
    /// qB/(B + 1).
    pub truncated_rate: f64,
    /// `P[Binomial(N, q) > B]·B/(p·N)`, the rate of the conditional bound.
    pub conditional_rate: f64,
}

impl TruncationSplit {
    /// The split for a dataset of `dataset_size` records (the larger neighbour's size),
    /// rate `q`, batches capped at `max_batch_size`, noise multiplier `sigma`.
    pub fn new(dataset_size: u64, q: f64, max_batch_size: u64, sigma: f64) -> Self {
        let b = max_batch_size as f64;
        let p = truncation_probability(dataset_size, q, max_batch_size);
        let above = binomial_upper_tail(dataset_size, q, max_batch_size.saturating_add(1));
        TruncationSplit {
            truncation_probability: p,
            truncated_sigma: sigma / 2.0,
            truncated_rate: q * b / (b + 1.0),
            conditional_rate: if p > 0.0 {
                (above * b / (p * dataset_size as f64)).min(1.0)
            } else {
                0.0
            },
        }
    }
}

/// How often a truncated Poisson draw cuts a batch that holds a given record:
/// `P[Binomial(N − 1, q) ≥ B]`, the weight of the truncated branch (N the larger
/// neighbour's size). Also what a user sizing B wants to know.
///
/// ```
/// use dp_accounting::{truncation_probability, Accountant, DpEvent, PldConfig};
///
/// // 60,000 records (60,001: a neighbour may add one), expected batch 256, cap 300.
/// let step = DpEvent::TruncatedPoissonGaussian {
///     dataset_size: 60_001,
///     sampling_rate: 256.0 / 60_000.0,
///     max_batch_size: 300,
///     noise_multiplier: 1.1,
/// };
/// assert!(truncation_probability(60_001, 256.0 / 60_000.0, 300) < 0.01);
/// let mut pld = PldConfig::default().build()?;
/// pld.compose(&step, 1000)?;
/// let eps = pld.epsilon(1e-5)?;
/// assert!(eps.is_finite() && eps > 0.0);
/// # Ok::<(), dp_accounting::Error>(())
/// ```
pub fn truncation_probability(dataset_size: u64, sampling_rate: f64, max_batch_size: u64) -> f64 {
    binomial_upper_tail(
        dataset_size.saturating_sub(1),
        sampling_rate,
        max_batch_size,
    )
}

/// `P[X ≥ k]` for `X ~ Binomial(n, p)`, summed term by term from the probability mass
/// function (`ln Γ` for the first term, then the ratio of successive terms), on the side
/// of the mean that has no cancellation.
pub(crate) fn binomial_upper_tail(n: u64, p: f64, k: u64) -> f64 {
    if k == 0 || p >= 1.0 {
        return if k <= n { 1.0 } else { 0.0 };
    }
    if k > n || p <= 0.0 {
        return 0.0;
    }
    let (nf, odds) = (n as f64, p / (1.0 - p));
    let pmf = |j: u64| {
        let j = j as f64;
        (lgamma(nf + 1.0) - lgamma(j + 1.0) - lgamma(nf - j + 1.0)
            + j * p.ln()
            + (nf - j) * (-p).ln_1p())
        .exp()
    };
    let above_mean = k as f64 > nf * p;
    // Upward from k (terms fall past the mean), or downward from k − 1 for the lower tail.
    let (mut j, mut term) = if above_mean {
        (k, pmf(k))
    } else {
        (k - 1, pmf(k - 1))
    };
    let mut sum = 0.0;
    loop {
        sum += term;
        let done = if above_mean { j == n } else { j == 0 };
        if done || term < sum * 1e-18 {
            break;
        }
        if above_mean {
            term *= (nf - j as f64) / (j as f64 + 1.0) * odds;
            j += 1;
        } else {
            term *= j as f64 / (nf - j as f64 + 1.0) / odds;
            j -= 1;
        }
    }
    if above_mean {
        sum.min(1.0)
    } else {
        (1.0 - sum).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `P[X ≥ k]` by the definition, in f64 with exact binomial coefficients.
    fn direct(n: u64, p: f64, k: u64) -> f64 {
        let mut c = 1.0f64; // C(n, 0)
        let mut total = 0.0;
        for j in 0..=n {
            if j > 0 {
                c = c * (n - j + 1) as f64 / j as f64;
            }
            if j >= k {
                total += c * p.powi(j as i32) * (1.0 - p).powi((n - j) as i32);
            }
        }
        total
    }

    #[test]
    fn the_tail_equals_the_definition_on_both_sides_of_the_mean() {
        for &(n, p) in &[(10u64, 0.3), (40, 0.05), (60, 0.5), (25, 0.9)] {
            for k in 0..=n + 1 {
                let (got, want) = (binomial_upper_tail(n, p, k), direct(n, p, k));
                assert!(
                    (got - want).abs() <= 1e-13 + 1e-11 * want,
                    "n {n} p {p} k {k}: {got} vs {want}"
                );
            }
        }
    }

    /// A large dataset: 60,000 records at q = 256/60,000 capped at 300 (the mean is 256,
    /// the standard deviation 16: 2.75 sd above): the tail is of the normal approximation's
    /// order of magnitude, about half the mass lies at or above the mean, the tail falls.
    #[test]
    fn a_large_dataset_has_a_small_well_computed_tail() {
        let (n, p) = (59_999u64, 256.0 / 60_000.0);
        let tail = binomial_upper_tail(n, p, 300);
        assert!(tail > 1e-3 && tail < 1e-2, "{tail}");
        let at_mean = binomial_upper_tail(n, p, 256);
        assert!(at_mean > 0.45 && at_mean < 0.55, "{at_mean}");
        assert!(binomial_upper_tail(n, p, 255) > at_mean && at_mean > tail);
        let split = TruncationSplit::new(60_000, p, 300, 1.1);
        assert_eq!(split.truncation_probability, tail);
        assert_eq!(split.truncated_sigma, 0.55);
        assert!((split.truncated_rate - p * 300.0 / 301.0).abs() < 1e-18);
    }
}
