//! The forward: samples end to end, one chunk of samples per task, layer by layer.

use rayon::prelude::*;

use super::super::spec::{size, Kind, LayerPlan, NetSpec};
use super::workspace::{chunk_len, conv_geometry, Workspace, CHUNKS};
use crate::cpu::kernels::{dot, im2col, matmul, tanh_fast, Mat};

/// Runs the forward on `batch` samples of `x` (NCHW, as datasets store images) and
/// returns the logits (batch × outputs); activations stay in `ws` for the backward.
pub fn forward(
    spec: &NetSpec,
    theta: &[f32],
    x: &[f32],
    batch: usize,
    ws: &mut Workspace,
) -> Vec<f32> {
    ws.ensure(spec, batch);
    to_nhwc(spec, x, batch, &mut ws.input);
    let in_size = spec.input_size();
    let chunk = chunk_len(batch);
    let layers = &spec.layers;
    let (outputs, argmaxes) = chunk_pieces(layers, batch, chunk, &mut ws.outputs, &mut ws.argmax);
    let input = &ws.input;
    outputs
        .into_par_iter()
        .zip(argmaxes)
        .zip(ws.scratch.par_iter_mut())
        .enumerate()
        .for_each(|(j, ((mut outs, mut args), scratch))| {
            let start = j * chunk;
            for s in 0..chunk.min(batch.saturating_sub(start)) {
                let x_i = &input[(start + s) * in_size..][..in_size];
                forward_sample(layers, theta, x_i, s, &mut outs, &mut args, &mut scratch.u);
            }
        });
    let last = layers.len() - 1;
    ws.outputs[last][..batch * size(layers[last].output)].to_vec()
}

/// Copies `batch` NCHW samples of `x` into `input` in NHWC.
fn to_nhwc(spec: &NetSpec, x: &[f32], batch: usize, input: &mut [f32]) {
    let (h, w, c) = spec.input;
    let in_size = spec.input_size();
    for i in 0..batch {
        let src = &x[i * in_size..][..in_size];
        let dst = &mut input[i * in_size..][..in_size];
        for ch in 0..c {
            for p in 0..h * w {
                dst[p * c + ch] = src[ch * h * w + p];
            }
        }
    }
}

/// Per chunk, one piece per layer of a batch-wide buffer.
type Pieces<'a, T> = Vec<Vec<&'a mut [T]>>;

/// Cuts every layer's output (and argmax) buffer into the [`CHUNKS`] pieces of `chunk`
/// samples each, so that each chunk writes its own samples' activations (pieces past the
/// batch, and argmax pieces of layers other than max-pool, are empty).
fn chunk_pieces<'a>(
    layers: &[LayerPlan],
    batch: usize,
    chunk: usize,
    outputs: &'a mut [Vec<f32>],
    argmax: &'a mut [Vec<u32>],
) -> (Pieces<'a, f32>, Pieces<'a, u32>) {
    let mut out_pieces: Pieces<'a, f32> = (0..CHUNKS).map(|_| Vec::new()).collect();
    let mut arg_pieces: Pieces<'a, u32> = (0..CHUNKS).map(|_| Vec::new()).collect();
    for (l, (buf, args)) in outputs.iter_mut().zip(argmax.iter_mut()).enumerate() {
        let out = size(layers[l].output);
        let mut pieces = buf[..batch * out].chunks_mut(chunk * out);
        let mut args = if args.is_empty() {
            None
        } else {
            Some(args[..batch * out].chunks_mut(chunk * out))
        };
        for j in 0..CHUNKS {
            out_pieces[j].push(pieces.next().unwrap_or(&mut []));
            arg_pieces[j].push(args.as_mut().and_then(|p| p.next()).unwrap_or(&mut []));
        }
    }
    (out_pieces, arg_pieces)
}

