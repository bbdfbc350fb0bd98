//! Network specifications for the fused tier, and their validated plans.

use crate::error::{Error, Result};

/// One layer of a sequential network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerSpec {
    /// 2-D convolution (square kernel), with bias.
    Conv2d {
        /// Output channels.
        out_channels: usize,
        /// The kernel's side, in pixels.
        kernel: usize,
        /// Pixels between successive kernel positions, in both directions.
        stride: usize,
        /// Zero padding on every side.
        padding: usize,
    },
    /// Fully connected layer with bias, on a flat input.
    Linear {
        /// Output features.
        out_features: usize,
    },
    /// The elementwise hyperbolic tangent.
    Tanh,
    /// The elementwise `max(x, 0)`.
    Relu,
    /// Max pooling (square window), PyTorch's tie rule (first maximum wins).
    MaxPool {
        /// The window's side, in pixels.
        kernel: usize,
        /// Pixels between successive windows, in both directions.
        stride: usize,
    },
    /// Average pooling (square window, no padding).
    AvgPool {
        /// The window's side, in pixels.
        kernel: usize,
        /// Pixels between successive windows, in both directions.
        stride: usize,
    },
    /// Flattens (height, width, channels) into one vector.
    Flatten,
}

/// What a layer does, with its geometry resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Conv {
        kernel: usize,
        stride: usize,
        padding: usize,
        cin: usize,
        cout: usize,
    },
    Linear {
        nin: usize,
        nout: usize,
    },
    Tanh,
    Relu,
    MaxPool {
        kernel: usize,
        stride: usize,
    },
    AvgPool {
        kernel: usize,
        stride: usize,
    },
    Flatten,
}

/// Activation shape of one sample: (height, width, channels), NHWC; flat vectors are (1, 1, n).
pub(crate) type Shape3 = (usize, usize, usize);

/// One layer of a validated plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LayerPlan {
    pub kind: Kind,
    pub input: Shape3,
    pub output: Shape3,
    /// Offset of the layer's parameters in θ, and their count.
    pub params: (usize, usize),
    /// Whether a parametric layer precedes this one (so its input gradient is needed).
    pub needs_input_grad: bool,
}

pub(crate) fn size(s: Shape3) -> usize {
    s.0 * s.1 * s.2
}

/// A validated sequential network: input shape, layers, parameter layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetSpec {
    pub(crate) input: Shape3,
    pub(crate) layers: Vec<LayerPlan>,
    pub(crate) specs: Vec<LayerSpec>,
    pub(crate) num_params: usize,
}

impl NetSpec {
    /// Validates `layers` for an input of `channels × height × width`.
    pub fn new(channels: usize, height: usize, width: usize, layers: &[LayerSpec]) -> Result<Self> {
        let bad = |i: usize, why: String| {
            Error::invalid_model(
                "network spec",
                format!("layer {i} ({:?}): {why}", layers[i]),
            )
        };
        if channels == 0 || height == 0 || width == 0 {
            return Err(Error::invalid_model(
                "network spec",
                "the input shape must be non-empty",
            ));
        }
        let mut shape: Shape3 = (height, width, channels);
        let mut plans = Vec::with_capacity(layers.len());
        let mut offset = 0;
        let mut seen_params = false;
        for (i, spec) in layers.iter().enumerate() {
            let (h, w, c) = shape;
            let window = |k: usize, s: usize, p: usize| -> Result<(usize, usize)> {
                if k == 0 || s == 0 {
                    return Err(bad(i, "kernel and stride must be >= 1".into()));
                }
                if h + 2 * p < k || w + 2 * p < k {
                    return Err(bad(
                        i,
                        format!("kernel {k} exceeds the padded input {h}×{w}"),
                    ));
                }
                Ok(((h + 2 * p - k) / s + 1, (w + 2 * p - k) / s + 1))
            };
            let (kind, output, params) = match *spec {
                LayerSpec::Conv2d {
                    out_channels,
                    kernel,
                    stride,
                    padding,
                } => {
                    if out_channels == 0 {
                        return Err(bad(i, "out_channels must be >= 1".into()));
                    }
                    let (oh, ow) = window(kernel, stride, padding)?;
                    let kind = Kind::Conv {
                        kernel,
                        stride,
                        padding,
                        cin: c,
                        cout: out_channels,
                    };
                    (
                        kind,
                        (oh, ow, out_channels),
                        out_channels * (kernel * kernel * c + 1),
                    )
                }
                LayerSpec::Linear { out_features } => {
                    if h != 1 || w != 1 {
                        return Err(bad(
                            i,
                            format!("needs a flat input (add Flatten); got {h}×{w}×{c}"),
                        ));
                    }
                    if out_features == 0 {
                        return Err(bad(i, "out_features must be >= 1".into()));
                    }
                    (
                        Kind::Linear {
                            nin: c,
                            nout: out_features,
                        },
                        (1, 1, out_features),
                        out_features * (c + 1),
                    )
                }
                LayerSpec::Tanh => (Kind::Tanh, shape, 0),
                LayerSpec::Relu => (Kind::Relu, shape, 0),
                LayerSpec::MaxPool { kernel, stride } => {
                    let (oh, ow) = window(kernel, stride, 0)?;
                    (Kind::MaxPool { kernel, stride }, (oh, ow, c), 0)
                }
                LayerSpec::AvgPool { kernel, stride } => {
                    let (oh, ow) = window(kernel, stride, 0)?;
                    (Kind::AvgPool { kernel, stride }, (oh, ow, c), 0)
                }
                LayerSpec::Flatten => (Kind::Flatten, (1, 1, h * w * c), 0),
            };
            plans.push(LayerPlan {
                kind,
                input: shape,
                output,
                params: (offset, params),
                needs_input_grad: seen_params,
            });
            offset += params;
            seen_params |= params > 0;
            shape = output;
        }
        if plans.is_empty() || shape.0 != 1 || shape.1 != 1 {
            return Err(Error::invalid_model(
                "network spec",
                "the network must end in a flat output (Linear)",
            ));
        }
        if offset == 0 {
            return Err(Error::invalid_model(
                "network spec",
                "the network has no parameters",
            ));
        }
        Ok(NetSpec {
            input: (height, width, channels),
            layers: plans,
            specs: layers.to_vec(),
            num_params: offset,
        })
    }

    /// The number of parameters P.
    pub fn num_params(&self) -> usize {
        self.num_params
    }

    /// Values per input example (C·H·W).
    pub fn input_size(&self) -> usize {
        size(self.input)
    }

    /// Logits per example.
    pub fn output_size(&self) -> usize {
        self.layers.last().map_or(0, |l| size(l.output))
    }

    #[cfg(test)]
    /// The layers as given.
    pub fn layer_specs(&self) -> &[LayerSpec] {
        &self.specs
    }
}
