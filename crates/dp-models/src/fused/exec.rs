//! The fused executor: per-sample forward and DP backward over a reused workspace,
//! samples processed in parallel over a fixed number of chunks.

use rayon::prelude::*;

use super::spec::{size, Kind, LayerPlan, NetSpec};
use crate::cpu::kernels::{
    col2im, dot, im2col, matmul, sum_of_squares, tanh_fast, ConvGeometry, Mat,
};
use crate::ClipRule;

/// Chunks per batch, fixed so that sums are bit-reproducible whatever the thread count.
pub const CHUNKS: usize = 16;

/// Per-chunk scratch, sized once for the network.
#[derive(Clone, Debug, Default)]
struct Scratch {
    u: Vec<f32>,
    du: Vec<f32>,
    grad_a: Vec<f32>,
    grad_b: Vec<f32>,
    psg: Vec<f32>,
    acc: Vec<f32>,
    /// Per sample of the chunk, each linear layer's output gradient (book-keeping).
    linear_grads: Vec<f32>,
    /// Per sample of the chunk, each linear layer's clip factor.
    linear_factors: Vec<f32>,
    /// One linear layer's inputs for the chunk, with a ones column.
    linear_inputs: Vec<f32>,
    /// One sample's squared norm per parametric layer.
    layer_sq: Vec<f32>,
}

/// Activations kept between the forward and the backward, reused across steps.
#[derive(Clone, Debug, Default)]
pub struct Workspace {
    capacity: usize,
    batch: usize,
    input: Vec<f32>,
    outputs: Vec<Vec<f32>>,
    argmax: Vec<Vec<u32>>,
    scratch: Vec<Scratch>,
}

impl Workspace {
    /// The batch size of the last forward (0 before any).
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Grows (never shrinks) the buffers to hold `batch` samples of `spec`.
    fn ensure(&mut self, spec: &NetSpec, batch: usize) {
        let layers = &spec.layers;
        if self.outputs.len() != layers.len() || self.scratch.len() != CHUNKS {
            *self = Workspace::default();
            let max_u = layers
                .iter()
                .filter_map(|l| conv_geometry(l).map(|g| g.rows() * g.cols()))
                .max()
                .unwrap_or(0);
            let max_act = layers
                .iter()
                .map(|l| size(l.input).max(size(l.output)))
                .max()
                .unwrap_or(0);
            let scratch = Scratch {
                u: vec![0.0; max_u],
                du: vec![0.0; max_u],
                grad_a: vec![0.0; max_act],
                grad_b: vec![0.0; max_act],
                psg: vec![0.0; spec.num_params],
                acc: vec![0.0; spec.num_params],
                linear_grads: Vec::new(),
                linear_factors: Vec::new(),
                linear_inputs: Vec::new(),
                layer_sq: vec![0.0; layers.iter().filter(|l| l.params.1 > 0).count()],
            };
            self.scratch = vec![scratch; CHUNKS];
            self.outputs = vec![Vec::new(); layers.len()];
            self.argmax = vec![Vec::new(); layers.len()];
        }
        if batch > self.capacity {
            self.capacity = batch;
            self.input.resize(batch * spec.input_size(), 0.0);
            for (l, layer) in layers.iter().enumerate() {
                self.outputs[l].resize(batch * size(layer.output), 0.0);
                if matches!(layer.kind, Kind::MaxPool { .. }) {
                    self.argmax[l].resize(batch * size(layer.output), 0);
                }
            }
        }
        self.batch = batch;
    }
}

fn conv_geometry(layer: &LayerPlan) -> Option<ConvGeometry> {
    match layer.kind {
        Kind::Conv {
            kernel,
            stride,
            padding,
            cin,
            ..
        } => Some(ConvGeometry {
            h: layer.input.0,
            w: layer.input.1,
            cin,
            kernel,
            stride,
            padding,
            oh: layer.output.0,
            ow: layer.output.1,
        }),
        _ => None,
    }
}

