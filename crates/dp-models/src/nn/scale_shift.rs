//! The per-sample gradients of the elementwise scale and shift after a normalisation
//! (LayerNorm, RMSNorm, GroupNorm): `y = x̂·γ + β`, so `∇γ = Σ g ⊙ x̂` and `∇β = Σ g`
//! over every position of an example, per channel.

use candle_core::{Tensor, Var};

use super::contribution::Contribution;
use super::taps::Taps;
use crate::cpu;

/// Where the channels of `x̂` are: the last axis (layer and RMS norm) or axis 1 (group
/// norm on (B, C, …)).
#[derive(Clone, Copy, Debug)]
pub(super) enum Channels {
    Last,
    Second,
}

/// (B, …) → (B, C): the per-example sum over every position of each channel.
fn per_channel(t: &Tensor, channels: Channels) -> candle_core::Result<Tensor> {
    let b = t.dim(0)?;
    match channels {
        Channels::Last if cpu::applies(t) => {
            cpu::row_sums(&t.reshape((b, (), t.dim(candle_core::D::Minus1)?))?)
        }
        Channels::Last => t.reshape((b, (), t.dim(candle_core::D::Minus1)?))?.sum(1),
        Channels::Second => t.reshape((b, t.dim(1)?, ()))?.sum(2),
    }
}

/// The shape that broadcasts a (C,) parameter over `x̂`.
fn broadcast_shape(xhat: &Tensor, channels: Channels) -> Vec<usize> {
    match channels {
        Channels::Last => vec![xhat.dim(candle_core::D::Minus1).unwrap_or(1)],
        Channels::Second => {
            let mut dims = vec![1; xhat.rank()];
            dims[1] = xhat.dims()[1];
            dims
        }
    }
}

/// `x̂·γ + β`; in a private forward with γ, β constant and the output tapped.
pub(super) fn scale_shift(
    taps: &Taps,
    xhat: &Tensor,
    weight: Option<&Var>,
    bias: Option<&Var>,
    channels: Channels,
) -> candle_core::Result<Tensor> {
    let shape = broadcast_shape(xhat, channels);
    let vars: Vec<&Var> = weight.into_iter().chain(bias).collect();
    let recording = taps.records(&vars);
    let param = |v: &Var| -> candle_core::Result<Tensor> {
        let t = if recording {
            v.as_tensor().detach()
        } else {
            taps.live(v)
        };
        t.reshape(shape.clone())
    };
    if recording && matches!(channels, Channels::Last) && cpu::applies(xhat) && xhat.track_op() {
        return constant_row_affine(taps, xhat, weight, bias);
    }
    if !recording && matches!(channels, Channels::Last) && cpu::applies(xhat) {
        if let (Some(w), Some(b)) = (weight, bias) {
            let trainable = !(taps.is_frozen(w) && taps.is_frozen(b));
            let (w, b) = (taps.live(w).contiguous()?, taps.live(b).contiguous()?);
            let op = cpu::RowAffine { trainable };
            return xhat.contiguous()?.apply_op3(&w, &b, op);
        }
    }
    let mut y = xhat.clone();
    if let Some(w) = weight {
        y = y.broadcast_mul(&param(w)?)?;
    }
    if let Some(b) = bias {
        y = y.broadcast_add(&param(b)?)?;
    }
    if !recording {
        return Ok(y);
    }
    tap_scale_shift(taps, y, xhat, weight, bias, channels)
}

/// Taps the output `y` of a scale and shift of `x̂`: per-sample `∇γ = Σ g ⊙ x̂`, `∇β = Σ g`.
fn tap_scale_shift(
    taps: &Taps,
    y: Tensor,
    xhat: &Tensor,
    weight: Option<&Var>,
    bias: Option<&Var>,
    channels: Channels,
) -> candle_core::Result<Tensor> {
    let (weight, bias, xhat) = (weight.cloned(), bias.cloned(), xhat.detach());
    taps.tap(y, move |grad| {
        contributions(grad, &xhat, weight, bias, channels)
    })
}

/// The per-sample gradients of γ and β from the output gradient `grad` and `x̂`.
pub(super) fn contributions(
    grad: &Tensor,
    xhat: &Tensor,
    weight: Option<Var>,
    bias: Option<Var>,
    channels: Channels,
) -> crate::error::Result<Vec<(Var, Contribution)>> {
    let mut contributions = Vec::new();
    if let Some(w) = weight {
        let gw = per_channel(&(grad * xhat)?, channels)?;
        contributions.push((w, Contribution::PerSample(gw)));
    }
    if let Some(b) = bias {
        contributions.push((b, Contribution::PerSample(per_channel(grad, channels)?)));
    }
    Ok(contributions)
}

/// The private forward's `x̂·γ + β` over the last dimension on the CPU: one op whose
/// backward is `x̂`'s gradient only (γ and β are constants there), then the tap.
fn constant_row_affine(
    taps: &Taps,
    xhat: &Tensor,
    weight: Option<&Var>,
    bias: Option<&Var>,
) -> candle_core::Result<Tensor> {
    let d = xhat.dim(candle_core::D::Minus1)?;
    let constant = |v: Option<&Var>, fill: f32| match v {
        Some(v) => Ok(v.as_tensor().detach()),
        None => Tensor::full(fill, d, xhat.device()),
    };
    let (scale, shift) = (constant(weight, 1.0)?, constant(bias, 0.0)?);
    let y = xhat
        .contiguous()?
        .apply_op3(&scale, &shift, cpu::RowAffine { trainable: false })?;
    tap_scale_shift(taps, y, xhat, weight, bias, Channels::Last)
}
