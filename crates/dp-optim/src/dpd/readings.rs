//! The DPD paper's two accountings as this reproduction reads them: DPD-AC (amplified
//! advanced composition) and DPD-zCDP's two readings.

use dp_accounting::{amplify, sampled_advanced_composition, Amplification};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use dp_accounting::validate;

/// Which reading of DPD-zCDP (`docs/reproduction/dpd.md`, "DPD-zCDP: two readings"; the
/// formula is not in the available paper text).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ZcdpReading {
    /// Z2 (default): the amplified per-step ε_step is pure-DP ⇒ ρ_step = ε_step²/2
    /// (δ_iter ignored), ρ_tot = T·ρ_step.
    AmplifiedPureDp,
    /// Z1: the Gaussian with σ = √(2 ln(1.25/δ_iter))/ε_iter gives ρ_step = 1/(2σ²), with
    /// no amplification.
    GaussianNoAmplification,
}

/// DPD-AC's total (ε, δ) (`docs/reproduction/dpd.md`, "DPD-AC: the privacy formula"):
/// [`sampled_advanced_composition`] of the `steps` iterations, each (ε_iter, δ_iter)-DP
/// on its minibatch of rate ν. With `first_order` the second term is `T·ε_step²` (the
/// paper's form for small ε, which understates Thm 3.20 and is not a valid bound) instead
/// of `T·ε_step(e^{ε_step} − 1)`.
///
/// Returns `(ε_tot, δ_tot)` with `δ_tot = T·ν·δ_iter + δ′`.
pub fn dpd_ac_epsilon(
    epsilon_iter: f64,
    delta_iter: f64,
    steps: u64,
    rate: f64,
    delta_prime: f64,
    amplification: Amplification,
    first_order: bool,
) -> Result<(f64, f64)> {
    let (eps, delta) = sampled_advanced_composition(
        epsilon_iter,
        delta_iter,
        steps,
        rate,
        delta_prime,
        amplification,
    )?;
    if first_order {
        let (eps_step, _) = amplify(epsilon_iter, delta_iter, rate, amplification)?;
        let k = steps as f64;
        let first =
            (2.0 * k * (1.0 / delta_prime).ln()).sqrt() * eps_step + k * eps_step * eps_step;
        return Ok((first, delta));
    }
    Ok((eps, delta))
}

/// DPD-zCDP's total ε at `delta_total` under `reading`, converted with Bun & Steinke
/// 2016, Prop. 1.3 (`ε = ρ + 2√(ρ ln 1/δ)`).
pub fn dpd_zcdp_epsilon(
    epsilon_iter: f64,
    delta_iter: f64,
    steps: u64,
    rate: f64,
    delta_total: f64,
    reading: ZcdpReading,
    amplification: Amplification,
) -> Result<f64> {
    validate::open_unit("delta_total", delta_total)?;
    let rho_step = match reading {
        ZcdpReading::AmplifiedPureDp => {
            let (eps_step, _) = amplify(epsilon_iter, delta_iter, rate, amplification)?;
            eps_step * eps_step / 2.0
        }
        ZcdpReading::GaussianNoAmplification => {
            validate::open_unit("delta_iter", delta_iter)?;
            let sigma = (2.0 * (1.25 / delta_iter).ln()).sqrt() / epsilon_iter;
            0.5 / (sigma * sigma)
        }
    };
    let rho = rho_step * steps as f64;
    Ok(rho + 2.0 * (rho * (1.0 / delta_total).ln()).sqrt())
}