/// Samples per chunk for a batch.
fn chunk_len(batch: usize) -> usize {
    batch.div_ceil(CHUNKS).max(1)
}

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
    let (h, w, c) = spec.input;
    let in_size = spec.input_size();
    // NCHW → NHWC.
    for i in 0..batch {
        let src = &x[i * in_size..][..in_size];
        let dst = &mut ws.input[i * in_size..][..in_size];
        for ch in 0..c {
            for p in 0..h * w {
                dst[p * c + ch] = src[ch * h * w + p];
            }
        }
    }
    let chunk = chunk_len(batch);
    let layers = &spec.layers;
    let mut outputs: Vec<Vec<&mut [f32]>> = (0..CHUNKS).map(|_| Vec::new()).collect();
    let mut argmaxes: Vec<Vec<&mut [u32]>> = (0..CHUNKS).map(|_| Vec::new()).collect();
    for (l, (buf, args)) in ws.outputs.iter_mut().zip(ws.argmax.iter_mut()).enumerate() {
        let out = size(layers[l].output);
        let mut pieces = buf[..batch * out].chunks_mut(chunk * out);
        let mut arg_pieces = if args.is_empty() {
            None
        } else {
            Some(args[..batch * out].chunks_mut(chunk * out))
        };
        for j in 0..CHUNKS {
            outputs[j].push(pieces.next().unwrap_or(&mut []));
            argmaxes[j].push(
                arg_pieces
                    .as_mut()
                    .and_then(|p| p.next())
                    .unwrap_or(&mut []),
            );
        }
    }
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
            Kind::Conv { cout, .. } => {
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
            Kind::Linear { nin, nout } => {
                for (o, z) in out.iter_mut().enumerate().take(nout) {
                    let row = &params[o * (nin + 1)..][..nin + 1];
                    *z = row[nin] + dot(&row[..nin], input);
                }
            }
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
                let ((_, w, c), (oh, ow, _)) = (layer.input, layer.output);
                let scale = 1.0 / (kernel * kernel) as f32;
                for oy in 0..oh {
                    for ox in 0..ow {
                        for ch in 0..c {
                            let mut sum = 0.0;
                            for ky in 0..kernel {
                                for kx in 0..kernel {
                                    sum +=
                                        input[((oy * stride + ky) * w + ox * stride + kx) * c + ch];
                                }
                            }
                            out[(oy * ow + ox) * c + ch] = sum * scale;
                        }
                    }
                }
            }
        }
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

/// The result of a backward pass.
#[derive(Clone, Debug, PartialEq)]
pub struct BackwardOutput {
    /// `Σᵢ cᵢ ∇θ ℓᵢ` (P values, internal layout).
    pub gradient_sum: Vec<f32>,
    /// `‖∇θ ℓᵢ‖²` per sample (NaN when the sample's gradient was not finite; such samples
    /// get `cᵢ = 0`).
    pub squared_norms: Vec<f32>,
}

