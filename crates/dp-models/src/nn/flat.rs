//! A network's parameters as one flat vector, in [`Taps::params`] order: what the DP
//! engine reads, updates and checkpoints.

use candle_core::Tensor;

use super::gradients::PrivateGradients;
use super::taps::Taps;
use crate::error::{Error, Result};

impl Taps {
    /// The number of parameters.
    pub fn num_params(&self) -> usize {
        self.params()
            .iter()
            .map(|p| p.var.as_tensor().elem_count())
            .sum()
    }

    /// The parameters, flat, on the host.
    pub fn flat_parameters(&self) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(self.num_params());
        for p in self.params() {
            out.extend(p.var.as_tensor().flatten_all()?.to_vec1::<f32>()?);
        }
        Ok(out)
    }

    /// Replaces the parameters from a flat vector (copied to their device).
    pub fn set_flat_parameters(&self, theta: &[f32]) -> Result<()> {
        if theta.len() != self.num_params() {
            return Err(Error::invalid_model(
                "parameters",
                format!(
                    "{} values for {} parameters",
                    theta.len(),
                    self.num_params()
                ),
            ));
        }
        let mut offset = 0;
        for p in self.params() {
            let t = p.var.as_tensor();
            let n = t.elem_count();
            p.var.set(&Tensor::from_slice(
                &theta[offset..offset + n],
                t.shape(),
                t.device(),
            )?)?;
            offset += n;
        }
        Ok(())
    }

    /// A description of the parameters (names and shapes), for checkpoint fingerprints.
    pub fn architecture(&self) -> String {
        self.params()
            .iter()
            .map(|p| format!("{}{:?}", p.name, p.var.as_tensor().dims()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl PrivateGradients {
    /// The clipped sums, flat, on the host.
    pub fn flat_sum(&self) -> Result<Vec<f32>> {
        let mut sum = Vec::new();
        for (_, t) in &self.clipped_sums {
            sum.extend(t.flatten_all()?.to_vec1::<f32>()?);
        }
        Ok(sum)
    }
}
