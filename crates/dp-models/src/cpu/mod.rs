//! The CPU kernels and Candle custom ops both tiers share.
//!
//! [`kernels`] holds the slice kernels (a bounds-checked gemm, im2col/col2im in NHWC,
//! split-accumulator dot products, a one-`exp` tanh) the fused executor is built from.
//! The other modules are the staged executor's and the DP layers' custom ops, one op per file, each with its
//! own backward where it sits in the graph: convolution sample by sample with its im2col
//! in cache and only the input gradient, matmuls without the unused weight gradient, max
//! pooling, tanh, and per-sample conv norms and clipped sums; and for `nn`, GELU, layer/RMS
//! normalisation, the last-dim softmax and attention in one pass each way. Candle's CPU `conv2d`
//! backward and the `index_select` pooling cost ~85% of a DP step (docs/training.md).
//! Other devices keep the portable Candle path.

use candle_core::{CpuStorage, Layout, Tensor};

mod add_bias;
mod attention;
mod conv;
mod conv_clipped_sum;
mod conv_per_sample_rows;
mod elementwise;
mod gelu;
mod ghost_sums;
pub(crate) mod kernels;
mod linear;
mod linear_residual;
mod matmul;
mod max_pool;
mod norm_affine;
mod normalize;
mod outer_per_sample;
mod outer_sum;
mod row_affine;
mod row_sums;
mod softmax;
mod tanh;
mod unfold;
mod weighted_row_sum;

pub(crate) use add_bias::AddBias;
pub(crate) use attention::Attention;
pub(crate) use conv::{conv_input_gradient, Conv};
pub(crate) use conv_clipped_sum::ConvClippedSum;
pub(crate) use conv_per_sample_rows::ConvPerSampleRows;
pub(crate) use gelu::Gelu;
pub(crate) use ghost_sums::{ghost_sums, one_hot_sums};
pub(crate) use linear::Linear;
pub(crate) use linear_residual::LinearResidual;
pub(crate) use matmul::Matmul;
pub(crate) use max_pool::{max_pool_backward, MaxPool};
pub(crate) use norm_affine::NormAffine;
pub(crate) use normalize::Normalize;
pub(crate) use outer_per_sample::outer_per_sample;
pub(crate) use outer_sum::clipped_outer_sum;
pub(crate) use row_affine::RowAffine;
pub(crate) use row_sums::row_sums;
pub(crate) use softmax::SoftmaxLastDim;
pub(crate) use tanh::{tanh_backward, Tanh};
pub(crate) use unfold::Unfold;
pub(crate) use weighted_row_sum::WeightedRowSum;

/// Whether the CPU ops apply to `t` (f32 on the CPU).
pub(crate) fn applies(t: &Tensor) -> bool {
    t.device().is_cpu() && t.dtype() == candle_core::DType::F32
}

/// The contiguous f32 data of a CPU custom op's input (an error otherwise).
pub(crate) fn f32_slice<'a>(
    storage: &'a CpuStorage,
    layout: &Layout,
) -> candle_core::Result<&'a [f32]> {
    match storage {
        CpuStorage::F32(v) => match layout.contiguous_offsets() {
            Some((start, end)) => Ok(&v[start..end]),
            None => Err(candle_core::Error::Msg(
                "CPU custom ops need contiguous inputs".into(),
            )),
        },
        _ => Err(candle_core::Error::Msg(
            "CPU custom ops need f32 tensors".into(),
        )),
    }
}

/// The contiguous f32 data of a tensor's storage, read in place (an error off the CPU).
pub(crate) fn storage_f32<'a>(
    storage: &'a candle_core::Storage,
    layout: &Layout,
) -> candle_core::Result<&'a [f32]> {
    match storage {
        candle_core::Storage::Cpu(cpu) => f32_slice(cpu, layout),
        _ => Err(candle_core::Error::Msg(
            "CPU custom ops need CPU tensors".into(),
        )),
    }
}

/// Where an op's backward leaves the gradient of its output: a DP layer's last op keeps
/// `dL/dz` for the taps itself, instead of an identity probe after it (a copy of the
/// output in the forward, a zero tensor and an addition in the backward).
pub(crate) type GradientSlot = std::sync::Arc<std::sync::Mutex<Option<Tensor>>>;

/// Stores `grad` in `slot`, if there is one.
pub(crate) fn keep_gradient(slot: Option<&GradientSlot>, grad: &Tensor) {
    if let Some(slot) = slot {
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(grad.clone());
    }
}
