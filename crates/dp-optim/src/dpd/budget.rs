//! A DPD budget `(ε_tot, δ_tot)` over T iterations, and σ calibrated from it.

use dp_accounting::{zcdp_to_epsilon, Amplification, ZcdpConversion};
use dp_mechanisms::GaussianMechanism;
use serde::{Deserialize, Serialize};

use super::readings::{dpd_ac_epsilon, dpd_zcdp_epsilon, ZcdpReading};
use crate::error::{Error, Result};
use dp_accounting::validate;

/// How DPD composes its per-iteration guarantee into `ε_tot`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum DpdComposition {
    /// DPD-AC: amplify, then advanced composition (Dwork & Roth 2014, Thm 3.20) with
    /// slack δ′ (`docs/reproduction/dpd.md`, "DPD-AC: the privacy formula").
    Advanced {
        /// Use the paper's first-order form `√(2T ln 1/δ′)·ε + T·ε²`, which understates
        /// Thm 3.20's `T·ε(e^ε − 1)` and is therefore not a valid bound; off by default.
        first_order: bool,
    },
    /// DPD-zCDP (`docs/reproduction/dpd.md`, "DPD-zCDP: two readings"; the formula is not in the available text).
    Zcdp {
        /// Z2 (amplified pure-DP steps, the default) or Z1 (Gaussian, no amplification).
        reading: ZcdpReading,
    },
}

impl DpdComposition {
    /// DPD-AC with Thm 3.20 as stated.
    pub const AC: Self = DpdComposition::Advanced { first_order: false };
    /// DPD-zCDP in the Z2 reading.
    pub const ZCDP: Self = DpdComposition::Zcdp {
        reading: ZcdpReading::AmplifiedPureDp,
    };
}

/// How σ is computed from `(ε_iter, δ_iter)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GaussianCalibration {
    /// The paper's `σ = √(2 ln(1.25/δ_iter))/ε_iter` (Dwork & Roth Thm A.1), valid for
    /// `ε_iter < 1` only: a budget that needs more is refused.
    #[default]
    Classic,
    /// The analytic Gaussian (Balle & Wang 2018, Thm 8): the smallest σ, valid for all ε.
    Analytic,
}

/// A DPD budget: what the paper calibrates σ from.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DpdBudget {
    /// ε_tot, the whole run's ε that the per-iteration budget is derived from.
    pub epsilon_total: f64,
    /// δ_tot, the whole run's δ (advanced composition spends δ′ of it).
    pub delta_total: f64,
    /// δ′, advanced composition's slack (the paper's experiments: δ_tot/2 in the stand-in).
    pub delta_prime: f64,
    /// T, the number of iterations.
    pub steps: u64,
    /// ν = S/N.
    pub sampling_rate: f64,
    /// AC or zCDP.
    pub composition: DpdComposition,
    /// The amplification-by-subsampling bound (`docs/accounting.md`, "Amplification by subsampling").
    pub amplification: Amplification,
    /// Classic or analytic Gaussian.
    pub gaussian: GaussianCalibration,
}

/// The result of [`DpdBudget::calibrate`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DpdCalibration {
    /// The largest per-iteration ε whose composition meets ε_tot.
    pub epsilon_iter: f64,
    /// `(δ_tot − δ′)/(Tν)`.
    pub delta_iter: f64,
    /// σ as the DPD paper writes it, not the noise multiplier: the noise on the clipped
    /// sum has standard deviation `2Cσ`, so the engine's multiplier is `2σ`
    /// ([`DpdCalibration::noise_multiplier`]). Serialised as `sigma`, the name in the
    /// run cache's records.
    #[serde(rename = "sigma")]
    pub paper_sigma: f64,
    /// ε_tot as composed from `epsilon_iter` (≤ the target, equal to it to ~1e-12).
    pub epsilon_total: f64,
}

impl DpdCalibration {
    /// The engine's noise multiplier (noise std over the clipping norm C): `2σ`.
    pub fn noise_multiplier(&self) -> f64 {
        2.0 * self.paper_sigma
    }
}

impl DpdBudget {
    /// `δ_iter = (δ_tot − δ′)/(Tν)` (the paper's bookkeeping: T amplified steps cost
    /// `Tνδ_iter`, advanced composition's slack δ′).
    pub fn delta_iter(&self) -> Result<f64> {
        validate::open_unit("delta_total", self.delta_total)?;
        if !(self.delta_prime > 0.0 && self.delta_prime < self.delta_total) {
            return Err(Error::InvalidParameter {
                name: "delta_prime",
                value: self.delta_prime,
                reason: "must be in (0, delta_total)",
            });
        }
        validate::rate("sampling_rate", self.sampling_rate)?;
        validate::at_least_one("steps", self.steps as usize)?;
        validate::positive("epsilon_total", self.epsilon_total)?;
        let delta_iter =
            (self.delta_total - self.delta_prime) / (self.steps as f64 * self.sampling_rate);
        if delta_iter >= 1.0 {
            return Err(Error::InvalidParameter {
                name: "delta_iter",
                value: delta_iter,
                reason: "must be below 1: (delta_total - delta_prime) / (steps * rate)",
            });
        }
        Ok(delta_iter)
    }

