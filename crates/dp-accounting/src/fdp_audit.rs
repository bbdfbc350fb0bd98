//! The f-DP one-run audit: from the score of the canary-guessing game to a lower bound on
//! a trade-off-function privacy parameter (Mahloujifar, Melis & Chaudhuri 2024,
//! "Auditing f-Differential Privacy in One Run", arXiv 2410.22235, ICML 2025) — the
//! same game and [`AuditOutcome`] as [`one_run_epsilon_lower_bound`](crate::one_run_epsilon_lower_bound)
//! (Steinke, Nasr & Jagielski 2023), with a test that uses the whole trade-off curve of
//! the hypothesis instead of its (ε, δ) point, and so refuses more.
//!
//! # The test
//! Membership (a reconstruction alphabet of 2: each canary is in or out, probability ½
//! each), `m` canaries, `c′` guesses, `c` correct. For a hypothesis with trade-off
//! function `f`, let `g` be the inverse of `x ↦ 1 − f(x)`. The paper's procedure with
//! abstentions (`audit_rh_with_cap`; as implemented by Meta's PrivacyGuard and
//! jax_privacy's `CanaryScoreAuditor.epsilon_one_run_fdp`) sets, with τ = 1 − confidence,
//!
//! ```text
//! r_c = τ·c/m,   h_c = τ·(c′ − c)/m,
//! for i = c − 1 down to 0:
//!     h_i = max(h_{i+1}, g(r_{i+1})),
//!     r_i = r_{i+1} + i/(c′ − i) · (h_i − h_{i+1}),
//! ```
//!
//! and refuses the hypothesis when `r_0 + h_0 > c′/m`: under any f-DP algorithm and any
//! guessing rule fixed in advance, the probability of at least `c` correct guesses is
//! then below τ. (Reading of the recursion: `r_i + h_i` bounds `P[N ≥ i]` from below
//! given `P[N ≥ c] ≥ τ`; f-DP, applied to one canary flipped at random, forces
//! `h_i ≥ g(r_{i+1})`; a total above the `c′/m` that guesses can have contradicts the
//! assumption.) `r` is kept ≤ 1 and `g(0) = 0`, `g(1) = 1`, as jax_privacy does.

use crate::audit::{check_confidence, largest_refused};
use crate::error::{Error, Result};
use crate::gdp::epsilon_for_mu;
use crate::logspace::normal_cdf;
use crate::AuditOutcome;

/// A privacy hypothesis, by its trade-off function.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tradeoff {
    /// μ-GDP: `f(α) = Φ(Φ⁻¹(1 − α) − μ)` (Dong, Roth & Su 2022, Def. 2.7).
    Gaussian {
        /// μ ≥ 0.
        mu: f64,
    },
    /// (ε, δ)-DP: `f(α) = max(0, 1 − δ − e^ε α, e^{−ε}(1 − δ − α))` (Dong, Roth & Su
    /// 2022, Prop. 2.5).
    Approximate {
        /// ε ≥ 0.
        epsilon: f64,
        /// δ ∈ [0, 1).
        delta: f64,
    },
}

