//! Floating-point releases on a 2^k grid with exact integer noise (OpenDP's approach).

use dp_accounting::DpEvent;

use super::discrete::{DiscreteGaussian, DiscreteLaplace, Rational};
use crate::error::{Error, Result};
use crate::mechanism::Mechanism;
use crate::noise::NoiseSource;
use dp_accounting::validate;

/// The input rounded to the grid 2^k, as an integer number of grid steps.
fn to_grid(value: f64, grid_exponent: i32) -> Result<i64> {
    let steps = (value * 2f64.powi(-grid_exponent)).round();
    if !steps.is_finite() || steps.abs() >= 2f64.powi(52) {
        return Err(Error::InvalidInput(format!(
            "{value} is not representable on the grid 2^{grid_exponent} (needs |value| < 2^{})",
            52 + grid_exponent
        )));
    }
    Ok(steps as i64)
}

fn from_grid(steps: i64, grid_exponent: i32) -> Result<f64> {
    if steps.unsigned_abs() >= 1 << 53 {
        return Err(Error::InvalidInput(
            "noisy value left the exactly representable range".into(),
        ));
    }
    Ok(steps as f64 * 2f64.powi(grid_exponent))
}

/// `value` rounded to the grid 2^k, plus `noise_steps` grid steps, as a float.
fn release_on_grid(value: f64, grid_exponent: i32, noise_steps: i64) -> Result<f64> {
    let noisy = to_grid(value, grid_exponent)?
        .checked_add(noise_steps)
        .ok_or_else(|| Error::InvalidInput("overflow".into()))?;
    from_grid(noisy, grid_exponent)
}

/// The sensitivity in grid steps after rounding: two inputs within Δ round to integers
/// within ⌊Δ/2^k⌋ + 1.
fn grid_sensitivity(sensitivity: f64, grid_exponent: i32) -> Result<u64> {
    let steps = (sensitivity * 2f64.powi(-grid_exponent)).floor() + 1.0;
    if !(steps.is_finite() && steps < 2f64.powi(40)) {
        return Err(Error::InvalidParameter {
            name: "grid_exponent",
            value: f64::from(grid_exponent),
            reason: "is too fine for this sensitivity",
        });
    }
    Ok(steps as u64)
}

/// A grid exponent k with 2^k about 1/1024 of `scale`: fine enough to be invisible next
/// to the noise, coarse enough for exact 128-bit sampling.
pub(crate) fn default_grid_exponent(scale: f64) -> i32 {
    scale.log2().floor() as i32 - 10
}

/// The Laplace mechanism on a float, hardened: the input is rounded to the grid 2^k, a
/// discrete Laplace sample is added, and the output is a grid point.
///
/// # Privacy
/// ε-DP with ε = Δ_k/t, where Δ_k = ⌊Δ/2^k⌋ + 1 is the sensitivity in grid steps after
/// rounding and t the discrete Laplace scale (CKS20 Prop. 1; the rounding argument is
/// OpenDP's `make_laplace` on floats). Not subject to Mironov's (2012) attack: every
/// output is a multiple of 2^k. The event is `EpsilonDelta { epsilon, delta: 0 }`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GridLaplace {
    noise: DiscreteLaplace,
    grid_exponent: i32,
    grid_sensitivity: u64,
}

impl GridLaplace {
    /// ε-DP for a query of sensitivity Δ, on the grid 2^k (`None`: about scale/1024).
    pub fn new(sensitivity: f64, epsilon: f64, grid_exponent: Option<i32>) -> Result<Self> {
        validate::positive("sensitivity", sensitivity)?;
        validate::positive("epsilon", epsilon)?;
        let k = grid_exponent.unwrap_or_else(|| default_grid_exponent(sensitivity / epsilon));
        let grid_sensitivity = grid_sensitivity(sensitivity, k)?;
        let scale = Rational::at_least("scale", grid_sensitivity as f64 / epsilon)?;
        Ok(GridLaplace {
            noise: DiscreteLaplace::new(scale)?,
            grid_exponent: k,
            grid_sensitivity,
        })
    }

    /// The grid exponent k.
    pub fn grid_exponent(&self) -> i32 {
        self.grid_exponent
    }

    /// ε actually guaranteed (≤ the requested ε; the scale was rounded up).
    pub fn epsilon(&self) -> f64 {
        self.grid_sensitivity as f64 / self.noise.scale().to_f64()
    }

    /// Releases one value.
    pub fn release(&self, value: f64, noise: &mut NoiseSource) -> Result<f64> {
        release_on_grid(value, self.grid_exponent, self.noise.sample(noise)?)
    }
}

impl Mechanism for GridLaplace {
    fn event(&self) -> DpEvent {
        self.noise.event(self.grid_sensitivity)
    }
}

/// The Gaussian mechanism on a float, hardened: grid rounding plus a discrete Gaussian.
///
/// # Privacy
/// ρ-zCDP with ρ = Δ_k²/(2σ_k²), Δ_k = ⌊Δ/2^k⌋ + 1 and σ_k the discrete Gaussian's σ in
/// grid steps (CKS20 Thm 4). The event is `ZCdp { rho }`: the RDP and zCDP accountants
/// compose it as (α, ρα)-RDP (Bun & Steinke 2016, Def. 1.1; under Poisson sampling by Zhu
/// & Wang's general bound); the GDP and PLD accountants refuse it, since zCDP does not
/// imply the continuous Gaussian's trade-off curve.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GridGaussian {
    noise: DiscreteGaussian,
    grid_exponent: i32,
    grid_sensitivity: u64,
}

impl GridGaussian {
    /// ρ-zCDP for a query of L2 sensitivity Δ, on the grid 2^k (`None`: about σ/1024).
    pub fn new(sensitivity: f64, rho: f64, grid_exponent: Option<i32>) -> Result<Self> {
        validate::positive("sensitivity", sensitivity)?;
        validate::positive("rho", rho)?;
        let target_sigma = sensitivity / (2.0 * rho).sqrt();
        let k = grid_exponent.unwrap_or_else(|| default_grid_exponent(target_sigma));
        let grid_sensitivity = grid_sensitivity(sensitivity, k)?;
        let sigma = grid_sensitivity as f64 / (2.0 * rho).sqrt();
        Ok(GridGaussian {
            noise: DiscreteGaussian::new(sigma)?,
            grid_exponent: k,
            grid_sensitivity,
        })
    }

    /// The grid exponent k.
    pub fn grid_exponent(&self) -> i32 {
        self.grid_exponent
    }

    /// ρ actually guaranteed (≤ the requested ρ).
    pub fn rho(&self) -> f64 {
        let d = self.grid_sensitivity as f64;
        d * d / (2.0 * self.noise.sigma_squared().to_f64())
    }

    /// Releases one value.
    pub fn release(&self, value: f64, noise: &mut NoiseSource) -> Result<f64> {
        release_on_grid(value, self.grid_exponent, self.noise.sample(noise)?)
    }
}

impl Mechanism for GridGaussian {
    fn event(&self) -> DpEvent {
        self.noise.event(self.grid_sensitivity)
    }
}
