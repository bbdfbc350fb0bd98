//! The DP embedding, a drop-in for `candle_nn::Embedding`.

use candle_core::{DType, Module, Tensor, Var};
use candle_nn::Init;

use super::contribution::Contribution;
use super::left_factor::Left;
use super::taps::Taps;
use super::var_builder::DpVarBuilder;
use crate::error::Result;

/// A lookup table (V, D) on token ids (B, …) → (B, …, D). Its per-sample gradients are
/// sparse (the rows of the example's tokens); their norms are ghost norms over the ids
/// and the clipped sum is one `index_add`, so no (B, V, D) tensor is ever built.
#[derive(Clone, Debug)]
pub struct Embedding {
    weight: Var,
    hidden_size: usize,
    taps: Taps,
}

/// An embedding initialised as candle-nn's (standard normal).
pub fn embedding(vocab: usize, hidden_size: usize, vb: DpVarBuilder) -> Result<Embedding> {
    let weight = vb.get_with_hints(
        (vocab, hidden_size),
        "weight",
        Init::Randn {
            mean: 0.0,
            stdev: 1.0,
        },
    )?;
    Ok(Embedding {
        weight,
        hidden_size,
        taps: vb.taps().clone(),
    })
}

impl Embedding {
    /// The table (V, D): pass it to [`Linear::from_vars`](super::Linear::from_vars) to tie an
    /// LM head to it.
    pub fn embeddings(&self) -> &Var {
        &self.weight
    }

    /// D, the width of each embedding vector.
    pub fn hidden_size(&self) -> usize {
        self.hidden_size
    }
}

impl Module for Embedding {
    fn forward(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        let ids = if ids.dtype() == DType::U32 {
            ids.clone()
        } else {
            ids.to_dtype(DType::U32)?
        };
        let mut dims = ids.dims().to_vec();
        dims.push(self.hidden_size);
        let flat = ids.flatten_all()?;
        if !self.taps.records(&[&self.weight]) {
            return self
                .taps
                .live(&self.weight)
                .index_select(&flat, 0)?
                .reshape(dims);
        }
        let y = self
            .weight
            .as_tensor()
            .detach()
            .index_select(&flat, 0)?
            .reshape(dims)?;
        let (weight, width) = (self.weight.clone(), self.weight.as_tensor().dim(0)?);
        self.taps.tap(y, move |grad| {
            let batch = grad.dim(0)?;
            let ids = ids.reshape((batch, ()))?;
            let right = grad.reshape((batch, ids.dim(1)?, ()))?;
            Ok(vec![(
                weight,
                Contribution::Outer {
                    left: Left::OneHot { ids, width },
                    right,
                },
            )])
        })
    }
}
