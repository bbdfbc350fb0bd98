//! Parameter layouts: the executor's internal flat θ and PyTorch's tensors.
//!
//! Internal: a conv weight is `(Cout, kh·kw·Cin + 1)` with columns in (ky, kx, cin) order
//! and the bias last; a linear weight is `(out, in + 1)`, bias last, and a linear after a
//! Flatten of an (h, w, c) activation reads its inputs in (h, w, c) order. PyTorch: conv
//! `(Cout, Cin, kh, kw)` + bias `(Cout)`; linear `(out, in)` + bias `(out)`, inputs of a
//! flattened activation in (c, h, w) order.

use super::spec::{Kind, NetSpec};
use crate::error::{Error, Result};

/// One parametric layer's tensors in PyTorch layout.
#[derive(Clone, Debug, PartialEq)]
pub struct TorchLayer {
    /// Weight values, row-major in PyTorch's shape.
    pub weight: Vec<f32>,
    /// PyTorch's weight shape.
    pub weight_shape: Vec<usize>,
    /// Bias values.
    pub bias: Vec<f32>,
}

impl TorchLayer {
    #[cfg(test)]
    /// The weight (in its PyTorch shape) and the bias as tensors on `device`.
    pub fn to_tensors(
        &self,
        device: &candle_core::Device,
    ) -> Result<(candle_core::Tensor, candle_core::Tensor)> {
        let weight = candle_core::Tensor::from_vec(
            self.weight.clone(),
            self.weight_shape.as_slice(),
            device,
        )?;
        let bias = candle_core::Tensor::from_vec(self.bias.clone(), self.bias.len(), device)?;
        Ok((weight, bias))
    }
}

/// For each linear layer, the (h, w, c) shape of the activation that was flattened into
/// it, if it directly follows a Flatten of a spatial activation.
fn flattened_shapes(spec: &NetSpec) -> Vec<Option<(usize, usize, usize)>> {
    let mut last_flatten = None;
    spec.layers
        .iter()
        .map(|layer| match layer.kind {
            Kind::Flatten => {
                last_flatten = Some(layer.input);
                None
            }
            Kind::Linear { .. } => last_flatten.take(),
            Kind::Conv { .. } => {
                last_flatten = None;
                None
            }
            _ => None,
        })
        .collect()
}

/// θ (internal) → PyTorch tensors, one entry per parametric layer in order.
pub fn to_torch(spec: &NetSpec, theta: &[f32]) -> Vec<TorchLayer> {
    let flat = flattened_shapes(spec);
    spec.layers
        .iter()
        .zip(flat)
        .filter_map(|(layer, flat)| {
            let params = &theta[layer.params.0..][..layer.params.1];
            match layer.kind {
                Kind::Conv {
                    kernel, cin, cout, ..
                } => {
                    let cols = kernel * kernel * cin + 1;
                    let mut weight = vec![0.0; cout * cin * kernel * kernel];
                    for o in 0..cout {
                        for ky in 0..kernel {
                            for kx in 0..kernel {
                                for ci in 0..cin {
                                    weight[((o * cin + ci) * kernel + ky) * kernel + kx] =
                                        params[o * cols + (ky * kernel + kx) * cin + ci];
                                }
                            }
                        }
                    }
                    let bias = (0..cout).map(|o| params[o * cols + cols - 1]).collect();
                    Some(TorchLayer {
                        weight,
                        weight_shape: vec![cout, cin, kernel, kernel],
                        bias,
                    })
                }
                Kind::Linear { nin, nout } => {
                    let mut weight = vec![0.0; nout * nin];
                    for o in 0..nout {
                        for j in 0..nin {
                            weight[o * nin + torch_input_index(flat, j)] =
                                params[o * (nin + 1) + j];
                        }
                    }
                    let bias = (0..nout).map(|o| params[o * (nin + 1) + nin]).collect();
                    Some(TorchLayer {
                        weight,
                        weight_shape: vec![nout, nin],
                        bias,
                    })
                }
                _ => None,
            }
        })
        .collect()
}

/// The PyTorch (c, h, w) flat index of internal (h, w, c) flat index `j`.
fn torch_input_index(flat: Option<(usize, usize, usize)>, j: usize) -> usize {
    match flat {
        Some((h, w, c)) => {
            let (pixel, ch) = (j / c, j % c);
            ch * h * w + pixel
        }
        None => j,
    }
}

/// PyTorch tensors → θ (internal). Shapes must match the spec.
pub fn from_torch(spec: &NetSpec, layers: &[TorchLayer]) -> Result<Vec<f32>> {
    let mut theta = vec![0.0; spec.num_params];
    let flat = flattened_shapes(spec);
    let mut given = layers.iter();
    for (layer, flat) in spec.layers.iter().zip(flat) {
        let (offset, count) = layer.params;
        if count == 0 {
            continue;
        }
        let t = given.next().ok_or_else(|| {
            Error::invalid_model("PyTorch layout", "fewer tensors than parametric layers")
        })?;
        let params = &mut theta[offset..][..count];
        match layer.kind {
            Kind::Conv {
                kernel, cin, cout, ..
            } => {
                if t.weight_shape != [cout, cin, kernel, kernel]
                    || t.bias.len() != cout
                    || t.weight.len() != cout * cin * kernel * kernel
                {
                    return Err(Error::invalid_model(
                        "PyTorch layout",
                        format!(
                            "conv weight shape {:?}, expected [{cout}, {cin}, {kernel}, {kernel}]",
                            t.weight_shape
                        ),
                    ));
                }
                let cols = kernel * kernel * cin + 1;
                for o in 0..cout {
                    for ky in 0..kernel {
                        for kx in 0..kernel {
                            for ci in 0..cin {
                                params[o * cols + (ky * kernel + kx) * cin + ci] =
                                    t.weight[((o * cin + ci) * kernel + ky) * kernel + kx];
                            }
                        }
                    }
                    params[o * cols + cols - 1] = t.bias[o];
                }
            }
            Kind::Linear { nin, nout } => {
                if t.weight_shape != [nout, nin]
                    || t.bias.len() != nout
                    || t.weight.len() != nout * nin
                {
                    return Err(Error::invalid_model(
                        "PyTorch layout",
                        format!(
                            "linear weight shape {:?}, expected [{nout}, {nin}]",
                            t.weight_shape
                        ),
                    ));
                }
                for o in 0..nout {
                    for j in 0..nin {
                        params[o * (nin + 1) + j] = t.weight[o * nin + torch_input_index(flat, j)];
                    }
                    params[o * (nin + 1) + nin] = t.bias[o];
                }
            }
            _ => unreachable!("only conv and linear layers have parameters"),
        }
    }
    if given.next().is_some() {
        return Err(Error::invalid_model(
            "PyTorch layout",
            "more tensors than parametric layers",
        ));
    }
    Ok(theta)
}
