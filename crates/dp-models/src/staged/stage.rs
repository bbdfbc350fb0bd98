//! The stages of a sequential model: parametric layers and parameter-free steps.

use candle_core::Tensor;

use super::layer::DpLayer;
use crate::error::{Error, Result};

/// One stage of an [`StagedModel`](super::StagedModel).
pub enum Stage {
    /// A parametric layer.
    Layer(Box<dyn DpLayer>),
    /// tanh.
    Tanh,
    /// ReLU.
    Relu,
    /// Max pooling on NCHW, any stride (through index_select windows, which have an
    /// exact backward; Candle's own pooling backward does not handle every geometry).
    MaxPool {
        /// Window.
        kernel: usize,
        /// Stride.
        stride: usize,
    },
    /// (B, C, H, W) → (B, C·H·W), PyTorch's order.
    Flatten,
    /// Reshapes flat inputs (B, C·H·W) to images (B, C, H, W).
    Image {
        /// Channels.
        channels: usize,
        /// Height.
        height: usize,
        /// Width.
        width: usize,
    },
}

/// Max pooling by the maximum over k² strided `index_select` views
/// ([`crate::nn::ops::max_pool2d_composed`]), a window larger than the input refused.
pub(super) fn max_pool(a: &Tensor, kernel: usize, stride: usize) -> Result<Tensor> {
    let (_, _, h, w) = a.dims4()?;
    if h < kernel || w < kernel {
        return Err(Error::invalid_model(
            "pooling",
            format!("pool window {kernel} exceeds the input {h}×{w}"),
        ));
    }
    Ok(crate::nn::ops::max_pool2d_composed(a, kernel, stride)?)
}
