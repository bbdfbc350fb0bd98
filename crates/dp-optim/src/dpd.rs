//! Differentially private dropout (Ermis & Cemgil 2017, arXiv 1712.01665;
//! `docs/reproduction/dpd.md`, "The paper as this reproduction reads it"): SGLD whose injected noise is read as Gaussian dropout.
//!
//! Each iteration clips per-example gradients to C, adds `N(0, (2C)²σ² I)` to their sum
//! (replace-one neighbours: the sum has sensitivity 2C) and takes an SGLD-form step with a
//! Robbins–Monro step size. σ comes from a per-iteration budget `(ε_iter, δ_iter)` by the
//! Gaussian mechanism, and `ε_iter` is the largest value whose composition over T
//! iterations meets `ε_tot`: by advanced composition (DPD-AC) or through zCDP (DPD-zCDP).
//! The noise, read as Gaussian dropout `N(0, α θ²)`, implies the per-weight rate
//! `α = 4C²σ²/θ²`, reported by [`implied_dropout_rates`].
//!
//! The paper's Algorithm box, its amplification theorem and its zCDP formula are not in
//! the available text; every reading taken here is a switch, documented in
//! `docs/reproduction/dpd.md`.

use std::ops::Range;

use dp_accounting::{
    amplify, sampled_advanced_composition, zcdp_to_epsilon, AccountantKind, Amplification,
    OrderGrid, ZcdpConversion,
};
use dp_mechanisms::GaussianMechanism;
use dp_models::data::Dataset;
use dp_models::PrivateModel;
use serde::{Deserialize, Serialize};

use crate::algorithm::Algorithm;
use crate::error::{Error, Result};
use crate::evaluate::for_each_logit_batch;
use crate::{
    Clipping, GradientNormalisation, Optimizer, PrivacyConfig, PrivacyEngine, Sampler, StepReport,
    TrainConfig,
};

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
    if !(delta_total > 0.0 && delta_total < 1.0) {
        return Err(Error::InvalidConfig(format!(
            "delta_total {delta_total} must be in (0, 1)"
        )));
    }
    let rho_step = match reading {
        ZcdpReading::AmplifiedPureDp => {
            let (eps_step, _) = amplify(epsilon_iter, delta_iter, rate, amplification)?;
            eps_step * eps_step / 2.0
        }
        ZcdpReading::GaussianNoAmplification => {
            if !(delta_iter > 0.0 && delta_iter < 1.0) {
                return Err(Error::InvalidConfig(format!(
                    "delta_iter {delta_iter} must be in (0, 1)"
                )));
            }
            let sigma = (2.0 * (1.25 / delta_iter).ln()).sqrt() / epsilon_iter;
            0.5 / (sigma * sigma)
        }
    };
    let rho = rho_step * steps as f64;
    Ok(rho + 2.0 * (rho * (1.0 / delta_total).ln()).sqrt())
}

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
    /// ε_tot.
    pub epsilon_total: f64,
    /// δ_tot.
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
    /// σ: the noise on the clipped sum has standard deviation `2Cσ`.
    pub sigma: f64,
    /// ε_tot as composed from `epsilon_iter` (≤ the target, equal to it to ~1e-12).
    pub epsilon_total: f64,
}

impl DpdCalibration {
    /// The engine's noise multiplier (noise std over the clipping norm C): `2σ`.
    pub fn noise_multiplier(&self) -> f64 {
        2.0 * self.sigma
    }
}

