//! The DP 2-D convolution, a drop-in for `candle_nn::Conv2d`.

use candle_core::{DType, Module, Tensor, Var};
use candle_nn::{Conv2dConfig, Init};

use super::contribution::{Contribution, Left};
use super::taps::Taps;
use super::unfold::unfold2d;
use super::var_builder::DpVarBuilder;
use crate::error::{Error, Result};

/// Convolution of (B, Cin, H, W) by a (Cout, Cin, k, k) kernel with bias. Per-sample
/// gradients are `Gᵢᵀ Uᵢ` with `Uᵢ` the example's patches (im2col): ghost norms where
/// the output is small, materialised where the kernel is.
#[derive(Clone, Debug)]
pub struct Conv2d {
    weight: Var,
    bias: Option<Var>,
    config: Conv2dConfig,
    taps: Taps,
}

/// A 2-D convolution initialised as candle-nn's; `dilation` and `groups` must be 1.
pub fn conv2d(
    in_channels: usize,
    out_channels: usize,
    kernel: usize,
    config: Conv2dConfig,
    vb: DpVarBuilder,
) -> Result<Conv2d> {
    if config.dilation != 1 || config.groups != 1 || config.stride == 0 {
        return Err(Error::invalid_model(
            "Conv2d",
            "only stride >= 1, dilation 1 and groups 1 are supported",
        ));
    }
    let shape = (out_channels, in_channels, kernel, kernel);
    let weight = vb.get_with_hints(shape, "weight", candle_nn::init::DEFAULT_KAIMING_NORMAL)?;
    let bound = 1.0 / ((in_channels * kernel * kernel) as f64).sqrt();
    let bias = vb.get_with_hints(
        out_channels,
        "bias",
        Init::Uniform {
            lo: -bound,
            up: bound,
        },
    )?;
    Ok(Conv2d {
        weight,
        bias: Some(bias),
        config,
        taps: vb.taps().clone(),
    })
}

impl Conv2d {
    fn apply(&self, x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let c = &self.config;
        let y = x.conv2d(w, c.padding, c.stride, 1, 1)?;
        match b {
            Some(b) => y.broadcast_add(&b.reshape((1, (), 1, 1))?),
            None => Ok(y),
        }
    }
}

impl Module for Conv2d {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if !self.taps.is_recording() {
            return self.apply(
                x,
                self.weight.as_tensor(),
                self.bias.as_ref().map(|b| b.as_tensor()),
            );
        }
        let b = self.bias.as_ref().map(|b| b.as_tensor().detach());
        let y = self.apply(x, &self.weight.as_tensor().detach(), b.as_ref())?;
        let (weight, bias, input) = (self.weight.clone(), self.bias.clone(), x.detach());
        let (stride, padding) = (self.config.stride, self.config.padding);
        self.taps.tap(y, move |grad| {
            let (_, _, k, _) = weight.as_tensor().dims4()?;
            let right = unfold2d(&input, (k, k), stride, (padding, padding))?;
            conv_contributions(grad, right, weight, bias)
        })
    }
}

/// The contributions of a convolution from its output gradient (B, Cout, …) and its
/// patches (B, L, Cin·k…): weight `Gᵀ U`, bias `Σ G`.
pub(super) fn conv_contributions(
    grad: &Tensor,
    right: Tensor,
    weight: Var,
    bias: Option<Var>,
) -> Result<Vec<(Var, Contribution)>> {
    let (batch, cout) = (grad.dim(0)?, grad.dim(1)?);
    let left = grad
        .reshape((batch, cout, ()))?
        .transpose(1, 2)?
        .contiguous()?;
    let positions = left.dim(1)?;
    let mut out = vec![(
        weight,
        Contribution::Outer {
            left: Left::Dense(left.clone()),
            right,
        },
    )];
    if let Some(bias) = bias {
        let ones = Tensor::ones((batch, positions, 1), DType::F32, grad.device())?;
        out.push((
            bias,
            Contribution::Outer {
                left: Left::Dense(left),
                right: ones,
            },
        ));
    }
    Ok(out)
}
