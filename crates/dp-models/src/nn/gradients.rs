//! The private gradients of a network of DP layers: one recorded forward, one backward of
//! the summed per-example loss, then per-parameter squared norms, clip factors and
//! clipped sums. Fails closed: every registered parameter must have received per-sample
//! gradients from its layers and none may have been used outside them.

use std::collections::BTreeMap;

use candle_core::{backprop::GradStore, Tensor};

use super::batch_axis;
use super::contribution::{self, Contribution, NormMethod};
use super::taps::{Param, Taps};
use crate::cpu::kernels::upper_f32;
use crate::error::{Error, Result};
use crate::{ClipRule, ClippedGradient, GradientSum};

/// Every parameter's contributions from one private forward and backward.
struct Traced {
    params: Vec<Param>,
    contributions: Vec<Vec<Contribution>>,
    losses: Tensor,
}

impl Taps {
    /// Runs `losses` (a closure that does the network's forward and returns the per-example
    /// losses, shape (B,)) as a private forward, backpropagates their sum, and returns
    /// each parameter's per-sample gradients clipped by `rule` and summed: one sum per
    /// parameter, by name, in [`Taps::params`] order, on the parameters' device
    /// ([`GradientSum::Tensors`]).
    pub fn clipped_gradients(
        &self,
        losses: impl FnOnce() -> Result<Tensor>,
        rule: ClipRule,
        method: NormMethod,
    ) -> Result<ClippedGradient> {
        let mut traced = self.trace(losses)?;
        let batch = traced.losses.dim(0)?;
        let device = traced.losses.device().clone();
        // Each example's squared norms by layer, summed in f64 on the host.
        let mut by_owner: BTreeMap<&str, (Vec<f64>, usize)> = BTreeMap::new();
        let mut kept = Vec::with_capacity(traced.params.len());
        let mut keep_budget = contribution::KEPT_PER_SAMPLE_BUDGET;
        for (param, contributions) in traced.params.iter().zip(&mut traced.contributions) {
            let shape = param.var.as_tensor().shape();
            let norms = contribution::squared_norms(contributions, shape, method, keep_budget)?;
            if let Some(grads) = &norms.kept {
                // The clipped sum is read from the kept gradients: free the factors now.
                keep_budget -= grads.elem_count();
                contributions.clear();
            }
            kept.push(norms.kept);
            let (sums, terms) = by_owner
                .entry(param.owner.as_str())
                .or_insert_with(|| (vec![0.0; batch], 0));
            for (sum, sq) in sums.iter_mut().zip(norms.squared.to_vec1::<f32>()?) {
                *sum += f64::from(sq);
            }
            *terms += 1;
        }
        let layers = by_owner.len();
        let all_terms: usize = by_owner.values().map(|(_, t)| t).sum();
        let total_host: Vec<f32> = (0..batch)
            .map(|i| upper_f32(by_owner.values().map(|(s, _)| s[i]).sum(), all_terms))
            .collect();
        let finite: Vec<bool> = total_host.iter().map(|s| s.is_finite()).collect();
        let keep = if finite.iter().all(|&f| f) {
            None
        } else {
            let mask: Vec<f32> = finite.iter().map(|&f| f32::from(u8::from(f))).collect();
            Some(Tensor::from_vec(mask, batch, &device)?)
        };
        let mut factors_by_owner = BTreeMap::new();
        for (owner, (sums, terms)) in &by_owner {
            let factors: Vec<f32> = (0..batch)
                .map(|i| match (finite[i], rule) {
                    (false, _) => 0.0,
                    (true, ClipRule::PerLayer { .. }) => {
                        rule.factor(upper_f32(sums[i], *terms), layers)
                    }
                    (true, _) => rule.factor(total_host[i], 1),
                })
                .collect();
            factors_by_owner.insert(*owner, Tensor::from_vec(factors, batch, &device)?);
        }
        let mut clipped_sums = Vec::with_capacity(traced.params.len());
        for ((param, contributions), kept) in
            traced.params.iter().zip(&traced.contributions).zip(&kept)
        {
            let factors = &factors_by_owner[param.owner.as_str()];
            let shape = param.var.as_tensor().shape();
            let sum = contribution::clipped_sum(
                contributions,
                kept.as_ref(),
                factors,
                keep.as_ref(),
                shape,
            )?;
            clipped_sums.push((param.name.clone(), sum));
        }
        Ok(ClippedGradient {
            sum: GradientSum::Tensors(clipped_sums),
            squared_norms: total_host,
            losses: traced.losses.to_vec1()?,
        })
    }

    /// The private gradients of an empty batch (a Poisson draw may be one): zero sums of
    /// every parameter's shape, no norms, no losses. Nothing is run.
    pub fn zero_gradients(&self) -> Result<ClippedGradient> {
        let params = self.trainable()?;
        Ok(ClippedGradient {
            sum: GradientSum::Tensors(
                params
                    .iter()
                    .map(|p| Ok((p.name.clone(), p.var.as_tensor().zeros_like()?)))
                    .collect::<Result<_>>()?,
            ),
            squared_norms: Vec::new(),
            losses: Vec::new(),
        })
    }