impl DpdBudget {
    /// `δ_iter = (δ_tot − δ′)/(Tν)` (the paper's bookkeeping: T amplified steps cost
    /// `Tνδ_iter`, advanced composition's slack δ′).
    pub fn delta_iter(&self) -> Result<f64> {
        let bad = |what: String| Err(Error::InvalidConfig(what));
        if !(self.delta_total > 0.0 && self.delta_total < 1.0) {
            return bad(format!(
                "delta_total {} must be in (0, 1)",
                self.delta_total
            ));
        }
        if !(self.delta_prime > 0.0 && self.delta_prime < self.delta_total) {
            return bad(format!(
                "delta_prime {} must be in (0, delta_total = {})",
                self.delta_prime, self.delta_total
            ));
        }
        if !(self.sampling_rate > 0.0 && self.sampling_rate <= 1.0) {
            return bad(format!(
                "sampling rate {} must be in (0, 1]",
                self.sampling_rate
            ));
        }
        if self.steps == 0 {
            return bad("DPD needs at least one iteration".into());
        }
        if !(self.epsilon_total.is_finite() && self.epsilon_total > 0.0) {
            return bad(format!("epsilon_total {} must be > 0", self.epsilon_total));
        }
        let delta_iter =
            (self.delta_total - self.delta_prime) / (self.steps as f64 * self.sampling_rate);
        if delta_iter >= 1.0 {
            return bad(format!("delta_iter {delta_iter} is not below 1"));
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
                return Err(Error::InvalidConfig(format!(
                    "epsilon_total {} needs a per-iteration epsilon above {hi:.3}, outside the domain \
                     of the {} (use the tight amplification and the analytic Gaussian)",
                    self.epsilon_total,
                    if self.amplification == Amplification::Loose {
                        "loose amplification bound (eps <= 1)"
                    } else {
                        "classic Gaussian bound (Dwork & Roth Thm A.1, eps < 1)"
                    }
                )));
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
            return Err(Error::InvalidConfig(format!(
                "epsilon_total {} is too small for {} iterations",
                self.epsilon_total, self.steps
            )));
        }
        Ok(DpdCalibration {
            epsilon_iter: lo,
            delta_iter,
            sigma: self.sigma_for(lo)?,
            epsilon_total: total(lo)?,
        })
    }
}

/// Where the DPD noise is added.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoisePlacement {
    /// `N(0, (2Cσ)²)` on the clipped gradient sum (privacy-safe; the default).
    #[default]
    ClippedSum,
    /// `N(0, (2Cσ)²)` on the parameter update, as the paper's text reads literally. With
    /// the update `θ ← θ − lr_t·(G/S)`, that equals noise `2Cσ·S/lr_t` on the sum, so the
    /// calibrated (ε_iter, δ_iter) holds only while `lr_t ≤ S` (in SGLD terms
    /// `η_t N/(2S) ≤ 1`). The ledger records each step's actual noise, so ε is right either
    /// way; the paper's ε is not, where `lr_t > S`.
    ParameterUpdate,
}

/// The Robbins–Monro step size `lr_t = lr₀·(1 + t/t₀)^(−γ)` applied to the averaged noisy
/// gradient (Welling & Teh 2011's `a(b + t)^(−γ)`): `Σ lr_t = ∞` and `Σ lr_t² < ∞` iff
/// `0.5 < γ ≤ 1`. In SGLD's notation `η_t = 2·lr_t/N`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepSizeSchedule {
    /// lr₀.
    pub initial: f64,
    /// t₀ (iterations).
    pub decay_steps: f64,
    /// γ ∈ (0.5, 1].
    pub power: f64,
}

impl StepSizeSchedule {
    /// Checks the Robbins–Monro conditions.
    pub fn validate(&self) -> Result<()> {
        if !(self.initial.is_finite() && self.initial > 0.0) {
            return Err(Error::InvalidConfig(format!(
                "initial step size {} must be > 0",
                self.initial
            )));
        }
        if !(self.decay_steps.is_finite() && self.decay_steps > 0.0) {
            return Err(Error::InvalidConfig(format!(
                "decay_steps {} must be > 0",
                self.decay_steps
            )));
        }
        if !(self.power > 0.5 && self.power <= 1.0) {
            return Err(Error::InvalidConfig(format!(
                "power {} breaks the Robbins-Monro conditions (need 0.5 < power <= 1)",
                self.power
            )));
        }
        Ok(())
    }

    /// lr_t at 0-based iteration `t`.
    pub fn at(&self, t: u64) -> f64 {
        self.initial * (1.0 + t as f64 / self.decay_steps).powf(-self.power)
    }
}

impl crate::LearningRateSchedule for StepSizeSchedule {
    fn learning_rate(&self, step: u64) -> f64 {
        self.at(step)
    }
}

/// DPD's training loop settings, layered on a [`PrivacyEngine`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DpdTraining {
    /// The calibrated budget (σ).
    pub calibration: DpdCalibration,
    /// C.
    pub clip: f64,
    /// Minibatches (the paper: fixed-size S; its analysis: Poisson with rate ν).
    pub sampler: Sampler,
    /// lr_t.
    pub schedule: StepSizeSchedule,
    /// λ of the Gaussian prior `N(0, I/λ)`: the step adds `(η_t/2)·λθ = (lr_t/N)·λθ`.
    /// 0 drops the prior (the paper does not specify it).
    pub prior_precision: f64,
    /// Where the noise goes.
    pub placement: NoisePlacement,
    /// δ at which the engine's ledger reports ε.
    pub ledger_delta: f64,
}

