//! The shared embedding as a [`PrivateModel`] on word pairs: sparse per-example
//! gradients, clipped and summed into a dense gradient, and restricted to a set of
//! coordinates for sparse DP-SGD ([`SparsePrivateModel`]).

use sha2::{Digest, Sha256};

use dp_models::ClipRule;
use dp_models::TrainingData;
use dp_models::{ClippedGradient, PrivateModel, SparsePrivateModel};
use dp_models::{Error, Result};

use super::corpus::PairSet;
use super::embedding::{SharedEmbedding, SparseGradient};

impl TrainingData for PairSet {
    fn len(&self) -> usize {
        PairSet::len(self)
    }

    fn validate(&self) -> Result<()> {
        let n = self.len();
        if self.contexts.len() != n || self.negatives.len() != n * self.negatives_per_sample {
            return Err(Error::invalid_data(
                "word pairs",
                format!(
                    "{n} targets, {} contexts and {} negatives at {} per sample",
                    self.contexts.len(),
                    self.negatives.len(),
                    self.negatives_per_sample
                ),
            ));
        }
        Ok(())
    }

    fn digest(&self) -> String {
        let mut hash = Sha256::new();
        hash.update((self.negatives_per_sample as u64).to_le_bytes());
        for ids in [&self.targets, &self.contexts, &self.negatives] {
            hash.update((ids.len() as u64).to_le_bytes());
            let bytes: Vec<u8> = ids.iter().flat_map(|v| v.to_le_bytes()).collect();
            hash.update(&bytes);
        }
        hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl SharedEmbedding {
    /// Each example of `batch` clipped by `rule` (factor 0 when its norm is not finite),
    /// passed with its loss and squared norm to `add`.
    fn each_clipped(
        &self,
        data: &PairSet,
        batch: &[usize],
        rule: ClipRule,
        mut add: impl FnMut(&SparseGradient),
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        let mut g = SparseGradient::default();
        let (mut losses, mut squared_norms) = (Vec::new(), Vec::new());
        for &i in batch {
            losses.push(self.example_gradient(data, i, &mut g)? as f32);
            let squared = g.squared_norm() as f32;
            squared_norms.push(if squared.is_finite() {
                squared
            } else {
                f32::NAN
            });
            let factor = if squared.is_finite() {
                rule.factor(squared, 1)
            } else {
                0.0
            };
            g.values.iter_mut().for_each(|v| *v *= factor);
            add(&g);
        }
        Ok((losses, squared_norms))
    }

    /// Adds `g`'s rows into the dense `sum`, coordinates kept by `keep` only.
    fn accumulate(&self, sum: &mut [f32], g: &SparseGradient, factor: f32, keep: &[bool]) {
        let d = self.dim();
        for (slot, &r) in g.rows.iter().enumerate() {
            let base = r as usize * d;
            let values = &g.values[slot * d..(slot + 1) * d];
            for (c, &v) in values.iter().enumerate() {
                if keep.is_empty() || keep[base + c] {
                    sum[base + c] += factor * v;
                }
            }
        }
    }
}

impl PrivateModel for SharedEmbedding {
    type Data = PairSet;

    fn num_params(&self) -> usize {
        SharedEmbedding::num_params(self)
    }

    fn parameters(&self) -> Result<Vec<f32>> {
        Ok(self.weights().to_vec())
    }

    fn set_parameters(&mut self, theta: &[f32]) -> Result<()> {
        if theta.len() != self.weights().len() {
            return Err(Error::invalid_model(
                "shared embedding",
                format!(
                    "{} values for {} parameters",
                    theta.len(),
                    self.weights().len()
                ),
            ));
        }
        self.weights_mut().copy_from_slice(theta);
        Ok(())
    }

    fn architecture(&self) -> String {
        format!("shared embedding {} × {}", self.vocabulary(), self.dim())
    }

    fn clipped_gradient(
        &self,
        data: &PairSet,
        batch: &[usize],
        rule: ClipRule,
    ) -> Result<ClippedGradient> {
        let mut sum = vec![0.0f32; self.num_params()];
        let (losses, squared_norms) = self.each_clipped(data, batch, rule, |g| {
            self.accumulate(&mut sum, g, 1.0, &[])
        })?;
        Ok(ClippedGradient {
            sum: sum.into(),
            squared_norms,
            losses,
        })
    }
}

impl SparsePrivateModel for SharedEmbedding {
    fn clipped_gradient_on_support(
        &self,
        data: &PairSet,
        batch: &[usize],
        first: ClipRule,
        support: &[bool],
        rule: ClipRule,
    ) -> Result<ClippedGradient> {
        if support.len() != self.num_params() {
            return Err(Error::invalid_model(
                "shared embedding",
                format!(
                    "a support of {} coordinates for {} parameters",
                    support.len(),
                    self.num_params()
                ),
            ));
        }
        let d = self.dim();
        let mut sum = vec![0.0f32; self.num_params()];
        let (losses, squared_norms) = self.each_clipped(data, batch, first, |g| {
            let restricted: f32 = g
                .rows
                .iter()
                .enumerate()
                .flat_map(|(slot, &r)| {
                    let values = &g.values[slot * d..(slot + 1) * d];
                    let base = r as usize * d;
                    values.iter().enumerate().map(move |(c, &v)| (base + c, v))
                })
                .filter(|&(j, _)| support[j])
                .map(|(_, v)| v * v)
                .sum();
            self.accumulate(&mut sum, g, rule.factor(restricted, 1), support);
        })?;
        Ok(ClippedGradient {
            sum: sum.into(),
            squared_norms,
            losses,
        })
    }
}
