//! DPD read as dropout: the implied Gaussian-dropout rates, SGLD's posterior predictive,
//! and the non-private Gaussian weight-dropout baseline.

use std::ops::Range;

use dp_models::data::Dataset;
use dp_models::Classifier;
use serde::{Deserialize, Serialize};

use crate::algorithm::Algorithm;
use crate::error::{Error, Result};
use crate::evaluate::for_each_logit_batch;
use crate::{PrivacyEngine, StepReport};
use dp_accounting::validate;

/// The implied Gaussian-dropout rates of one layer: `α_j = 4C²σ²/θ_j²`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DropoutRates {
    /// Parameters in the layer.
    pub count: usize,
    /// Mean α (dominated by near-zero weights).
    pub mean: f64,
    /// Quantiles 10 %, 50 %, 90 %.
    pub p10: f64,
    /// The median α.
    pub median: f64,
    /// The 90th percentile of α.
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
            let weights = theta
                .get(range.clone())
                .ok_or_else(|| Error::InvalidSetting {
                    name: "layers",
                    value: format!("{range:?}"),
                    reason: format!("exceeds θ's {} entries", theta.len()),
                })?;
            if weights.is_empty() {
                return Err(Error::InvalidSetting {
                    name: "layers",
                    value: format!("{range:?}"),
                    reason: "an empty layer has no rates".into(),
                });
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
    pub fn add<M: Classifier>(&mut self, model: &M, data: &Dataset) -> Result<()> {
        let size = data.len() * data.classes;
        if self.iterates == 0 {
            self.probabilities = vec![0.0; size];
        } else if self.probabilities.len() != size {
            return Err(Error::InvalidSetting {
                name: "data",
                value: format!("{size} probabilities"),
                reason: "the predictive average was started on another dataset".into(),
            });
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

impl<M: Classifier> Algorithm<M> for GaussianDropout {
    fn step(&mut self, engine: &mut PrivacyEngine<M>, data: &Dataset) -> Result<StepReport> {
        if engine.config().privacy.is_some() {
            return Err(Error::InvalidSetting {
                name: "privacy",
                value: "private".into(),
                reason: "Gaussian weight dropout is a non-private baseline; use a \
                         non-private engine"
                    .into(),
            });
        }
        let alpha = validate::non_negative("alpha", self.alpha)?;
        let theta = engine.model().parameters()?;
        let mut perturbed = vec![0.0f32; theta.len()];
        engine
            .noise_source()
            .fill_standard_normal_f32(&mut perturbed);
        let scale = alpha.sqrt() as f32;
        for (p, &w) in perturbed.iter_mut().zip(&theta) {
            *p = w * (1.0 + scale * *p);
        }
        engine.set_parameters(&perturbed)?;
        let report = engine.step(data)?;
        let updated = engine.model().parameters()?;
        let restored: Vec<f32> = theta
            .iter()
            .zip(updated.iter().zip(&perturbed))
            .map(|(&w, (&after, &before))| w + (after - before))
            .collect();
        engine.set_parameters(&restored)?;
        Ok(report)
    }
}