impl DpdTraining {
    /// The engine configuration: flat clipping at C, noise multiplier 2σ (std 2Cσ),
    /// plain SGD on the noisy sum over the expected batch size, an RDP ledger of the
    /// sampler's events (replace-one for fixed-size batches, add/remove for Poisson).
    pub fn train_config(&self) -> Result<TrainConfig> {
        self.schedule.validate()?;
        if !(self.prior_precision.is_finite() && self.prior_precision >= 0.0) {
            return Err(Error::InvalidConfig(format!(
                "prior precision {} must be >= 0",
                self.prior_precision
            )));
        }
        Ok(TrainConfig {
            sampler: self.sampler,
            privacy: Some(PrivacyConfig {
                noise_multiplier: self.noise_multiplier_at(0, 1),
                max_grad_norm: self.clip,
                clipping: Clipping::Flat,
                delta: self.ledger_delta,
                target_epsilon: None,
                accountant: AccountantKind::RdpClassic,
                orders: OrderGrid::Int2To64,
            }),
            optimizer: Optimizer::Sgd {
                lr: self.schedule.at(0),
                momentum: 0.0,
            },
            normalisation: GradientNormalisation::ExpectedBatchSize,
        })
    }

    /// The engine's noise multiplier at iteration `t` on `n` records.
    fn noise_multiplier_at(&self, t: u64, n: usize) -> f64 {
        let base = self.calibration.noise_multiplier();
        match self.placement {
            NoisePlacement::ClippedSum => base,
            NoisePlacement::ParameterUpdate => {
                base * self.sampler.expected_batch_size(n) / self.schedule.at(t)
            }
        }
    }
}

impl<M: PrivateModel> Algorithm<M> for DpdTraining {
    /// One DPD iteration: lr_t (and, for the literal placement, the noise) for this step,
    /// the engine's clipped, noised step, then the prior's shrinkage.
    fn step(&mut self, engine: &mut PrivacyEngine<M>, data: &Dataset) -> Result<StepReport> {
        let t = engine.steps();
        let lr = self.schedule.at(t);
        engine.set_learning_rate(lr)?;
        if self.placement == NoisePlacement::ParameterUpdate {
            engine.set_noise_multiplier(self.noise_multiplier_at(t, data.len()))?;
        }
        let report = engine.step(data)?;
        if self.prior_precision > 0.0 {
            let shrink = (1.0 - lr * self.prior_precision / data.len() as f64) as f32;
            let mut theta = engine.model().parameters()?;
            theta.iter_mut().for_each(|w| *w *= shrink);
            engine.model().set_parameters(&theta)?;
        }
        Ok(report)
    }
}

/// The implied Gaussian-dropout rates of one layer: `α_j = 4C²σ²/θ_j²`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DropoutRates {
    /// Parameters in the layer.
    pub count: usize,
    /// Mean α (dominated by near-zero weights).
    pub mean: f64,
    /// Quantiles 10 %, 50 %, 90 %.
    pub p10: f64,
    /// Median.
    pub median: f64,
    /// 90 %.
    pub p90: f64,
    /// Weights with θ² below 1e-12, whose θ² was clamped to 1e-12.
    pub clamped: usize,
}

/// α per layer (`docs/reproduction/dpd.md`, "What the paper text states": the noise `N(0, 4C²σ²)` equals Gaussian
/// dropout `N(0, α θ²)` when `α = 4C²σ²/θ²`); θ² is clamped at 1e-12 and the clamped
/// weights counted.
pub fn implied_dropout_rates(
    theta: &[f32],
    layers: &[Range<usize>],
    clip: f64,
    sigma: f64,
) -> Result<Vec<DropoutRates>> {
    let variance = 4.0 * clip * clip * sigma * sigma;
    layers
        .iter()
        .map(|range| {
            let weights = theta.get(range.clone()).ok_or_else(|| {
                Error::InvalidConfig(format!(
                    "layer range {range:?} exceeds θ's {} entries",
                    theta.len()
                ))
            })?;
            if weights.is_empty() {
                return Err(Error::InvalidConfig("an empty layer has no rates".into()));
            }
            let mut clamped = 0;
            let mut alphas: Vec<f64> = weights
                .iter()
                .map(|&w| {
                    let square = f64::from(w) * f64::from(w);
                    if square < 1e-12 {
                        clamped += 1;
                    }
                    variance / square.max(1e-12)
                })
                .collect();
            alphas.sort_by(f64::total_cmp);
            let quantile = |q: f64| alphas[((alphas.len() - 1) as f64 * q).round() as usize];
            Ok(DropoutRates {
                count: alphas.len(),
                mean: alphas.iter().sum::<f64>() / alphas.len() as f64,
                p10: quantile(0.1),
                median: quantile(0.5),
                p90: quantile(0.9),
                clamped,
            })
        })
        .collect()
}