/// Sample `s` of its chunk through every layer: `outs[l]` and `args[l]` are layer `l`'s
/// pieces of the chunk, `u` the im2col scratch.
fn forward_sample(
    layers: &[LayerPlan],
    theta: &[f32],
    x: &[f32],
    s: usize,
    outs: &mut [&mut [f32]],
    args: &mut [&mut [u32]],
    u: &mut [f32],
) {
    for (l, layer) in layers.iter().enumerate() {
        let (in_size, out_size) = (size(layer.input), size(layer.output));
        let (before, after) = outs.split_at_mut(l);
        let input: &[f32] = if l == 0 {
            x
        } else {
            &before[l - 1][s * in_size..][..in_size]
        };
        let out = &mut after[0][s * out_size..][..out_size];
        let params = &theta[layer.params.0..][..layer.params.1];
        match layer.kind {
            Kind::Conv { cout, .. } => conv_forward(layer, cout, params, input, out, u),
            Kind::Linear { nin, nout } => linear_forward(nin, nout, params, input, out),
            Kind::Tanh => out
                .iter_mut()
                .zip(input)
                .for_each(|(o, &v)| *o = tanh_fast(v)),
            Kind::Relu => out
                .iter_mut()
                .zip(input)
                .for_each(|(o, &v)| *o = v.max(0.0)),
            Kind::Flatten => out.copy_from_slice(input),
            Kind::MaxPool { kernel, stride } => {
                let arg = &mut args[l][s * out_size..][..out_size];
                max_pool_forward(layer, kernel, stride, input, out, arg);
            }
            Kind::AvgPool { kernel, stride } => {
                avg_pool_forward(layer, kernel, stride, input, out);
            }
        }
    }
}

/// A convolution of one NHWC sample: im2col into `u`, then one gemm.
#[inline]
fn conv_forward(
    layer: &LayerPlan,
    cout: usize,
    params: &[f32],
    input: &[f32],
    out: &mut [f32],
    u: &mut [f32],
) {
    let g = conv_geometry(layer).unwrap_or_else(|| unreachable!());
    let cols = g.cols();
    im2col(&g, input, u);
    // out (L × Cout) = U (L × cols) · Wᵀ, W stored (Cout × cols).
    matmul(
        g.rows(),
        cout,
        cols,
        out,
        cout,
        false,
        Mat {
            data: u,
            row_stride: cols,
            col_stride: 1,
        },
        Mat {
            data: params,
            row_stride: 1,
            col_stride: cols,
        },
    );
}

/// A linear layer on one sample: each output is its row's bias plus a dot product, the
/// weights stored (nout × (nin + 1)) with the bias last in each row.
#[inline]
fn linear_forward(nin: usize, nout: usize, params: &[f32], input: &[f32], out: &mut [f32]) {
    for (o, z) in out.iter_mut().enumerate().take(nout) {
        let row = &params[o * (nin + 1)..][..nin + 1];
        *z = row[nin] + dot(&row[..nin], input);
    }
}

/// Max pooling of one NHWC sample, recording the argmax (first maximum wins, PyTorch's
/// rule).
fn max_pool_forward(
    layer: &LayerPlan,
    kernel: usize,
    stride: usize,
    input: &[f32],
    out: &mut [f32],
    arg: &mut [u32],
) {
    let ((_, w, c), (oh, ow, _)) = (layer.input, layer.output);
    for oy in 0..oh {
        for ox in 0..ow {
            let o = (oy * ow + ox) * c;
            let first = ((oy * stride) * w + ox * stride) * c;
            for ch in 0..c {
                // Branch-free running maximum (random data makes a branch unpredictable).
                let (mut best, mut best_idx) = (input[first + ch], first + ch);
                for ky in 0..kernel {
                    for kx in 0..kernel {
                        let idx = ((oy * stride + ky) * w + ox * stride + kx) * c + ch;
                        let v = input[idx];
                        let better = v > best;
                        best = if better { v } else { best };
                        best_idx = if better { idx } else { best_idx };
                    }
                }
                out[o + ch] = best;
                arg[o + ch] = best_idx as u32;
            }
        }
    }
}

/// Average pooling of one NHWC sample (no padding).
#[inline]
fn avg_pool_forward(
    layer: &LayerPlan,
    kernel: usize,
    stride: usize,
    input: &[f32],
    out: &mut [f32],
) {
    let ((_, w, c), (oh, ow, _)) = (layer.input, layer.output);
    let scale = 1.0 / (kernel * kernel) as f32;
    for oy in 0..oh {
        for ox in 0..ow {
            for ch in 0..c {
                let mut sum = 0.0;
                for ky in 0..kernel {
                    for kx in 0..kernel {
                        sum += input[((oy * stride + ky) * w + ox * stride + kx) * c + ch];
                    }
                }
                out[(oy * ow + ox) * c + ch] = sum * scale;
            }
        }
    }
}