    /// The materialised per-sample gradients (B, …) of every registered parameter, by name:
    /// the reference the clipped sums are tested against, and for audits.
    pub fn per_sample_gradients(
        &self,
        losses: impl FnOnce() -> Result<Tensor>,
    ) -> Result<Vec<(String, Tensor)>> {
        let traced = self.trace(losses)?;
        traced
            .params
            .iter()
            .zip(&traced.contributions)
            .map(|(p, c)| {
                Ok((
                    p.name.clone(),
                    contribution::per_sample(c, p.var.as_tensor().shape())?,
                ))
            })
            .collect()
    }

    /// The per-parameter squared norms (B,) by `method`, by name (tests: ghost against
    /// materialised).
    pub fn squared_norms(
        &self,
        losses: impl FnOnce() -> Result<Tensor>,
        method: NormMethod,
    ) -> Result<Vec<(String, Tensor)>> {
        let traced = self.trace(losses)?;
        traced
            .params
            .iter()
            .zip(&traced.contributions)
            .map(|(p, c)| {
                let shape = p.var.as_tensor().shape();
                let norms = contribution::squared_norms(c, shape, method, 0)?;
                Ok((p.name.clone(), norms.squared))
            })
            .collect()
    }

    /// The trainable parameters; an error if there are none (nothing to clip and noise).
    fn trainable(&self) -> Result<Vec<Param>> {
        let params = self.params();
        if params.is_empty() {
            return Err(Error::invalid_model(
                "DP layer",
                "the network has no trainable DP-layer parameter",
            ));
        }
        Ok(params)
    }

    /// The recorded forward, the backward, and every parameter's contributions, checked.
    fn trace(&self, losses: impl FnOnce() -> Result<Tensor>) -> Result<Traced> {
        let params = self.trainable()?;
        for varmap in self.varmaps() {
            self.check_covers(&varmap)?;
        }
        let (losses, records) = self.record(losses)?;
        if losses.rank() != 1 {
            return Err(Error::invalid_model(
                "loss",
                format!(
                    "the loss must be one value per example, shape (B,), not {:?}",
                    losses.dims()
                ),
            ));
        }
        let batch = losses.dim(0)?;
        let shapes: Vec<Vec<usize>> = std::iter::once(losses.dims().to_vec())
            .chain(records.iter().map(|r| r.shape.clone()))
            .collect();
        let probe = if self.is_verified(&shapes) {
            None
        } else {
            Some(batch_axis::weighted_gradients(&losses, &records)?)
        };
        let grads = losses.sum_all()?.backward()?;
        check_no_leak(&params, &grads)?;
        let gradients: Vec<Option<Tensor>> =
            records.iter().map(|r| r.probe.gradient(&grads)).collect();
        if let Some((weights, weighted)) = probe {
            if batch_axis::check(&weights, &weighted, &gradients, &records)? {
                self.set_verified(shapes);
            }
        }
        let mut contributions: Vec<Vec<Contribution>> = vec![Vec::new(); params.len()];
        for (record, grad) in records.into_iter().zip(gradients) {
            let Some(grad) = grad else {
                continue; // the layer's output does not reach the loss: no gradient.
            };
            if grad.rank() == 0 || grad.dim(0)? != batch {
                return Err(Error::invalid_model(
                    "DP layer",
                    format!(
                        "a layer's output {:?} is not batch first for {batch} examples: apply \
                         DP layers to (B, …) inputs (broadcast shared inputs such as positions)",
                        grad.dims()
                    ),
                ));
            }
            for (var, c) in (record.resolve)(&grad)? {
                if self.is_frozen(&var) {
                    continue; // public: no clipping, noise or update.
                }
                let id = var.as_tensor().id();
                let slot = params
                    .iter()
                    .position(|p| p.var.as_tensor().id() == id)
                    .ok_or_else(|| Error::UnprotectedParameter {
                        parameter: "(unnamed)".into(),
                        reason:
                            "is used by a DP layer but was not created through its DpVarBuilder",
                    })?;
                contributions[slot].push(c);
            }
        }
        if let Some((p, _)) = params
            .iter()
            .zip(&contributions)
            .find(|(_, c)| c.is_empty())
        {
            return Err(Error::UnprotectedParameter {
                parameter: p.name.clone(),
                reason: "received no per-sample gradient: its layer is not on the loss's path in this forward",
            });
        }
        Ok(Traced {
            params,
            contributions,
            losses,
        })
    }
}

/// Fails if any registered parameter got a gradient from Candle's backward: DP layers use
/// their weights as constants in a private forward, so a gradient means the variable was
/// used by an op outside its layer, and that use would be unclipped.
fn check_no_leak(params: &[Param], grads: &GradStore) -> Result<()> {
    match params
        .iter()
        .find(|p| grads.get(p.var.as_tensor()).is_some())
    {
        Some(p) => Err(Error::UnprotectedParameter {
            parameter: p.name.clone(),
            reason: "is used outside its DP layer (its gradient there would be unclipped)",
        }),
        None => Ok(()),
    }
}