/// SGLD's posterior predictive `p(y|x) ≈ (1/K) Σ_k p(y|x, θ_k)`: softmax probabilities
/// averaged over the iterates added.
#[derive(Clone, Debug, Default)]
pub struct PredictiveAverage {
    probabilities: Vec<f64>,
    iterates: usize,
}

impl PredictiveAverage {
    /// Adds the current iterate's predictions on `data` (same data every time).
    pub fn add<M: PrivateModel>(&mut self, model: &M, data: &Dataset) -> Result<()> {
        let size = data.len() * data.classes;
        if self.iterates == 0 {
            self.probabilities = vec![0.0; size];
        } else if self.probabilities.len() != size {
            return Err(Error::InvalidConfig(
                "the predictive average was started on another dataset".into(),
            ));
        }
        let mut offset = 0;
        let probabilities = &mut self.probabilities;
        for_each_logit_batch(model, data, |logits, _| {
            for row in logits.chunks(data.classes) {
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let weights: Vec<f64> = row.iter().map(|&z| f64::from(z - max).exp()).collect();
                let total: f64 = weights.iter().sum();
                for (p, w) in probabilities[offset..offset + data.classes]
                    .iter_mut()
                    .zip(&weights)
                {
                    *p += w / total;
                }
                offset += data.classes;
            }
        })?;
        self.iterates += 1;
        Ok(())
    }

    /// Iterates averaged so far.
    pub fn iterates(&self) -> usize {
        self.iterates
    }

    /// Accuracy of the averaged prediction on `data` (`None` before any iterate).
    pub fn accuracy(&self, data: &Dataset) -> Option<f64> {
        if self.iterates == 0 || self.probabilities.len() != data.len() * data.classes {
            return None;
        }
        let correct = self
            .probabilities
            .chunks(data.classes)
            .zip(&data.labels)
            .filter(|(row, &y)| {
                let best = row
                    .iter()
                    .enumerate()
                    .max_by(|a, b| a.1.total_cmp(b.1))
                    .map(|(k, _)| k);
                best == Some(y as usize)
            })
            .count();
        Some(correct as f64 / data.len().max(1) as f64)
    }
}

/// The non-private baseline of the DPD stand-in experiment: Gaussian dropout on the
/// weights (multiplicative noise `θ ⊙ (1 + √α ξ)`, ξ ~ N(0, I), one draw per step for the
/// whole batch, which is the `N(0, α θ²)` perturbation DPD's reading of dropout refers
/// to): the gradient is taken at the perturbed weights and applied to the unperturbed
/// ones. Refused on a private engine, whose ledger would not cover it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GaussianDropout {
    /// The dropout rate α ≥ 0 (the perturbation's variance relative to θ²).
    pub alpha: f64,
}

impl<M: PrivateModel> Algorithm<M> for GaussianDropout {
    fn step(&mut self, engine: &mut PrivacyEngine<M>, data: &Dataset) -> Result<StepReport> {
        if engine.config().privacy.is_some() {
            return Err(Error::InvalidConfig(
                "Gaussian weight dropout is a non-private baseline; use a non-private engine"
                    .into(),
            ));
        }
        let alpha = self.alpha;
        if !(alpha.is_finite() && alpha >= 0.0) {
            return Err(Error::InvalidConfig(format!(
                "dropout rate alpha {alpha} must be >= 0"
            )));
        }
        let theta = engine.model().parameters()?;
        let mut perturbed = vec![0.0f32; theta.len()];
        engine
            .noise_source()
            .fill_standard_normal_f32(&mut perturbed);
        let scale = alpha.sqrt() as f32;
        for (p, &w) in perturbed.iter_mut().zip(&theta) {
            *p = w * (1.0 + scale * *p);
        }
        engine.model().set_parameters(&perturbed)?;
        let report = engine.step(data)?;
        let updated = engine.model().parameters()?;
        let restored: Vec<f32> = theta
            .iter()
            .zip(updated.iter().zip(&perturbed))
            .map(|(&w, (&after, &before))| w + (after - before))
            .collect();
        engine.model().set_parameters(&restored)?;
        Ok(report)
    }
}
