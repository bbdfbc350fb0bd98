//! The fused executor against an independent per-example autograd reference: gradients,
//! norms, clipping, layouts and reproducibility.

mod executor;
mod reference;

use super::spec::{LayerSpec, NetSpec};

/// The MNIST CNN of `crate::models::mnist_cnn` as a fused spec, `act` after each
/// layer but the last.
pub(crate) fn mnist_cnn(act: LayerSpec) -> crate::Result<NetSpec> {
    let pool = LayerSpec::MaxPool {
        kernel: 2,
        stride: 1,
    };
    let conv = |out_channels, kernel, padding| LayerSpec::Conv2d {
        out_channels,
        kernel,
        stride: 2,
        padding,
    };
    let layers = [
        conv(16, 8, 2),
        act,
        pool,
        conv(32, 4, 0),
        act,
        pool,
        LayerSpec::Flatten,
        LayerSpec::Linear { out_features: 32 },
        act,
        LayerSpec::Linear { out_features: 10 },
    ];
    NetSpec::new(1, 28, 28, &layers)
}
