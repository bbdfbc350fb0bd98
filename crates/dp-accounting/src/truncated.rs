//! Truncated Poisson sampling: a Poisson sample whose size is capped at B by keeping a
//! uniformly random B of its records, then the Gaussian mechanism on the kept records.
//!
//! # Privacy
//! Let D′ = D ∪ {z} with |D′| = N, q the sampling rate, σ the noise multiplier (records
//! clipped to norm 1, noise `N(0, σ²I)`), and m the number of the other N − 1 records the
//! Poisson draw takes (the same law under D and D′).
//!
//! * m < B: nothing is cut with or without z (m + 1 ≤ B), so the pair is the
//!   Poisson-subsampled Gaussian's: rate q, noise multiplier σ.
//! * m ≥ B: D's batch R is a uniform B-subset of the m drawn others — given m ≥ B, a
//!   uniform B-subset of all N − 1 others, whatever m is — and let y be uniform in R.
//!   D′'s batch is R when z is not drawn or not kept, and R ∖ {y} ∪ {z} with probability
//!   `q_m = q·B/(m + 1)` (the kept set is then a uniform B-subset of the drawn others and
//!   z: `C(m, B−1)/C(m+1, B) = B/(m+1)`). As m is independent of (R, y) given m ≥ B, given
//!   (R, y) D's output is `N(s, σ²I)` and D′'s `(1 − q̄)·N(s, σ²I) + q̄·N(s + z − y, σ²I)`
//!   with `q̄ = E[q_m | m ≥ B] = P[Binomial(N, q) > B]·B/(p·N)` and `‖z − y‖ ≤ 2`: the
//!   add/remove Poisson-subsampled Gaussian pair with noise multiplier σ/2 and rate q̄ (a
//!   shift shorter than 2 is a post-processing of one of 2).
//!
//! The branch (m < B or not) and (R, y) have the same law under D and D′, so the pair
//! that reveals them with the output has, at every ε and in both directions, the
//! hockey-stick divergence of the mixture of the two branches' pairs with weight
//! `p = P[Binomial(N − 1, q) ≥ B]` on the second; it dominates the mechanism's (data
//! processing), and the revealed pairs compose adaptively as dominating pairs (Zhu, Dong
//! & Wang 2022, arXiv 2106.08567, Thm 10). The decomposition is that of Tighter Privacy
//! Analysis for Truncated Poisson Sampling (arXiv 2508.15089) as dp_accounting 0.6's
//! `from_truncated_subsampled_gaussian_mechanism` builds it, which bounds the second
//! branch by a replace-one pair at σ/2 and the same rate q̄; the add/remove pair derived
//! here was at least as tight in every setting compared (docs/accounting.md,
//! `xtask/scripts/truncated_poisson_reference.py`). `N` is the larger neighbour's size;
//! a remove pair (N, N − 1) accounted with the weight of N + 1 differs by
//! `q·P[Binomial(N − 1, q) = B − 1]` in p, which the mixture is not monotone in, so
//! state the larger size exactly as the event's documentation says.

use libm::lgamma;
use serde::{Deserialize, Serialize};

use crate::accountant::unsupported;
use crate::error::Result;
use crate::event::{DpEvent, NeighbouringRelation};

/// Which bound of the truncated branch the PLD accountant composes; both are upper
/// bounds of the same mechanism.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TruncatedPoissonBound {
    /// Derived in this module: the add/remove Poisson Gaussian at σ/2 and rate q̄ (at
    /// least as tight as `Conditional` in every setting compared, docs/accounting.md).
    #[default]
    Revealed,
    /// arXiv 2508.15089 as dp_accounting 0.6 builds it: the replace-one Poisson Gaussian
    /// at σ/2 and rate q̄; agrees with dp_accounting's
    /// `TruncatedSubsampledGaussianDpEvent`.
    Conditional,
}