/// Backward from `dlogits` (batch × outputs, d loss / d logits of the *summed* loss),
/// after [`forward`] on the same batch.
///
/// Convolutions materialise each sample's gradient tile by tile and accumulate it with its
/// clip factor; linear layers use the ghost norm `‖g‖²(‖a‖²+1)` and one book-keeping gemm
/// per chunk, `(G ⊙ c)ᵀ·[A 1]`, so their per-sample gradients are never written out.
pub fn backward(
    spec: &NetSpec,
    theta: &[f32],
    dlogits: &[f32],
    ws: &mut Workspace,
    rule: ClipRule,
) -> BackwardOutput {
    let batch = ws.batch;
    let chunk = chunk_len(batch);
    let p = spec.num_params;
    let mut squared_norms = vec![0.0f32; batch];
    let norm_chunks: Vec<&mut [f32]> = squared_norms.chunks_mut(chunk).collect();
    let (input, outputs, argmax) = (&ws.input, &ws.outputs, &ws.argmax);
    let used = norm_chunks.len();
    let mode = if rule == ClipRule::None {
        Mode::Plain
    } else {
        Mode::Private
    };
    let param_layers: Vec<&LayerPlan> = spec.layers.iter().filter(|l| l.params.1 > 0).collect();
    let linear_out: usize = param_layers
        .iter()
        .map(|l| linear_shape(l).map_or(0, |(_, nout)| nout))
        .sum();
    let linear_count = param_layers
        .iter()
        .filter(|l| linear_shape(l).is_some())
        .count();
    ws.scratch[..used]
        .par_iter_mut()
        .zip(norm_chunks)
        .enumerate()
        .for_each(|(j, (scratch, norms))| {
            scratch.acc.fill(0.0);
            let samples = norms.len();
            scratch.linear_grads.resize(samples * linear_out, 0.0);
            scratch.linear_factors.resize(samples * linear_count, 0.0);
            for (s, norm) in norms.iter_mut().enumerate() {
                let i = j * chunk + s;
                backward_sample(
                    spec,
                    theta,
                    dlogits,
                    i,
                    s * linear_out,
                    input,
                    outputs,
                    argmax,
                    scratch,
                    mode,
                );
                // Norms are only computed for private backwards (the plain one reports 0).
                let sq: f32 = if mode == Mode::Plain {
                    0.0
                } else {
                    scratch.layer_sq.iter().sum()
                };
                *norm = if sq.is_finite() { sq } else { f32::NAN };
                // Clip factors per parametric layer (equal for all but PerLayer).
                let Scratch {
                    psg,
                    acc,
                    layer_sq,
                    linear_factors,
                    ..
                } = scratch;
                let mut linear_slot = 0;
                for (layer, &layer_norm) in param_layers.iter().zip(layer_sq.iter()) {
                    let factor = match (sq.is_finite(), rule) {
                        (_, ClipRule::None) => 1.0,
                        (false, _) => 0.0,
                        (true, ClipRule::PerLayer { .. }) => {
                            rule.factor(layer_norm, param_layers.len())
                        }
                        (true, _) => rule.factor(sq, 1),
                    };
                    if linear_shape(layer).is_some() {
                        linear_factors[s * linear_count + linear_slot] = factor;
                        linear_slot += 1;
                    } else if mode == Mode::Private && factor != 0.0 {
                        let (offset, count) = layer.params;
                        acc[offset..offset + count]
                            .iter_mut()
                            .zip(&psg[offset..offset + count])
                            .for_each(|(a, g)| *a += factor * g);
                    }
                }
            }
            // Book-keeping for the linear layers: acc += (G ⊙ c)ᵀ · [A 1] over the chunk.
            let Scratch {
                acc,
                linear_grads,
                linear_factors,
                linear_inputs,
                ..
            } = scratch;
            let (mut linear_slot, mut g_offset) = (0, 0);
            for (index, layer) in spec.layers.iter().enumerate() {
                let Some((nin, nout)) = linear_shape(layer) else {
                    continue;
                };
                linear_inputs.resize(samples * (nin + 1), 0.0);
                for s in 0..samples {
                    let i = j * chunk + s;
                    let a: &[f32] = if index == 0 {
                        &input[i * nin..][..nin]
                    } else {
                        &outputs[index - 1][i * nin..][..nin]
                    };
                    let row = &mut linear_inputs[s * (nin + 1)..][..nin + 1];
                    row[..nin].copy_from_slice(a);
                    row[nin] = 1.0;
                    let factor = linear_factors[s * linear_count + linear_slot];
                    let g = &mut linear_grads[s * linear_out + g_offset..][..nout];
                    if factor == 0.0 {
                        g.fill(0.0); // also drops NaN gradients
                    } else {
                        g.iter_mut().for_each(|v| *v *= factor);
                    }
                }
                let (offset, count) = layer.params;
                // dst (nout × (nin+1)) += Σ_s gc_s ⊗ a_s: lhs = Gcᵀ, rows strided by linear_out.
                matmul(
                    nout,
                    nin + 1,
                    samples,
                    &mut acc[offset..offset + count],
                    nin + 1,
                    true,
                    Mat {
                        data: &linear_grads[g_offset..],
                        row_stride: 1,
                        col_stride: linear_out,
                    },
                    Mat {
                        data: linear_inputs,
                        row_stride: nin + 1,
                        col_stride: 1,
                    },
                );
                linear_slot += 1;
                g_offset += nout;
            }
        });
    // Ordered reduction over chunks: bit-reproducible.
    let mut gradient_sum = vec![0.0f32; p];
    for scratch in &ws.scratch[..used] {
        gradient_sum
            .iter_mut()
            .zip(&scratch.acc)
            .for_each(|(g, a)| *g += a);
    }
    BackwardOutput {
        gradient_sum,
        squared_norms,
    }
}

