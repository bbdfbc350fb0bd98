//! The DP 2-D convolution, a drop-in for `candle_nn::Conv2d`.

use candle_core::{DType, Module, Tensor, Var};
use candle_nn::{Conv2dConfig, Init};

use super::contribution::Contribution;
use super::left_factor::Left;
use super::taps::Taps;
use super::unfold::unfold2d;
use super::var_builder::DpVarBuilder;
use crate::cpu;
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
    /// The kernel (Cout, Cin, k, k).
    pub fn weight(&self) -> &Var {
        &self.weight
    }

    /// The bias, if any.
    pub fn bias(&self) -> Option<&Var> {
        self.bias.as_ref()
    }

    /// Stride, padding (dilation and groups are 1).
    pub fn config(&self) -> &Conv2dConfig {
        &self.config
    }

    fn apply(&self, x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> candle_core::Result<Tensor> {
        let c = &self.config;
        let y = x.conv2d(w, c.padding, c.stride, 1, 1)?;
        match b {
            Some(b) => y.broadcast_add(&b.reshape((1, (), 1, 1))?),
            None => Ok(y),
        }
    }
}

impl Conv2d {
    /// The CPU geometry of this convolution on `x` (B, Cin, H, W).
    fn geometry(&self, x: &Tensor) -> candle_core::Result<cpu::Unfold> {
        let (_, channels, height, width) = x.dims4()?;
        let (_, _, kernel, _) = self.weight.as_tensor().dims4()?;
        Ok(cpu::Unfold {
            channels,
            height,
            width,
            kernel,
            stride: self.config.stride,
            padding: self.config.padding,
        })
    }

    /// The private forward on the CPU: one op, sample by sample with the im2col in cache,
    /// whose backward is the input gradient only (Candle's conv2d backward would also
    /// compute the unused kernel gradient).
    fn private_cpu_forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let geometry = self.geometry(x)?;
        let (oh, ow) = geometry.out_size();
        let w = self.weight.as_tensor().detach();
        let cout = w.dim(0)?;
        let bias = match &self.bias {
            Some(b) => b.as_tensor().detach(),
            None => Tensor::zeros(cout, DType::F32, x.device())?,
        };
        x.contiguous()?
            .apply_op3(&w.reshape((cout, ()))?, &bias, cpu::Conv(geometry))?
            .reshape((x.dim(0)?, cout, oh, ow))
    }
}

impl Module for Conv2d {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let vars: Vec<&Var> = std::iter::once(&self.weight).chain(&self.bias).collect();
        if !self.taps.records(&vars) {
            let b = self.bias.as_ref().map(|b| self.taps.live(b));
            return self.apply(x, &self.taps.live(&self.weight), b.as_ref());
        }
        let on_cpu = cpu::applies(x);
        let y = if on_cpu {
            self.private_cpu_forward(x)?
        } else {
            let b = self.bias.as_ref().map(|b| b.as_tensor().detach());
            self.apply(x, &self.weight.as_tensor().detach(), b.as_ref())?
        };
        let geometry = self.geometry(x)?;
        let (weight, bias, input) = (self.weight.clone(), self.bias.clone(), x.detach());
        self.taps.tap(y, move |grad| {
            let k = geometry.kernel;
            let right = if on_cpu {
                input.contiguous()?.apply_op1_no_bwd(&geometry)?
            } else {
                let p = geometry.padding;
                unfold2d(&input, (k, k), geometry.stride, (p, p))?
            };
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
    let rows = grad.reshape((batch, cout, ()))?;
    // The bias's per-sample gradients, Σ over positions: (B, Cout), materialised.
    let bias = match bias {
        Some(b) => Some((b, Contribution::PerSample(rows.sum(2)?))),
        None => None,
    };
    let weight = (
        weight,
        Contribution::Outer {
            left: Left::Dense(rows.transpose(1, 2)?),
            right,
        },
    );
    Ok(std::iter::once(weight).chain(bias).collect())
}