/// A `TruncatedPoissonGaussian`'s noise multiplier σ, rate q and split, for an
/// `accountant` under `relation`; refused (typed) for any other event or relation.
pub(crate) fn truncated_parts(
    event: &DpEvent,
    relation: NeighbouringRelation,
    accountant: &'static str,
) -> Result<(f64, f64, TruncationSplit)> {
    let DpEvent::TruncatedPoissonGaussian {
        dataset_size,
        sampling_rate,
        max_batch_size,
        noise_multiplier,
    } = *event
    else {
        return Err(unsupported(
            accountant,
            event,
            "not a truncated Poisson Gaussian",
        ));
    };
    if relation != NeighbouringRelation::AddOrRemoveOne {
        return Err(unsupported(
            accountant,
            event,
            "truncated Poisson sampling is accounted under add-or-remove-one neighbours",
        ));
    }
    let split = TruncationSplit::new(
        dataset_size,
        sampling_rate,
        max_batch_size,
        noise_multiplier,
    );
    Ok((noise_multiplier, sampling_rate, split))
}

/// The two branches of a truncated Poisson Gaussian: the weight of the truncated
/// branch, and that branch's noise multiplier and rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct TruncationSplit {
    /// `P[Binomial(N − 1, q) ≥ B]`.
    pub truncation_probability: f64,
    /// The noise multiplier of the truncated branch's pair: σ/2, its shift z − y being up
    /// to twice a clipped gradient's norm (the module's second case).
    pub truncated_sigma: f64,
    /// q̄ = `P[Binomial(N, q) > B]·B/(p·N)`: z's chance to be kept, given the cut.
    pub truncated_rate: f64,
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
            truncated_rate: if p > 0.0 {
                (above * b / (p * dataset_size as f64)).min(q)
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
    let pmf = |j: u64| (log_choose(n, j) + j as f64 * p.ln() + (n - j) as f64 * (-p).ln_1p()).exp();
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
        // A first term that underflowed (a tail far below 1e-300) ends the sum too.
        if done || term <= sum * 1e-18 {
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

/// `ln C(n, j)`. Where j is far below n, `ln Γ(n + 1) − ln Γ(n − j + 1)` cancels (a
/// relative error of 1e-8 at n = 1e8, worse beyond), so the falling factorial is summed
/// instead: `j ln n + Σ_{i<j} ln(1 − i/n) − ln Γ(j + 1)`.
fn log_choose(n: u64, j: u64) -> f64 {
    let (nf, jf) = (n as f64, j.min(n - j) as f64);
    if n < 1 << 20 || jf > 1e6 {
        return lgamma(nf + 1.0) - lgamma(jf + 1.0) - lgamma(nf - jf + 1.0);
    }
    let falling: f64 = (0..j.min(n - j)).map(|i| (-(i as f64) / nf).ln_1p()).sum();
    jf * nf.ln() + falling - lgamma(jf + 1.0)
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

    /// ln C(n, j) by both routes agrees where both are accurate; a huge dataset's far tail
    /// and its Poisson limit.
    #[test]
    fn huge_datasets_are_accurate_and_fast() {
        let (n, j) = (2_000_000u64, 300u64);
        let direct = lgamma(n as f64 + 1.0) - lgamma(j as f64 + 1.0) - lgamma((n - j) as f64 + 1.0);
        assert!((log_choose(n, j) - direct).abs() < 1e-6 * direct.abs());
        let start = std::time::Instant::now();
        let tail = binomial_upper_tail(100_000_000_000, 1e-9, 4096);
        assert!(tail == 0.0 || tail < 1e-300, "{tail}");
        assert!(
            start.elapsed().as_secs_f64() < 5.0,
            "the sum walked the range"
        );
        // Poisson(100) limit: P[X ≥ 100] is about 0.513.
        let t = binomial_upper_tail(10_000_000_000, 1e-8, 100);
        assert!((t - 0.5133).abs() < 1e-3, "{t}");
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
        // q̄ is below qB/(B + 1), its value at m = B.
        assert!(split.truncated_rate > 0.0 && split.truncated_rate < p * 300.0 / 301.0);
    }
}
