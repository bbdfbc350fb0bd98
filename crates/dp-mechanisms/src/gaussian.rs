//! The Gaussian mechanism.

use dp_accounting::gdp::mu_for_delta;
use dp_accounting::DpEvent;

use crate::error::{Error, Result};
use crate::mechanism::Mechanism;
use crate::noise::NoiseSource;
use dp_accounting::validate;

/// Adds `N(0, (σΔ)²)` noise to a query of L2 sensitivity Δ.
///
/// # Privacy
/// Its privacy loss distribution is that of `N(0,1)` against `N(1/σ, 1)`: it is
/// (1/σ)-GDP (Dong, Roth, Su 2019, Thm 2.7), `1/(2σ²)`-zCDP (Bun & Steinke 2016,
/// Prop. 1.6), and (ε, δ)-DP exactly when `δ ≥ Φ(−εσ + 1/(2σ)) − e^ε Φ(−εσ − 1/(2σ))`
/// (Balle & Wang 2018, Thm 8). The event is `Gaussian { noise_multiplier: σ }`.
///
/// Releases use the fast floating-point Gaussian (ziggurat over ChaCha20): right for
/// DP-SGD's millions of draws, but not hardened against the floating-point attacks of
/// Mironov 2012; use [`crate::hardened::GridGaussian`] for scalar releases that must be.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GaussianMechanism {
    sensitivity: f64,
    noise_multiplier: f64,
}

impl GaussianMechanism {
    /// From the L2 sensitivity Δ and the noise multiplier σ (std = σΔ).
    pub fn new(sensitivity: f64, noise_multiplier: f64) -> Result<Self> {
        validate::positive("sensitivity", sensitivity)?;
        validate::positive("noise_multiplier", noise_multiplier)?;
        Ok(GaussianMechanism {
            sensitivity,
            noise_multiplier,
        })
    }

    /// (ε, δ)-DP by the classic bound `σ = √(2 ln(1.25/δ))/ε`.
    ///
    /// # Privacy
    /// Dwork & Roth 2014, Thm A.1, which holds for ε ∈ (0, 1) only; larger ε is refused.
    pub fn from_epsilon_delta_classic(sensitivity: f64, epsilon: f64, delta: f64) -> Result<Self> {
        validate::positive("epsilon", epsilon)?;
        validate::open_unit("delta", delta)?;
        if epsilon >= 1.0 {
            return Err(Error::InvalidParameter {
                name: "epsilon",
                value: epsilon,
                reason: "must be < 1 for the classic Gaussian bound (Dwork & Roth Thm A.1); use the analytic calibration",
            });
        }
        Self::new(sensitivity, (2.0 * (1.25 / delta).ln()).sqrt() / epsilon)
    }

    /// (ε, δ)-DP with the smallest σ: the analytic Gaussian mechanism.
    ///
    /// # Privacy
    /// Balle & Wang 2018 (ICML, arXiv 1805.06530), Thm 8: the exact δ(ε) of the Gaussian
    /// is the μ-GDP curve with μ = 1/σ; σ is found by bisection on μ and rounded so that
    /// δ(ε) ≤ δ holds at the returned σ.
    pub fn from_epsilon_delta_analytic(sensitivity: f64, epsilon: f64, delta: f64) -> Result<Self> {
        validate::positive("epsilon", epsilon)?;
        validate::open_unit("delta", delta)?;
        let mu = mu_for_delta(epsilon, delta);
        if !(mu.is_finite() && mu > 0.0) {
            return Err(Error::InvalidParameter {
                name: "delta",
                value: delta,
                reason: "admits no finite noise scale",
            });
        }
        Self::new(sensitivity, 1.0 / mu)
    }

    /// μ-GDP: σ = 1/μ (Dong, Roth, Su 2019, Thm 2.7).
    pub fn from_gdp(sensitivity: f64, mu: f64) -> Result<Self> {
        Self::new(sensitivity, 1.0 / validate::positive("mu", mu)?)
    }

    /// ρ-zCDP: σ = 1/√(2ρ) (Bun & Steinke 2016, Prop. 1.6).
    pub fn from_zcdp(sensitivity: f64, rho: f64) -> Result<Self> {
        Self::new(
            sensitivity,
            1.0 / (2.0 * validate::positive("rho", rho)?).sqrt(),
        )
    }

    /// The L2 sensitivity Δ the noise is calibrated to.
    pub fn sensitivity(&self) -> f64 {
        self.sensitivity
    }

    /// The noise multiplier σ: the noise standard deviation over the sensitivity.
    pub fn noise_multiplier(&self) -> f64 {
        self.noise_multiplier
    }

    /// The noise standard deviation σΔ.
    pub fn std_dev(&self) -> f64 {
        self.noise_multiplier * self.sensitivity
    }

    /// Releases one value.
    pub fn release(&self, value: f64, noise: &mut NoiseSource) -> f64 {
        value + self.std_dev() * noise.standard_normal()
    }

    /// Releases a vector in place (one composition: the sensitivity is the vector's L2
    /// sensitivity).
    pub fn release_in_place_f32(&self, values: &mut [f32], noise: &mut NoiseSource) {
        noise.add_gaussian_f32(values, self.std_dev());
    }

    /// Releases a vector in place.
    pub fn release_in_place_f64(&self, values: &mut [f64], noise: &mut NoiseSource) {
        noise.add_gaussian_f64(values, self.std_dev());
    }
}

impl Mechanism for GaussianMechanism {
    fn event(&self) -> DpEvent {
        DpEvent::gaussian(self.noise_multiplier)
    }
}
