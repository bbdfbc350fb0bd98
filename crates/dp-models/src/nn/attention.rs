//! Multi-head self-attention from four DP Linear layers and the differentiable softmax.

use candle_core::{Module, Tensor};

use super::linear::{linear, Linear};
use super::ops;
use super::var_builder::DpVarBuilder;
use crate::error::{Error, Result};

/// Multi-head self-attention on (B, T, d): projections `q`, `k`, `v`, `o` (DP Linear
/// layers, so their per-sample gradients are ghost-clipped over the sequence), scaled dot
/// products, an optional causal mask, and [`ops::softmax_last_dim`].
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

impl Module for MultiHeadAttention {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (b, t, d) = x.dims3()?;
        let width = d / self.heads;
        let split = |y: Tensor| {
            y.reshape((b, t, self.heads, width))?
                .transpose(1, 2)?
                .contiguous()
        };
        let q = split(self.q.forward(x)?)?;
        let k = split(self.k.forward(x)?)?;
        let v = split(self.v.forward(x)?)?;
        let mut scores = (q.matmul(&k.t()?.contiguous()?)? / (width as f64).sqrt())?;
        if self.causal {
            scores = scores.broadcast_add(&ops::causal_mask(t, x.device())?)?;
        }
        let attended = ops::softmax_last_dim(&scores)?.matmul(&v)?;
        self.o
            .forward(&attended.transpose(1, 2)?.reshape((b, t, d))?)
    }
}
