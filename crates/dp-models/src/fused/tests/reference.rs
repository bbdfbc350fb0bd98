//! An independent reference: the same networks built from stock Candle ops in PyTorch
//! layout, differentiated by Candle's autograd one example at a time.

use crate::fused::{LayerSpec, NetSpec, TorchLayer};
use candle_core::{DType, Device, Tensor, Var};

/// Per-example gradient (PyTorch layout: weight then bias per parametric layer) and
/// logits of one example `x` (C·H·W, NCHW) with label `y`.
pub fn per_example(
    spec: &NetSpec,
    torch: &[TorchLayer],
    x: &[f32],
    y: u32,
) -> candle_core::Result<(Vec<TorchLayer>, Vec<f32>)> {
    let dev = Device::Cpu;
    let vars: Vec<(Var, Var)> = torch
        .iter()
        .map(|t| {
            Ok((
                Var::from_vec(t.weight.clone(), t.weight_shape.clone(), &dev)?,
                Var::from_vec(t.bias.clone(), t.bias.len(), &dev)?,
            ))
        })
        .collect::<candle_core::Result<_>>()?;
    let (c, h, w) = input_shape(spec, x.len());
    let mut a = Tensor::from_vec(x.to_vec(), (1, c, h, w), &dev)?;
    let mut next = 0;
    for layer in spec.layer_specs() {
        a = match *layer {
            LayerSpec::Conv2d {
                stride, padding, ..
            } => {
                let (wv, bv) = &vars[next];
                next += 1;
                let z = a.conv2d(wv.as_tensor(), padding, stride, 1, 1)?;
                z.broadcast_add(&bv.as_tensor().reshape((1, (), 1, 1))?)?
            }
            LayerSpec::Linear { .. } => {
                let (wv, bv) = &vars[next];
                next += 1;
                a.matmul(&wv.as_tensor().t()?)?
                    .broadcast_add(bv.as_tensor())?
            }
            LayerSpec::Tanh => a.tanh()?,
            LayerSpec::Relu => a.relu()?,
            LayerSpec::Flatten => a.flatten_from(1)?,
            // Candle's own pooling backward is wrong when the input is not a multiple of the
            // window (it upsamples the gradient to the input size), so pool through
            // index_select windows, which differentiate exactly.
            LayerSpec::MaxPool { kernel, stride } => {
                let windows = pool_windows(&a, kernel, stride)?;
                windows
                    .iter()
                    .skip(1)
                    .try_fold(windows[0].clone(), |m, w| m.maximum(w))?
            }
            LayerSpec::AvgPool { kernel, stride } => {
                let windows = pool_windows(&a, kernel, stride)?;
                (windows
                    .iter()
                    .skip(1)
                    .try_fold(windows[0].clone(), |m, w| m + w)?
                    / (kernel * kernel) as f64)?
            }
        };
    }
    let log_probs = candle_nn::ops::log_softmax(&a, 1)?;
    let loss = log_probs.get(0)?.get(y as usize)?.neg()?;
    let grads = loss.backward()?;
    let zeros = |v: &Var| Tensor::zeros(v.as_tensor().shape(), DType::F32, &dev);
    let out = vars
        .iter()
        .zip(torch)
        .map(|((wv, bv), t)| {
            let gw = grads
                .get(wv.as_tensor())
                .cloned()
                .map_or_else(|| zeros(wv), Ok)?;
            let gb = grads
                .get(bv.as_tensor())
                .cloned()
                .map_or_else(|| zeros(bv), Ok)?;
            Ok(TorchLayer {
                weight: gw.flatten_all()?.to_vec1()?,
                weight_shape: t.weight_shape.clone(),
                bias: gb.to_vec1()?,
            })
        })
        .collect::<candle_core::Result<_>>()?;
    Ok((out, a.flatten_all()?.to_vec1()?))
}

/// The k² shifted, strided views of `a` (N, C, H, W) that a k×k/stride-s pool maximises
/// or averages over.
fn pool_windows(a: &Tensor, kernel: usize, stride: usize) -> candle_core::Result<Vec<Tensor>> {
    let (_, _, h, w) = a.dims4()?;
    let (oh, ow) = ((h - kernel) / stride + 1, (w - kernel) / stride + 1);
    let index = |offset: usize, n: usize| {
        Tensor::from_vec(
            (0..n)
                .map(|i| (offset + i * stride) as u32)
                .collect::<Vec<_>>(),
            n,
            a.device(),
        )
    };
    let mut windows = Vec::new();
    for ky in 0..kernel {
        for kx in 0..kernel {
            windows.push(
                a.index_select(&index(ky, oh)?, 2)?
                    .index_select(&index(kx, ow)?, 3)?,
            );
        }
    }
    Ok(windows)
}

fn input_shape(spec: &NetSpec, len: usize) -> (usize, usize, usize) {
    // The tests use square single-channel images or flat vectors.
    let _ = spec;
    let side = (len as f64).sqrt() as usize;
    if side * side == len && len > 64 {
        (1, side, side)
    } else {
        (len, 1, 1)
    }
}
