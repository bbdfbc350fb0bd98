//! The stages of a sequential model: parametric layers and parameter-free steps.

use candle_core::Tensor;

use super::layer::DpLayer;
use crate::error::{Error, Result};

/// One stage of an [`StagedModel`](super::StagedModel).
pub enum Stage {
    /// A parametric layer.
    Layer(Box<dyn DpLayer>),
    /// The elementwise hyperbolic tangent.
    Tanh,
    /// The elementwise `max(x, 0)`.
    Relu,
    /// Max pooling on NCHW, any stride (through index_select windows, which have an
    /// exact backward; Candle's own pooling backward does not handle every geometry).
    MaxPool {
        /// The window's side, in pixels.
        kernel: usize,
        /// Pixels between successive windows, in both directions.
        stride: usize,
    },
    /// (B, C, H, W) → (B, C·H·W), PyTorch's order.
    Flatten,
    /// Reshapes flat inputs (B, C·H·W) to images (B, C, H, W).
    Image {
        /// C, the image's channels.
        channels: usize,
        /// H, its height in pixels.
        height: usize,
        /// W, its width in pixels.
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
