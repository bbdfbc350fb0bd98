//! The DP group norm, a drop-in for `candle_nn::GroupNorm` (per-example statistics, so
//! per-sample gradients are well defined, unlike batch norm's).

use candle_core::{Module, Tensor, Var};
use candle_nn::Init;

use super::ops;
use super::scale_shift::{scale_shift, Channels};
use super::taps::Taps;
use super::var_builder::DpVarBuilder;
use crate::error::{Error, Result};

/// Normalisation of (B, C, …) over each group of C/G channels and every position, then a
/// per-channel scale and shift.
#[derive(Clone, Debug)]
pub struct GroupNorm {
    weight: Var,
    bias: Var,
    num_groups: usize,
    eps: f64,
    taps: Taps,
}

/// A group norm of `num_channels` in `num_groups` groups, γ = 1, β = 0.
pub fn group_norm(
    num_groups: usize,
    num_channels: usize,
    eps: f64,
    vb: DpVarBuilder,
) -> Result<GroupNorm> {
    if num_groups == 0 || !num_channels.is_multiple_of(num_groups) {
        return Err(Error::invalid_model(
            "GroupNorm",
            format!("{num_channels} channels do not split into {num_groups} groups"),
        ));
    }
    Ok(GroupNorm {
        weight: vb.get_with_hints(num_channels, "weight", Init::Const(1.0))?,
        bias: vb.get_with_hints(num_channels, "bias", Init::Const(0.0))?,
        num_groups,
        eps,
        taps: vb.taps().clone(),
    })
}

impl Module for GroupNorm {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let b = x.dim(0)?;
        let xhat =
            ops::layer_norm(&x.reshape((b, self.num_groups, ()))?, self.eps)?.reshape(x.shape())?;
        scale_shift(
            &self.taps,
            &xhat,
            Some(&self.weight),
            Some(&self.bias),
            Channels::Second,
        )
    }
}
