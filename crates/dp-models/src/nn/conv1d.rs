//! The DP 1-D convolution, a drop-in for `candle_nn::Conv1d`.

use candle_core::{Module, Tensor, Var};
use candle_nn::{Conv1dConfig, Init};

use super::conv2d::conv_contributions;
use super::taps::Taps;
use super::unfold::unfold2d;
use super::var_builder::DpVarBuilder;
use crate::error::{Error, Result};

/// Convolution of (B, Cin, L) by a (Cout, Cin, k) kernel with bias; per-sample gradients
/// as [`Conv2d`](super::Conv2d)'s, on one-row images.
#[derive(Clone, Debug)]
pub struct Conv1d {
    weight: Var,
    bias: Option<Var>,
    config: Conv1dConfig,
    taps: Taps,
}

/// A 1-D convolution initialised as candle-nn's; `dilation` and `groups` must be 1.
pub fn conv1d(
    in_channels: usize,
    out_channels: usize,
    kernel: usize,
    config: Conv1dConfig,
    vb: DpVarBuilder,
) -> Result<Conv1d> {
    if config.dilation != 1 || config.groups != 1 || config.stride == 0 {
        return Err(Error::invalid_model(
            "Conv1d",
            "only stride >= 1, dilation 1 and groups 1 are supported",
        ));
    }
    let shape = (out_channels, in_channels, kernel);
    let weight = vb.get_with_hints(shape, "weight", candle_nn::init::DEFAULT_KAIMING_NORMAL)?;
    let bound = 1.0 / ((in_channels * kernel) as f64).sqrt();
    let bias = vb.get_with_hints(
        out_channels,
        "bias",
        Init::Uniform {
            lo: -bound,
            up: bound,
        },
    )?;
    Ok(Conv1d {
        weight,
        bias: Some(bias),
        config,
        taps: vb.taps().clone(),
    })
}

impl Conv1d {
    fn apply(&self, x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let c = &self.config;
        let y = x.conv1d(w, c.padding, c.stride, 1, 1)?;
        match b {
            Some(b) => y.broadcast_add(&b.reshape((1, (), 1))?),
            None => Ok(y),
        }
    }
}

impl Module for Conv1d {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let vars: Vec<&Var> = std::iter::once(&self.weight).chain(&self.bias).collect();
        if !self.taps.records(&vars) {
            let b = self.bias.as_ref().map(|b| self.taps.live(b));
            return self.apply(x, &self.taps.live(&self.weight), b.as_ref());
        }
        let b = self.bias.as_ref().map(|b| b.as_tensor().detach());
        let y = self.apply(x, &self.weight.as_tensor().detach(), b.as_ref())?;
        let (weight, bias, input) = (self.weight.clone(), self.bias.clone(), x.detach());
        let (stride, padding) = (self.config.stride, self.config.padding);
        self.taps.tap(y, move |grad| {
            let (_, _, k) = weight.as_tensor().dims3()?;
            let right = unfold2d(&input.unsqueeze(2)?, (1, k), stride, (0, padding))?;
            conv_contributions(grad, right, weight, bias)
        })
    }
}
