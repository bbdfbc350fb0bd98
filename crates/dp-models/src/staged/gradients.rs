//! The private gradients of the staged executor: per-layer norms, clip factors and clipped
//! sums from each layer's output gradient, checked to cover every parameter.

use candle_core::Tensor;

use super::model::StagedModel;
use crate::error::{Error, Result};
use crate::ClipRule;

/// The result of a private backward on the staged executor.
#[derive(Debug)]
pub struct StagedGradients {
    /// `Σᵢ cᵢ∇ᵢ`, one tensor per var of [`StagedModel::vars`], in order.
    pub clipped_sums: Vec<Tensor>,
    /// `‖∇ᵢ‖²` per example.
    pub squared_norms: Vec<f32>,
    /// Per-example losses.
    pub losses: Vec<f32>,
}

impl StagedModel {
    /// Forward with taps, per-example cross-entropy, one backward, then per-layer norms,
    /// clip factors and clipped sums. **Fails closed**: every var must receive exactly
    /// one clipped sum of its own shape, or the call errors.
    pub fn private_gradients(
        &self,
        x: &Tensor,
        labels: &[u32],
        rule: ClipRule,
    ) -> Result<StagedGradients> {
        let batch = x.dim(0)?;
        if batch != labels.len() {
            return Err(Error::invalid_model(
                "staged executor",
                format!("{batch} examples but {} labels", labels.len()),
            ));
        }
        if !self.cpu_ops_apply(x) || batch <= self.cpu_chunk {
            return self.private_gradients_of_chunk(x, labels, rule);
        }
        let mut total: Option<StagedGradients> = None;
        for start in (0..batch).step_by(self.cpu_chunk) {
            let len = self.cpu_chunk.min(batch - start);
            let part = self.private_gradients_of_chunk(
                &x.narrow(0, start, len)?,
                &labels[start..start + len],
                rule,
            )?;
            total = Some(match total {
                None => part,
                Some(mut sum) => {
                    for (s, p) in sum.clipped_sums.iter_mut().zip(&part.clipped_sums) {
                        *s = (&*s + p)?;
                    }
                    sum.squared_norms.extend(part.squared_norms);
                    sum.losses.extend(part.losses);
                    sum
                }
            });
        }
        total.ok_or_else(|| Error::invalid_model("staged executor", "empty batch"))
    }

    fn private_gradients_of_chunk(
        &self,
        x: &Tensor,
        labels: &[u32],
        rule: ClipRule,
    ) -> Result<StagedGradients> {
        let (tape, losses, grad_outs) = self.layer_output_gradients(x, labels)?;
        // Per-layer squared norms (B,) of every tap, then the per-example total.
        let mut layer_norms = Vec::new();
        for (entry, g) in tape.entries.iter().zip(&grad_outs) {
            layer_norms.push(
                self.layer(entry.layer)?
                    .squared_norms(entry, g)?
                    .to_vec1::<f32>()?,
            );
        }
        if layer_norms.is_empty() {
            return Err(Error::invalid_model(
                "staged executor",
                "the model has no parametric layer",
            ));
        }
        let batch = layer_norms[0].len();
        let sq: Vec<f32> = (0..batch)
            .map(|i| layer_norms.iter().map(|l| l[i]).sum())
            .collect();
        let layers = layer_norms.len();
        let mut clipped_sums = Vec::new();
        for ((entry, g), norms) in tape.entries.iter().zip(&grad_outs).zip(&layer_norms) {
            let factors: Vec<f32> = (0..batch)
                .map(|i| match (sq[i].is_finite(), rule) {
                    (false, _) => 0.0,
                    (true, ClipRule::PerLayer { .. }) => rule.factor(norms[i], layers),
                    (true, _) => rule.factor(sq[i], 1),
                })
                .collect();
            let factors = Tensor::from_vec(factors, batch, x.device())?;
            let g = zero_nonfinite_rows(g, &sq)?;
            clipped_sums.extend(self.layer(entry.layer)?.clipped_sum(entry, &g, &factors)?);
        }
        self.check_clipped_sums(&clipped_sums)?;
        Ok(StagedGradients {
            clipped_sums,
            squared_norms: sq,
            losses,
        })
    }

    /// Fails closed: every var must have exactly one clipped sum, of its own shape.
    fn check_clipped_sums(&self, clipped_sums: &[Tensor]) -> Result<()> {
        let vars = self.vars();
        if clipped_sums.len() != vars.len() {
            return Err(Error::invalid_model(
                "staged executor",
                format!(
                    "refusing to step: {} of {} parameters have a clipped gradient",
                    clipped_sums.len(),
                    vars.len()
                ),
            ));
        }
        for (i, (sum, var)) in clipped_sums.iter().zip(&vars).enumerate() {
            if sum.shape() != var.as_tensor().shape() {
                return Err(Error::invalid_model(
                    "staged executor",
                    format!(
                    "refusing to step: parameter {i} has shape {:?} but its clipped gradient {:?}",
                    var.as_tensor().shape(),
                    sum.shape()
                ),
                ));
            }
        }
        Ok(())
    }

    /// Materialised per-sample gradients, one (B, …) tensor per var (tests).
    #[cfg(test)]
    pub fn per_sample_gradients(&self, x: &Tensor, labels: &[u32]) -> Result<Vec<Tensor>> {
        let (tape, _, grad_outs) = self.layer_output_gradients(x, labels)?;
        let mut out = Vec::new();
        for (entry, g) in tape.entries.iter().zip(&grad_outs) {
            out.extend(self.layer(entry.layer)?.per_sample_grads(entry, g)?);
        }
        Ok(out)
    }
}

/// Zeroes the rows (examples) whose squared norm is not finite, so that NaN·0 cannot
/// spread into the sums.
fn zero_nonfinite_rows(g: &Tensor, squared_norms: &[f32]) -> Result<Tensor> {
    if squared_norms.iter().all(|s| s.is_finite()) {
        return Ok(g.clone());
    }
    let keep: Vec<f32> = squared_norms
        .iter()
        .map(|s| if s.is_finite() { 1.0 } else { 0.0 })
        .collect();
    let mut shape = vec![1usize; g.rank()];
    shape[0] = keep.len();
    let mask = Tensor::from_vec(keep, shape, g.device())?;
    Ok(g.where_cond(&mask.broadcast_as(g.shape())?.ne(0.0)?, &g.zeros_like()?)?)
}
