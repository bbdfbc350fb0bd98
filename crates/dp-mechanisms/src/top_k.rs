//! Private top-k selection.

use dp_accounting::{advanced_composition, DpEvent};
use serde::{Deserialize, Serialize};

use crate::error::{require_scores, Error, Result};
use crate::exponential::{gumbel_keys, ExponentialMechanism};
use crate::mechanism::Mechanism;
use crate::noise::NoiseSource;
use crate::successive_sampling::successive_draws;
use dp_accounting::validate;

/// How the k selections are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TopKMethod {
    /// k rounds of the exponential mechanism over the not-yet-chosen items (O(k·n)).
    Peeling,
    /// Add Gumbel noise once and keep the k largest (O(n) partial selection): the same
    /// distribution over ordered outcomes as peeling (Durfee & Rogers 2019, Lemma 4.2).
    OneShotGumbel,
    /// Peeling's k rounds drawn directly: each round picks an item left with probability
    /// ∝ `exp(ε₀·u/(2Δ))` (the exponential mechanism over what is left) by bucketed
    /// rejection sampling, so n items cost O(n) passes without randomness plus O(k)
    /// random draws, instead of n Gumbel draws. Exact: the same distribution over
    /// ordered outcomes as `Peeling` and `OneShotGumbel`; the fastest when k ≪ n.
    WeightedDraws,
}

/// How the total ε is split into k per-round budgets.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BudgetSplit {
    /// ε/k per round: ε-DP overall (basic composition).
    Basic,
    /// The largest per-round ε₀ whose k-fold advanced composition (Dwork & Roth
    /// Thm 3.20) is ε: (ε, δ′)-DP overall.
    Advanced {
        /// δ′ of the advanced composition theorem.
        delta_prime: f64,
    },
}

/// Selects k items with the largest (noisy) scores.
///
/// # Privacy
/// k adaptive rounds of an ε₀-DP, ε₀-bounded-range exponential mechanism. The event is
/// `SelfComposed(Exponential(ε₀), k)`, so RDP accounting uses the bounded-range curve
/// (Cesar & Rogers 2021) and is tighter than either split; the split only decides ε₀
/// so that basic (Dwork & Roth Thm 3.16) or advanced (Thm 3.20) composition gives the
/// requested total.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TopK {
    round: ExponentialMechanism,
    k: usize,
    method: TopKMethod,
}

impl TopK {
    /// k items, total budget ε, scores of sensitivity Δ.
    pub fn new(
        sensitivity: f64,
        epsilon: f64,
        k: usize,
        monotone: bool,
        method: TopKMethod,
        split: BudgetSplit,
    ) -> Result<Self> {
        validate::positive("epsilon", epsilon)?;
        if k == 0 {
            return Err(Error::InvalidParameter {
                name: "k",
                value: 0.0,
                reason: "must be >= 1",
            });
        }
        let per_round = match split {
            BudgetSplit::Basic => epsilon / k as f64,
            BudgetSplit::Advanced { delta_prime } => {
                validate::open_unit("delta_prime", delta_prime)?;
                per_round_epsilon_advanced(epsilon, k as u64, delta_prime)?
            }
        };
        Ok(TopK {
            round: ExponentialMechanism::new(sensitivity, per_round, monotone)?,
            k,
            method,
        })
    }

    /// ε₀, the budget of each round.
    pub fn per_round_epsilon(&self) -> f64 {
        self.round.epsilon()
    }

    /// The selected indices, in selection order (largest noisy score first).
    pub fn select(&self, scores: &[f64], noise: &mut NoiseSource) -> Result<Vec<usize>> {
        require_scores(scores)?;
        if scores.len() > u32::MAX as usize {
            return Err(Error::InvalidInput("more than 2^32 scores".into()));
        }
        if self.k > scores.len() {
            return Err(Error::InvalidInput(format!(
                "k = {} exceeds the {} scores",
                self.k,
                scores.len()
            )));
        }
        Ok(match self.method {
            TopKMethod::Peeling => self.peel(scores, noise),
            TopKMethod::OneShotGumbel => self.one_shot(scores, noise),
            TopKMethod::WeightedDraws => {
                successive_draws(scores, self.round.score_scale(), self.k, noise)
            }
        })
    }

