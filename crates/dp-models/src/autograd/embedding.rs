//! The DP embedding ([`nn::Embedding`]) as a stage of the sequential tier, on token ids
//! (B, T).

use candle_core::{Tensor, Var};

use super::layer::DpLayer;
use super::tape::{tap, Tape, TapeEntry};
use crate::error::Result;
use crate::nn;

impl DpLayer for nn::Embedding {
    fn forward(&self, ids: &Tensor, tape: Option<(&mut Tape, usize)>) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let flat = ids.flatten_all()?;
        match tape {
            None => Ok(candle_core::Module::forward(self, ids)?),
            Some((tape, layer)) => {
                let z = self
                    .embeddings()
                    .as_tensor()
                    .detach()
                    .index_select(&flat, 0)?
                    .reshape((b, t, ()))?;
                tap(z, ids.clone(), tape, layer)
            }
        }
    }

    fn vars(&self) -> Vec<Var> {
        vec![self.embeddings().clone()]
    }

    fn takes_token_ids(&self) -> bool {
        true
    }

    fn squared_norms(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Tensor> {
        // ‖Σₜ e_{idₜ} gₜᵀ‖² = Σ_{t,t'} [idₜ = id_t'] gₜ·g_t' (ghost norm with one-hot
        // rows), as the rounding-safe upper bound of nn's ghost norms.
        let left = nn::Left::OneHot {
            ids: entry.input.clone(),
            width: self.embeddings().as_tensor().dim(0)?,
        };
        nn::ghost_norms(&[(&left, grad_out)])
    }

    fn clipped_sum(
        &self,
        entry: &TapeEntry,
        grad_out: &Tensor,
        factors: &Tensor,
    ) -> Result<Vec<Tensor>> {
        let (b, t, d) = grad_out.dims3()?;
        let scaled = grad_out
            .broadcast_mul(&factors.reshape((b, 1, 1))?)?
            .reshape((b * t, d))?;
        let zeros = self.embeddings().as_tensor().zeros_like()?;
        Ok(vec![zeros.index_add(
            &entry.input.flatten_all()?,
            &scaled,
            0,
        )?])
    }

    fn per_sample_grads(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Vec<Tensor>> {
        let (b, _, _) = grad_out.dims3()?;
        let rows = (0..b)
            .map(|i| {
                let zeros = self.embeddings().as_tensor().zeros_like()?;
                Ok(zeros.index_add(&entry.input.get(i)?, &grad_out.get(i)?, 0)?)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(vec![Tensor::stack(&rows, 0)?])
    }
}