/// (in, out) of a linear layer.
fn linear_shape(layer: &LayerPlan) -> Option<(usize, usize)> {
    match layer.kind {
        Kind::Linear { nin, nout } => Some((nin, nout)),
        _ => None,
    }
}

/// What the per-sample backward does with parameter gradients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Write every layer's per-sample gradient into `psg` (tests).
    Materialize,
    /// Conv gradients into `psg`, linear output gradients stashed; per-layer norms.
    Private,
    /// Conv gradients added to `acc`, linear output gradients stashed.
    Plain,
}

/// Per-sample gradients, materialised (B × P), for tests and audits.
pub fn per_sample_gradients(
    spec: &NetSpec,
    theta: &[f32],
    dlogits: &[f32],
    ws: &mut Workspace,
) -> Vec<Vec<f32>> {
    let (input, outputs, argmax) = (&ws.input, &ws.outputs, &ws.argmax);
    let mut scratch = ws.scratch[0].clone();
    (0..ws.batch)
        .map(|i| {
            backward_sample(
                spec,
                theta,
                dlogits,
                i,
                0,
                input,
                outputs,
                argmax,
                &mut scratch,
                Mode::Materialize,
            );
            scratch.psg.clone()
        })
        .collect()
}

/// One sample's backward. Fills `scratch.layer_sq` with the squared norm of each
/// parametric layer's gradient (except in `Plain` mode); conv gradients go to `psg`
/// (`Private`, `Materialize`) or are added to `acc` (`Plain`); linear gradients are written
/// to `psg` (`Materialize`) or their output gradient is stashed at `linear_grads[stash..]`.
#[allow(clippy::too_many_arguments)]
fn backward_sample(
    spec: &NetSpec,
    theta: &[f32],
    dlogits: &[f32],
    i: usize,
    stash: usize,
    input: &[f32],
    outputs: &[Vec<f32>],
    argmax: &[Vec<u32>],
    scratch: &mut Scratch,
    mode: Mode,
) {
    let layers = &spec.layers;
    let out_size = spec.output_size();
    let Scratch {
        u,
        du,
        grad_a,
        grad_b,
        psg,
        acc,
        linear_grads,
        layer_sq,
        ..
    } = scratch;
    let (mut d, mut d_in) = (grad_a, grad_b);
    d[..out_size].copy_from_slice(&dlogits[i * out_size..][..out_size]);
    // Parametric layers are met in reverse; their slots in layer_sq and the stash follow.
    let mut param_slot = layer_sq.len();
    let mut stash_end = stash
        + layers
            .iter()
            .filter_map(linear_shape)
            .map(|(_, nout)| nout)
            .sum::<usize>();
    for (l, layer) in layers.iter().enumerate().rev() {
        let has_params = layer.params.1 > 0;
        if !has_params && !layer.needs_input_grad {
            break;
        }
        let (in_size, o_size) = (size(layer.input), size(layer.output));
        let a: &[f32] = if l == 0 {
            &input[i * in_size..][..in_size]
        } else {
            &outputs[l - 1][i * in_size..][..in_size]
        };
        let out = &outputs[l][i * o_size..][..o_size];
        let (offset, count) = layer.params;
        let params = &theta[offset..][..count];
        let grad_out = &d[..o_size];
        let grad_in = &mut d_in[..in_size];
        match layer.kind {
            Kind::Linear { nin, nout } => {
                param_slot -= 1;
                stash_end -= nout;
                if mode == Mode::Materialize {
                    let region = &mut psg[offset..][..count];
                    for (o, &go) in grad_out.iter().enumerate().take(nout) {
                        let row = &mut region[o * (nin + 1)..][..nin + 1];
                        row[..nin].iter_mut().zip(a).for_each(|(r, &x)| *r = go * x);
                        row[nin] = go;
                    }
                } else {
                    linear_grads[stash_end..stash_end + nout].copy_from_slice(&grad_out[..nout]);
                }
                // Ghost norm: ‖g ⊗ [a; 1]‖² = ‖g‖²·(‖a‖² + 1).
                layer_sq[param_slot] =
                    sum_of_squares(&grad_out[..nout]) * (sum_of_squares(a) + 1.0);
                if layer.needs_input_grad {
                    grad_in.fill(0.0);
                    for (o, &go) in grad_out.iter().enumerate().take(nout) {
                        let row = &params[o * (nin + 1)..][..nin];
                        grad_in.iter_mut().zip(row).for_each(|(g, &w)| *g += go * w);
                    }
                }
            }
            Kind::Conv { cout, .. } => {
                param_slot -= 1;
                let g = conv_geometry(layer).unwrap_or_else(|| unreachable!());
                let (rows, cols) = (g.rows(), g.cols());
                im2col(&g, a, u); // recomputed rather than stored
                                  // psg (Cout × cols) = Gᵀ (Cout × L) · U (L × cols), G stored (L × Cout).
                let (target, accumulate): (&mut [f32], bool) = match mode {
                    Mode::Plain => (&mut acc[offset..][..count], true),
                    Mode::Private | Mode::Materialize => (&mut psg[offset..][..count], false),
                };
                matmul(
                    cout,
                    cols,
                    rows,
                    target,
                    cols,
                    accumulate,
                    Mat {
                        data: grad_out,
                        row_stride: 1,
                        col_stride: cout,
                    },
                    Mat {
                        data: u,
                        row_stride: cols,
                        col_stride: 1,
                    },
                );
                if mode != Mode::Plain {
                    layer_sq[param_slot] = sum_of_squares(&psg[offset..][..count]);
                }
                if layer.needs_input_grad {
                    // dU (L × cols) = G (L × Cout) · W (Cout × cols), then col2im.
                    matmul(
                        rows,
                        cols,
                        cout,
                        du,
                        cols,
                        false,
                        Mat {
                            data: grad_out,
                            row_stride: cout,
                            col_stride: 1,
                        },
                        Mat {
                            data: params,
                            row_stride: cols,
                            col_stride: 1,
                        },
                    );
                    col2im(&g, du, grad_in);
                }
            }
            Kind::Tanh => grad_in
                .iter_mut()
                .zip(grad_out)
                .zip(out)
                .for_each(|((gi, &go), &t)| *gi = go * (1.0 - t * t)),
            Kind::Relu => grad_in
                .iter_mut()
                .zip(grad_out)
                .zip(out)
                .for_each(|((gi, &go), &y)| *gi = if y > 0.0 { go } else { 0.0 }),
            Kind::Flatten => grad_in.copy_from_slice(grad_out),
            Kind::MaxPool { .. } => {
                grad_in.fill(0.0);
                let arg = &argmax[l][i * o_size..][..o_size];
                for (&go, &idx) in grad_out.iter().zip(arg) {
                    grad_in[idx as usize] += go;
                }
            }
            Kind::AvgPool { kernel, stride } => {
                grad_in.fill(0.0);
                let ((_, w, c), (oh, ow, _)) = (layer.input, layer.output);
                let scale = 1.0 / (kernel * kernel) as f32;
                for oy in 0..oh {
                    for ox in 0..ow {
                        for ch in 0..c {
                            let go = grad_out[(oy * ow + ox) * c + ch] * scale;
                            for ky in 0..kernel {
                                for kx in 0..kernel {
                                    grad_in
                                        [((oy * stride + ky) * w + ox * stride + kx) * c + ch] +=
                                        go;
                                }
                            }
                        }
                    }
                }
            }
        }
        if !layer.needs_input_grad {
            break;
        }
        std::mem::swap(&mut d, &mut d_in);
    }
}
