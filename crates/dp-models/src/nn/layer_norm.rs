//! The DP layer norm, a drop-in for `candle_nn::LayerNorm` whose backward is complete.

use candle_core::{Module, Tensor, Var};
use candle_nn::{Init, LayerNormConfig};

use super::ops;
use super::scale_shift::{scale_shift, Channels};
use super::taps::Taps;
use super::var_builder::DpVarBuilder;
use crate::error::Result;

/// Normalisation over the last dimension, then a per-channel scale (and shift if
/// `affine`), as candle-nn's `LayerNorm` — but through [`ops::layer_norm`], which has a
/// backward (candle-nn's fused op does not, so nothing upstream of it would train).
#[derive(Clone, Debug)]
pub struct LayerNorm {
    weight: Var,
    bias: Option<Var>,
    config: LayerNormConfig,
    taps: Taps,
}

/// A layer norm of `size` channels, initialised as candle-nn's (γ = 1, β = 0).
pub fn layer_norm(
    size: usize,
    config: impl Into<LayerNormConfig>,
    vb: DpVarBuilder,
) -> Result<LayerNorm> {
    let config = config.into();
    let weight = vb.get_with_hints(size, "weight", Init::Const(1.0))?;
    let bias = if config.affine {
        Some(vb.get_with_hints(size, "bias", Init::Const(0.0))?)
    } else {
        None
    };
    Ok(LayerNorm {
        weight,
        bias,
        config,
        taps: vb.taps().clone(),
    })
}

impl LayerNorm {
    /// The scale γ (d).
    pub fn weight(&self) -> &Var {
        &self.weight
    }

    /// The shift β (d), if affine.
    pub fn bias(&self) -> Option<&Var> {
        self.bias.as_ref()
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let xhat = if self.config.remove_mean {
            ops::layer_norm(x, self.config.eps)?
        } else {
            ops::rms_norm(x, self.config.eps)?
        };
        scale_shift(
            &self.taps,
            &xhat,
            Some(&self.weight),
            self.bias.as_ref(),
            Channels::Last,
        )
    }
}