    fn peel(&self, scores: &[f64], noise: &mut NoiseSource) -> Vec<usize> {
        let scale = self.round.score_scale();
        let mut remaining: Vec<usize> = (0..scores.len()).collect();
        let mut chosen = Vec::with_capacity(self.k);
        for _ in 0..self.k {
            let mut best = (0, f64::NEG_INFINITY);
            for (slot, &i) in remaining.iter().enumerate() {
                let key = scale * scores[i] + noise.standard_gumbel();
                if key > best.1 {
                    best = (slot, key);
                }
            }
            chosen.push(remaining.swap_remove(best.0));
        }
        chosen
    }

    fn one_shot(&self, scores: &[f64], noise: &mut NoiseSource) -> Vec<usize> {
        let keys = gumbel_keys(scores, self.round.score_scale(), noise);
        largest_keys(&keys, self.k)
    }
}

/// Indices of the k largest keys, largest first. Exact; the noise is already in the keys,
/// so how they are searched is post-processing. A strided sample of the keys gives a
/// threshold that about 1.5k keys exceed; only those are partially sorted, and if fewer
/// than k pass, the full partial selection runs instead.
fn largest_keys(keys: &[f64], k: usize) -> Vec<usize> {
    let descending = |a: &(f64, u32), b: &(f64, u32)| b.0.total_cmp(&a.0);
    let top_of = |mut keyed: Vec<(f64, u32)>| {
        if k < keyed.len() {
            keyed.select_nth_unstable_by(k - 1, descending);
            keyed.truncate(k);
        }
        keyed.sort_unstable_by(descending);
        keyed
            .into_iter()
            .map(|(_, i)| i as usize)
            .collect::<Vec<_>>()
    };
    let n = keys.len();
    let stride = (n / 8192).max(1);
    if stride > 1 {
        let mut sample: Vec<f64> = keys.iter().step_by(stride).copied().collect();
        let rank = ((1.5 * k as f64 / n as f64) * sample.len() as f64).ceil() as usize + 16;
        if rank < sample.len() {
            sample.select_nth_unstable_by(rank, |a, b| b.total_cmp(a));
            let threshold = sample[rank];
            let candidates: Vec<(f64, u32)> = keys
                .iter()
                .enumerate()
                .filter(|(_, &key)| key >= threshold)
                .map(|(i, &key)| (key, i as u32))
                .collect();
            if candidates.len() >= k {
                return top_of(candidates);
            }
        }
    }
    top_of(
        keys.iter()
            .enumerate()
            .map(|(i, &key)| (key, i as u32))
            .collect(),
    )
}

/// The largest ε₀ with `√(2k ln(1/δ′))ε₀ + kε₀(e^{ε₀} − 1) ≤ ε` (bisection).
fn per_round_epsilon_advanced(epsilon: f64, k: u64, delta_prime: f64) -> Result<f64> {
    let total = |e0: f64| advanced_composition(e0, 0.0, k, delta_prime).map(|(e, _)| e);
    let (mut lo, mut hi) = (0.0, epsilon);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if total(mid)? <= epsilon {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    if lo <= 0.0 {
        return Err(Error::InvalidParameter {
            name: "epsilon",
            value: epsilon,
            reason: "too small to split",
        });
    }
    Ok(lo)
}

impl Mechanism for TopK {
    fn event(&self) -> DpEvent {
        DpEvent::self_composed(self.round.event(), self.k as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::largest_keys;

    /// The sampled-threshold path and the full selection agree, including ties and
    /// adversarial orderings.
    #[test]
    fn largest_keys_matches_a_full_sort() {
        let n = 100_000;
        for (pattern, k) in [
            (0usize, 1000usize),
            (1, 1),
            (2, 50_000),
            (3, 99_999),
            (4, 7),
        ] {
            let keys: Vec<f64> = (0..n)
                .map(|i| match pattern {
                    0 => ((i * 7919) % n) as f64,
                    1 => i as f64,
                    2 => (n - i) as f64,
                    3 => (i % 3) as f64,
                    _ => {
                        if i % 10_000 == 0 {
                            1e9
                        } else {
                            0.0
                        }
                    }
                })
                .collect();
            let got = largest_keys(&keys, k);
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| keys[b].total_cmp(&keys[a]));
            let want_keys: Vec<f64> = order[..k].iter().map(|&i| keys[i]).collect();
            let got_keys: Vec<f64> = got.iter().map(|&i| keys[i]).collect();
            assert_eq!(got_keys, want_keys, "pattern {pattern}, k {k}");
            let mut distinct = got.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), k);
        }
    }
}
