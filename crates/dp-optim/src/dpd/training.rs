//! DPD's SGLD-form training on the engine: the Robbins–Monro step size, where the noise
//! goes, and the prior's shrinkage.

use dp_accounting::{AccountantKind, OrderGrid};
use dp_models::data::Dataset;
use dp_models::Classifier;
use serde::{Deserialize, Serialize};

use super::budget::DpdCalibration;
use crate::algorithm::Algorithm;
use crate::error::{Error, Result};
use crate::{
    Clipping, GradientNormalisation, Optimizer, PrivacyConfig, PrivacyEngine, Sampler, StepReport,
    TrainConfig,
};
use dp_accounting::validate;

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
    /// lr₀ > 0: the step size at iteration 0.
    pub initial: f64,
    /// t₀ (iterations).
    pub decay_steps: f64,
    /// γ ∈ (0.5, 1].
    pub power: f64,
}

impl StepSizeSchedule {
    /// Checks the Robbins–Monro conditions.
    pub fn validate(&self) -> Result<()> {
        validate::positive("initial", self.initial)?;
        validate::positive("decay_steps", self.decay_steps)?;
        if !(self.power > 0.5 && self.power <= 1.0) {
            return Err(Error::InvalidParameter {
                name: "power",
                value: self.power,
                reason: "must be in (0.5, 1] (the Robbins-Monro conditions)",
            });
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
    /// C > 0: the per-example clipping norm.
    pub clip: f64,
    /// Minibatches (the paper: fixed-size S; its analysis: Poisson with rate ν).
    pub sampler: Sampler,
    /// The step size lr_t per iteration (Robbins–Monro).
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
        validate::non_negative("prior_precision", self.prior_precision)?;
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
                correlation: Default::default(),
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

impl<M: Classifier> Algorithm<M> for DpdTraining {
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
            engine.set_parameters(&theta)?;
        }
        Ok(report)
    }
}