    /// σ for a per-iteration `(ε_iter, δ_iter)` (sensitivity-free: the noise on the sum is
    /// `2C·σ`).
    pub fn sigma_for(&self, epsilon_iter: f64) -> Result<f64> {
        let delta_iter = self.delta_iter()?;
        let gaussian = match self.gaussian {
            GaussianCalibration::Classic => {
                GaussianMechanism::from_epsilon_delta_classic(1.0, epsilon_iter, delta_iter)?
            }
            GaussianCalibration::Analytic => {
                GaussianMechanism::from_epsilon_delta_analytic(1.0, epsilon_iter, delta_iter)?
            }
        };
        Ok(gaussian.noise_multiplier())
    }

    /// ε_tot composed from `epsilon_iter`.
    ///
    /// - AC: [`dpd_ac_epsilon`] — amplification, then Dwork & Roth Thm 3.20; δ_tot =
    ///   Tνδ_iter + δ′.
    /// - zCDP Z2: each amplified step is ε_step-DP, hence ε_step²/2-zCDP (Bun & Steinke
    ///   2016, Prop. 1.4), up to its δ_step = νδ_iter (approximate zCDP, their Def. 8.1),
    ///   which composes additively into Tνδ_iter; the conversion (Prop. 1.3) is taken at
    ///   δ′, so the total δ is δ_tot as for AC. (Converting at δ_tot would spend δ twice.)
    /// - zCDP Z1: the Gaussian with this σ is 1/(2σ²)-zCDP per step with no amplification
    ///   and no δ_iter, converted at δ_tot.
    pub fn total_epsilon(&self, epsilon_iter: f64) -> Result<f64> {
        let delta_iter = self.delta_iter()?;
        let (t, nu) = (self.steps, self.sampling_rate);
        Ok(match self.composition {
            DpdComposition::Advanced { first_order } => {
                dpd_ac_epsilon(
                    epsilon_iter,
                    delta_iter,
                    t,
                    nu,
                    self.delta_prime,
                    self.amplification,
                    first_order,
                )?
                .0
            }
            DpdComposition::Zcdp {
                reading: reading @ ZcdpReading::AmplifiedPureDp,
            } => dpd_zcdp_epsilon(
                epsilon_iter,
                delta_iter,
                t,
                nu,
                self.delta_prime,
                reading,
                self.amplification,
            )?,
            DpdComposition::Zcdp {
                reading: ZcdpReading::GaussianNoAmplification,
            } => {
                let sigma = self.sigma_for(epsilon_iter)?;
                let rho = t as f64 / (2.0 * sigma * sigma);
                zcdp_to_epsilon(rho, 0.0, self.delta_total, ZcdpConversion::Simple)?
            }
        })
    }

    /// The largest `ε_iter` whose composition is ≤ ε_tot, and its σ.
    ///
    /// Bisection on `ε_iter` (ε_tot is increasing in it). Refused, with the reason, when the
    /// budget would need `ε_iter` outside the domain of a chosen theorem (the loose
    /// amplification and the classic Gaussian both need `ε_iter ≤ 1`).
    pub fn calibrate(&self) -> Result<DpdCalibration> {
        let delta_iter = self.delta_iter()?;
        let capped = self.amplification == Amplification::Loose
            || self.gaussian == GaussianCalibration::Classic;
        // Z1's ε depends on σ, which the classic rule only defines below 1.
        let cap = if capped { 1.0 - 1e-12 } else { 1e3 };
        let total = |e: f64| self.total_epsilon(e);
        let mut hi = if capped { cap } else { 1.0 };
        while total(hi)? <= self.epsilon_total {
            if hi >= cap {
                return Err(Error::InvalidSetting {
                    name: "epsilon_total",
                    value: self.epsilon_total.to_string(),
                    reason: format!(
                        "needs a per-iteration epsilon above {hi:.3}, outside the domain of \
                         the {} (use the tight amplification and the analytic Gaussian)",
                        if self.amplification == Amplification::Loose {
                            "loose amplification bound (eps <= 1)"
                        } else {
                            "classic Gaussian bound (Dwork & Roth Thm A.1, eps < 1)"
                        }
                    ),
                });
            }
            hi = (2.0 * hi).min(cap);
        }
        let mut lo = 0.0;
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if mid <= lo || mid >= hi {
                break;
            }
            if total(mid)? <= self.epsilon_total {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        if lo == 0.0 {
            return Err(Error::InvalidSetting {
                name: "epsilon_total",
                value: self.epsilon_total.to_string(),
                reason: format!("too small for {} iterations", self.steps),
            });
        }
        Ok(DpdCalibration {
            epsilon_iter: lo,
            delta_iter,
            paper_sigma: self.sigma_for(lo)?,
            epsilon_total: total(lo)?,
        })
    }
}
