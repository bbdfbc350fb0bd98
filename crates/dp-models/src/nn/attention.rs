//! Multi-head self-attention from four DP Linear layers and the differentiable softmax.

use candle_core::{Module, Tensor};

use super::linear::{linear, Linear};
use super::ops;
use super::var_builder::DpVarBuilder;
use crate::error::{Error, Result};

/// Multi-head self-attention on (B, T, d): projections `q`, `k`, `v`, `o` (DP Linear
/// layers, so their per-sample gradients are ghost-clipped over the sequence) around
/// [`ops::attention`] (scaled dot products, an optional causal mask, the softmax).
#[derive(Clone, Debug)]
pub struct MultiHeadAttention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    heads: usize,
    causal: bool,
}

impl MultiHeadAttention {
    /// `heads` heads of width `d / heads`; `causal` masks future positions.
    pub fn new(d: usize, heads: usize, causal: bool, vb: DpVarBuilder) -> Result<Self> {
        if heads == 0 || !d.is_multiple_of(heads) {
            return Err(Error::invalid_model(
                "attention",
                format!("width {d} does not split into {heads} heads"),
            ));
        }
        Ok(MultiHeadAttention {
            q: linear(d, d, vb.pp("q"))?,
            k: linear(d, d, vb.pp("k"))?,
            v: linear(d, d, vb.pp("v"))?,
            o: linear(d, d, vb.pp("o"))?,
            heads,
            causal,
        })
    }
}

impl super::LinearLayers for MultiHeadAttention {
    fn linear_layers_mut(&mut self) -> Vec<&mut Linear> {
        vec![&mut self.q, &mut self.k, &mut self.v, &mut self.o]
    }
}

impl MultiHeadAttention {
    /// The heads' output before the projection `o`.
    fn heads(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (q, k, v) = (self.q.forward(x)?, self.k.forward(x)?, self.v.forward(x)?);
        ops::attention(&q, &k, &v, self.heads, self.causal)
    }

    /// `residual + attention(x)`: the projection `o` and a pre-LN block's residual
    /// addition in one op on the CPU ([`Linear::forward_residual`]).
    pub fn forward_residual(&self, x: &Tensor, residual: &Tensor) -> candle_core::Result<Tensor> {
        self.o.forward_residual(&self.heads(x)?, residual)
    }
}

impl Module for MultiHeadAttention {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.o.forward(&self.heads(x)?)
    }
}
