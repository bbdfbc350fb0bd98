//! The DP RMS norm, a drop-in for `candle_nn::RmsNorm` whose backward is complete.

use candle_core::{Module, Tensor, Var};
use candle_nn::Init;

use super::ops;
use super::scale_shift::{scale_shift, Channels};
use super::taps::Taps;
use super::var_builder::DpVarBuilder;
use crate::error::Result;

/// `x / √(mean(x²) + eps) · γ` over the last dimension, through [`ops::rms_norm`].
#[derive(Clone, Debug)]
pub struct RmsNorm {
    weight: Var,
    eps: f64,
    taps: Taps,
}

/// An RMS norm of `size` channels, γ = 1.
pub fn rms_norm(size: usize, eps: f64, vb: DpVarBuilder) -> Result<RmsNorm> {
    let weight = vb.get_with_hints(size, "weight", Init::Const(1.0))?;
    Ok(RmsNorm {
        weight,
        eps,
        taps: vb.taps().clone(),
    })
}

impl Module for RmsNorm {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let xhat = ops::rms_norm(x, self.eps)?;
        scale_shift(&self.taps, &xhat, Some(&self.weight), None, Channels::Last)
    }
}