impl Tradeoff {
    /// `g(y)`, the inverse of `x ↦ 1 − f(x)`.
    fn blow_up_inverse(&self, y: f64) -> f64 {
        if y <= 0.0 {
            return 0.0;
        }
        if y >= 1.0 {
            return 1.0;
        }
        match *self {
            Tradeoff::Gaussian { mu } => normal_cdf(normal_quantile(y) - mu),
            Tradeoff::Approximate { epsilon, delta } => ((y - delta) * (-epsilon).exp())
                .max(1.0 - delta - epsilon.exp() * (1.0 - y))
                .max(0.0),
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |name, value, reason| {
            Err(Error::InvalidParameter {
                name,
                value,
                reason,
            })
        };
        match *self {
            Tradeoff::Gaussian { mu } if mu.is_nan() || mu < 0.0 => bad("mu", mu, "must be >= 0"),
            Tradeoff::Approximate { epsilon, .. } if epsilon.is_nan() || epsilon < 0.0 => {
                bad("epsilon", epsilon, "must be >= 0")
            }
            Tradeoff::Approximate { delta, .. } if !(0.0..1.0).contains(&delta) => {
                bad("delta", delta, "must be in [0, 1)")
            }
            _ => Ok(()),
        }
    }
}

/// `Φ⁻¹(p)` for p ∈ (0, 1), from statrs' inverse complementary error function.
fn normal_quantile(p: f64) -> f64 {
    -std::f64::consts::SQRT_2 * statrs::function::erf::erfc_inv(2.0 * p)
}

/// Whether `outcome` refuses `hypothesis` at `confidence`: the test above.
pub fn fdp_one_run_refuses(
    outcome: &AuditOutcome,
    hypothesis: Tradeoff,
    confidence: f64,
) -> Result<bool> {
    outcome.validate()?;
    hypothesis.validate()?;
    check_confidence(confidence)?;
    Ok(refuses(outcome, hypothesis, 1.0 - confidence))
}

fn refuses(outcome: &AuditOutcome, hypothesis: Tradeoff, tau: f64) -> bool {
    let (m, guesses, correct) = (
        outcome.canaries as f64,
        outcome.guesses as f64,
        outcome.correct,
    );
    if correct == 0 {
        return false; // no iteration: nothing can contradict the hypothesis.
    }
    let mut r = tau * correct as f64 / m;
    let mut h = tau * (guesses - correct as f64) / m;
    for i in (0..correct).rev() {
        let h_next = h.max(hypothesis.blow_up_inverse(r));
        if h_next == h {
            break; // r and h stay where they are from here down.
        }
        r = (r + i as f64 / (guesses - i as f64) * (h_next - h)).min(1.0);
        h = h_next;
    }
    r + h > guesses / m
}

/// The largest μ the outcome refuses at `confidence`: every μ-GDP hypothesis with a
/// smaller μ is refused (with probability at least `confidence` over the canaries, no
/// μ-GDP algorithm scores as well). 0 when even μ = 0 is not refused. Bisection to 1e-12
/// relative on the refusal, which is monotone in μ (a larger μ has a smaller `g`).
pub fn fdp_one_run_mu_lower_bound(outcome: &AuditOutcome, confidence: f64) -> Result<f64> {
    outcome.validate()?;
    check_confidence(confidence)?;
    let tau = 1.0 - confidence;
    largest_refused(
        |mu| refuses(outcome, Tradeoff::Gaussian { mu }, tau),
        outcome,
    )
}

/// The largest ε the outcome refuses for (ε, δ)-DP at `confidence` with the whole
/// (ε, δ) trade-off curve — comparable with Steinke et al.'s bound at the same δ. And
/// `epsilon_for_mu(δ, μ̂)` of [`fdp_one_run_mu_lower_bound`] is the ε of the refused
/// Gaussian hypotheses at δ (what jax_privacy reports).
pub fn fdp_one_run_epsilon_lower_bound(
    outcome: &AuditOutcome,
    delta: f64,
    confidence: f64,
) -> Result<f64> {
    outcome.validate()?;
    check_confidence(confidence)?;
    Tradeoff::Approximate {
        epsilon: 0.0,
        delta,
    }
    .validate()?;
    let tau = 1.0 - confidence;
    let hypothesis = |epsilon| Tradeoff::Approximate { epsilon, delta };
    largest_refused(|e| refuses(outcome, hypothesis(e), tau), outcome)
}

/// The ε at δ of the Gaussian hypotheses the outcome refuses: `ε(δ)` of μ̂-GDP.
pub fn fdp_one_run_gaussian_epsilon(
    outcome: &AuditOutcome,
    delta: f64,
    confidence: f64,
) -> Result<f64> {
    Tradeoff::Approximate {
        epsilon: 0.0,
        delta,
    }
    .validate()?;
    let mu = fdp_one_run_mu_lower_bound(outcome, confidence)?;
    Ok(epsilon_for_mu(delta, mu))
}
