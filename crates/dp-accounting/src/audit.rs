//! One-run privacy auditing: from the score of a canary-guessing game to a lower bound
//! on ε (Steinke, Nasr & Jagielski 2023, "Privacy auditing with one (1) training run",
//! NeurIPS 2023, arXiv 2305.08846).
//!
//! The statement and its use are on [`one_run_epsilon_lower_bound`].

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::logspace::{log_add, log_binomial};

/// The score of a one-run audit: how many canaries, how many guesses, how many right.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AuditOutcome {
    /// m, the canaries, each included independently with probability 1/2.
    pub canaries: u64,
    /// r, the canaries the auditor guessed on (it abstained on the other m − r).
    pub guesses: u64,
    /// v, the correct guesses.
    pub correct: u64,
}

impl AuditOutcome {
    /// Checks `correct ≤ guesses ≤ canaries`.
    pub fn validate(&self) -> Result<()> {
        if self.correct > self.guesses {
            return Err(Error::InvalidParameter {
                name: "correct",
                value: self.correct as f64,
                reason: "must be <= guesses",
            });
        }
        if self.guesses > self.canaries {
            return Err(Error::InvalidParameter {
                name: "guesses",
                value: self.guesses as f64,
                reason: "must be <= canaries",
            });
        }
        if usize::try_from(self.guesses).is_err() {
            return Err(Error::InvalidParameter {
                name: "guesses",
                value: self.guesses as f64,
                reason: "must fit in memory (one pmf term per guess)",
            });
        }
        Ok(())
    }
}

/// The p-value of "the algorithm is (ε, δ)-DP" given `outcome`: the bound of
/// Steinke, Nasr & Jagielski 2023, Theorem 3.1 on the probability of at least
/// `outcome.correct` correct guesses, capped at 1 (see [`one_run_epsilon_lower_bound`]).
pub fn one_run_p_value(outcome: &AuditOutcome, epsilon: f64, delta: f64) -> Result<f64> {
    outcome.validate()?;
    if epsilon.is_nan() || epsilon < 0.0 {
        return Err(Error::InvalidParameter {
            name: "epsilon",
            value: epsilon,
            reason: "must be >= 0 (infinity allowed)",
        });
    }
    check_delta(delta)?;
    Ok(Tails::new(outcome)
        .log_p_value(epsilon, delta)
        .exp()
        .min(1.0))
}

/// The largest ε that an outcome refuses at the given confidence: with probability at
/// least `confidence` over the canaries' inclusion, no (ε, δ)-DP algorithm produces as
/// many correct guesses as `outcome` for any ε below the returned value.
///
/// # The game
/// `m` canaries are each included in the training data independently with probability
/// 1/2. After one training run the auditor guesses, for at most `r` of them (abstaining
/// on the rest), whether each was included; `v` of its guesses are correct. An (ε, δ)-DP
/// algorithm (with respect to adding or removing one canary) cannot make `v` large with
/// high probability, so a large `v` refuses (ε, δ)-DP at some confidence. The guessing
/// rule, and `r`, must be fixed before the guesses are scored against the inclusions.
///
/// # The bound
/// Steinke, Nasr & Jagielski 2023, Theorem 3.1 (their main theorem): let `W` be the
/// number of correct guesses and `f(v) = P[W′ ≥ v]` for `W′ ~ Binomial(r, e^ε/(1+e^ε))`.
/// If the algorithm is (ε, δ)-DP then, for every v,
///
/// ```text
/// P[W ≥ v] ≤ f(v) + 2mδ · max_{i ∈ {1,…,m}} (f(v − i) − f(v)) / i.
/// ```
///
/// For δ = 0 this is the stochastic dominance of `W` by the binomial. The right-hand side
/// is the p-value of the hypothesis "(ε, δ)-DP" given `v`
/// ([`one_run_p_value`]); this function returns the largest ε it rejects.
/// Since `f(v − i) − f(v) = P[v − i ≤ W′ < v]` is constant in i once i ≥ v, the maximum
/// is taken over i = 1..=v, by one running sum of the binomial pmf downward from v − 1
/// (the paper's Appendix D algorithm). Everything is computed in log space: the pmf is
/// `exp(ln C(r, k) + k ln q + (r − k) ln(1 − q))` with `ln q = −ln(1 + e^{−ε})`, and each
/// sum is scaled by its largest term.
///
/// # Privacy
/// A lower bound, by the theorem above: the returned ε̂ has p-value below
/// `1 − confidence`, and an (ε, δ)-DP algorithm is (ε′, δ)-DP for every ε′ ≥ ε, so every
/// ε ≤ ε̂ is refused. ε̂ is found by bisection that keeps this invariant, to 1e-12
/// relative; 0 when even ε = 0 is not refused (e.g. no better than chance:
/// `correct ≤ guesses/2` at confidence ≥ 1/2).
///
/// # Errors
/// [`Error::InvalidParameter`] unless `correct ≤ guesses ≤ canaries`, δ ∈ [0, 1) and
/// `confidence` ∈ (0, 1); [`Error::Numerical`] if no ε up to 10⁶ is accepted (the
/// binomial tail tends to 1, so this is not expected).
pub fn one_run_epsilon_lower_bound(
    outcome: &AuditOutcome,
    delta: f64,
    confidence: f64,
) -> Result<f64> {
    outcome.validate()?;
    check_delta(delta)?;
    check_confidence(confidence)?;
    let log_alpha = (-confidence).ln_1p();
    let tails = Tails::new(outcome);
    let refused = |epsilon: f64| tails.log_p_value(epsilon, delta) < log_alpha;
    // As ε → ∞ the binomial tail tends to 1 > 1 − confidence, so a bracket exists.
    largest_refused(refused, outcome)
}

