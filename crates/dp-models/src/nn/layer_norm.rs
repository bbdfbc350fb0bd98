//! The DP layer norm, a drop-in for `candle_nn::LayerNorm` whose backward is complete.

use candle_core::{Module, Tensor, Var};
use candle_nn::{Init, LayerNormConfig};

use super::ops;
use super::scale_shift::{self, scale_shift, Channels};
use super::taps::Taps;
use super::var_builder::DpVarBuilder;
use crate::cpu;
use crate::error::{Error, Result};

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
        if let Some(y) = self.fused(x)? {
            return Ok(y);
        }
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

impl LayerNorm {
    /// `x̂·γ + β` as one CPU op ([`cpu::NormAffine`]) where it applies: f32 on the CPU,
    /// with both γ and β; in a private forward only where `x` is in the graph (there the
    /// op's backward leaves the output's gradient for the tap, and its forward `x̂`).
    fn fused(&self, x: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let Some(bias) = &self.bias else {
            return Ok(None);
        };
        if !cpu::applies(x) {
            return Ok(None);
        }
        let normalize = cpu::Normalize {
            eps: self.config.eps as f32,
            remove_mean: self.config.remove_mean,
        };
        let x = x.contiguous()?;
        if !self.taps.records(&[&self.weight, bias]) {
            let trainable = !(self.taps.is_frozen(&self.weight) && self.taps.is_frozen(bias));
            let w = self.taps.live(&self.weight).contiguous()?;
            let b = self.taps.live(bias).contiguous()?;
            let op = cpu::NormAffine::new(normalize, trainable, None, None);
            return Ok(Some(x.apply_op3(&w, &b, op)?));
        }
        if !x.track_op() {
            return Ok(None);
        }
        let (slot, normalised) = (cpu::GradientSlot::default(), cpu::GradientSlot::default());
        let op = cpu::NormAffine::new(
            normalize,
            false,
            Some(slot.clone()),
            Some(normalised.clone()),
        );
        let (w, b) = (self.weight.as_tensor().detach(), bias.as_tensor().detach());
        let y = x.apply_op3(&w, &b, op)?;
        let (weight, bias) = (self.weight.clone(), bias.clone());
        let resolve = move |grad: &Tensor| {
            let xhat = normalised
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .ok_or_else(|| Error::invalid_model("LayerNorm", "no normalised input kept"))?;
            scale_shift::contributions(grad, &xhat, Some(weight), Some(bias), Channels::Last)
        };
        Ok(Some(self.taps.tap_caught(y, slot, resolve)))
    }
}