/// The largest parameter an audit refuses, for a refusal monotone in it (refused below
/// the returned value): 0 when 0 is not refused, else bracket doubling and bisection to
/// 1e-12 relative, keeping the invariant that the returned value is refused.
pub(crate) fn largest_refused(
    refused: impl Fn(f64) -> bool,
    outcome: &AuditOutcome,
) -> Result<f64> {
    if !refused(0.0) {
        return Ok(0.0);
    }
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    while refused(hi) {
        lo = hi;
        hi *= 2.0;
        if hi > 1e6 {
            return Err(Error::Numerical(format!(
                "every value up to {hi} is refused by the audit of {outcome:?}"
            )));
        }
    }
    for _ in 0..200 {
        if hi - lo <= 1e-12 * hi.max(1.0) {
            break;
        }
        let mid = 0.5 * (lo + hi);
        if refused(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// A confidence in (0, 1).
pub(crate) fn check_confidence(confidence: f64) -> Result<()> {
    if confidence.is_nan() || confidence <= 0.0 || confidence >= 1.0 {
        return Err(Error::InvalidParameter {
            name: "confidence",
            value: confidence,
            reason: "must be in (0, 1)",
        });
    }
    Ok(())
}

fn check_delta(delta: f64) -> Result<()> {
    if (0.0..1.0).contains(&delta) {
        Ok(())
    } else {
        Err(Error::InvalidParameter {
            name: "delta",
            value: delta,
            reason: "must be in [0, 1)",
        })
    }
}

/// `ln(1 + e^x)` without overflow.
fn softplus(x: f64) -> f64 {
    if x > 0.0 {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

/// The binomial pmf's ε-free part, `ln C(r, k)` for k = 0..=r, and the outcome.
struct Tails {
    canaries: f64,
    correct: usize,
    log_binomial: Vec<f64>,
}

impl Tails {
    fn new(outcome: &AuditOutcome) -> Self {
        // validate() has checked that r fits in usize.
        let r = outcome.guesses as f64;
        Tails {
            canaries: outcome.canaries as f64,
            correct: outcome.correct as usize,
            log_binomial: (0..=outcome.guesses)
                .map(|k| log_binomial(r, k as f64))
                .collect(),
        }
    }

    /// ln of Theorem 3.1's bound `f(v) + 2mδ · max_{1≤i≤v} P[v − i ≤ W′ < v]/i`.
    fn log_p_value(&self, epsilon: f64, delta: f64) -> f64 {
        let v = self.correct;
        if v == 0 {
            return 0.0; // P[W ≥ 0] = 1
        }
        let r = self.log_binomial.len() - 1;
        let (log_q, log_1mq) = if epsilon.is_infinite() {
            (0.0, f64::NEG_INFINITY)
        } else {
            (-softplus(-epsilon), -softplus(epsilon))
        };
        let log_pmf = |k: usize| {
            let misses = (r - k) as f64;
            // 0 misses with ln(1 − q) = −∞ contribute ln 1.
            let miss_term = if misses == 0.0 { 0.0 } else { misses * log_1mq };
            self.log_binomial[k] + k as f64 * log_q + miss_term
        };
        // f(v) = Σ_{k ≥ v} pmf(k), scaled by its largest term.
        let upper: Vec<f64> = (v..=r).map(log_pmf).collect();
        let log_tail = log_sum(&upper);
        if delta == 0.0 {
            return log_tail;
        }
        // max_i S_i / i with S_i = Σ_{k=v−i}^{v−1} pmf(k), one running sum downward.
        let lower: Vec<f64> = (0..v).rev().map(log_pmf).collect();
        let shift = lower.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if shift == f64::NEG_INFINITY {
            return log_tail;
        }
        let (mut running, mut best) = (0.0f64, 0.0f64);
        for (i, &term) in lower.iter().enumerate() {
            running += (term - shift).exp();
            best = best.max(running / (i + 1) as f64);
        }
        let log_delta_term = (2.0 * self.canaries * delta).ln() + shift + best.ln();
        log_add(log_tail, log_delta_term)
    }
}

/// `ln Σ e^{xᵢ}`, scaled by the largest term (−∞ for an empty or all-zero sum).
fn log_sum(terms: &[f64]) -> f64 {
    let top = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if top == f64::NEG_INFINITY {
        return top;
    }
    top + terms.iter().map(|&t| (t - top).exp()).sum::<f64>().ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softplus_is_stable() {
        assert_eq!(softplus(1000.0), 1000.0);
        assert!((softplus(0.0) - std::f64::consts::LN_2).abs() < 1e-16);
        assert!((softplus(-800.0)).abs() < 1e-300);
    }

    #[test]
    fn infinite_epsilon_accepts_everything() -> Result<()> {
        let outcome = AuditOutcome {
            canaries: 10,
            guesses: 10,
            correct: 10,
        };
        assert_eq!(one_run_p_value(&outcome, f64::INFINITY, 0.0)?, 1.0);
        Ok(())
    }
}
