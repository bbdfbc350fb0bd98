//! The forward: samples end to end, one chunk of samples per task, layer by layer.

use rayon::prelude::*;

use super::super::spec::{size, Kind, LayerPlan, NetSpec};
use super::workspace::{chunk_len, conv_cout, Keep, Workspace, CHUNKS};
use crate::cpu::kernels::{add_to_rows, dot, matmul, tanh_fast, vectorized, Mat, Patches};

/// Runs the forward on `batch` samples of `x` (NCHW, as datasets store images) and
/// returns the logits (batch × outputs); what `keep` says stays in `ws` for the backward.
/// The logits are the same bits under either [`Keep`].
pub fn forward(
    spec: &NetSpec,
    theta: &[f32],
    x: &[f32],
    batch: usize,
    ws: &mut Workspace,
    keep: Keep,
) -> Vec<f32> {
    ws.ensure(spec, batch, keep);
    let in_size = spec.input_size();
    let chunk = chunk_len(batch);
    let layers = &spec.layers;
    transpose_kernels(layers, theta, &mut ws.kernels);
    let net = Net {
        layers,
        theta,
        kernels: &ws.kernels,
    };
    let buffers = (&mut ws.outputs[..], &mut ws.argmax[..]);
    let (outputs, argmaxes) = chunk_pieces(layers, batch, chunk, buffers, keep);
    // Each chunk copies its own samples into the NHWC input (no serial pass first).
    let inputs = ws.input[..batch * in_size].par_chunks_mut(chunk * in_size);
    inputs
        .zip(x.par_chunks(chunk * in_size))
        .zip(outputs)
        .zip(argmaxes)
        .zip(ws.scratch.par_iter_mut())
        .for_each(|((((input, x), mut outs), mut args), scratch)| {
            to_nhwc(spec, x, input);
            vectorized(
                #[inline(always)]
                || {
                    for (s, x_i) in input.chunks_exact(in_size).enumerate() {
                        let sample = Sample {
                            s,
                            outs: &mut outs,
                            args: &mut args,
                            transient: &mut scratch.transient,
                            transient_argmax: &mut scratch.transient_argmax,
                        };
                        forward_sample(&net, x_i, sample, &mut scratch.patches);
                    }
                },
            );
        });
    let last = layers.len() - 1;
    ws.outputs[last][..batch * size(layers[last].output)].to_vec()
}

/// Copies the NCHW samples of `x` into `input` in NHWC.
fn to_nhwc(spec: &NetSpec, x: &[f32], input: &mut [f32]) {
    let (h, w, c) = spec.input;
    let in_size = spec.input_size();
    for (src, dst) in x.chunks_exact(in_size).zip(input.chunks_exact_mut(in_size)) {
        for ch in 0..c {
            for p in 0..h * w {
                dst[p * c + ch] = src[ch * h * w + p];
            }
        }
    }
}

/// Per chunk, one piece per layer of a batch-wide buffer.
type Pieces<'a, T> = Vec<Vec<&'a mut [T]>>;

/// Cuts every kept layer's output (and, in a training forward, argmax) buffer into the
/// [`CHUNKS`] pieces of `chunk` samples each, so that each chunk writes its own samples'
/// activations (pieces past the batch, of layers whose output `keep` does not keep and
/// argmax pieces of layers other than max-pool are empty).
fn chunk_pieces<'a>(
    layers: &[LayerPlan],
    batch: usize,
    chunk: usize,
    (outputs, argmax): (&'a mut [Vec<f32>], &'a mut [Vec<u32>]),
    keep: Keep,
) -> (Pieces<'a, f32>, Pieces<'a, u32>) {
    let mut out_pieces: Pieces<'a, f32> = (0..CHUNKS).map(|_| Vec::new()).collect();
    let mut arg_pieces: Pieces<'a, u32> = (0..CHUNKS).map(|_| Vec::new()).collect();
    for (l, (buf, args)) in outputs.iter_mut().zip(argmax.iter_mut()).enumerate() {
        let out = size(layers[l].output);
        let kept = if keep.kept(layers, l) { batch * out } else { 0 };
        let mut pieces = buf[..kept].chunks_mut(chunk * out);
        let mut args = if keep.argmax_kept(layers, l) {
            Some(args[..batch * out].chunks_mut(chunk * out))
        } else {
            None
        };
        for j in 0..CHUNKS {
            out_pieces[j].push(pieces.next().unwrap_or(&mut []));
            arg_pieces[j].push(args.as_mut().and_then(|p| p.next()).unwrap_or(&mut []));
        }
    }
    (out_pieces, arg_pieces)
}

/// What every sample's forward reads: the layers, θ, and each conv layer's kernel
/// transposed (taps + 1 rows of Cout, the bias last).
struct Net<'a> {
    layers: &'a [LayerPlan],
    theta: &'a [f32],
    kernels: &'a [Vec<f32>],
}

/// Each conv layer's parameters (Cout rows of taps + 1, the bias last) transposed into
/// `kernels[l]`: the rhs gemm multiplies in place, without packing a copy per sample.
fn transpose_kernels(layers: &[LayerPlan], theta: &[f32], kernels: &mut Vec<Vec<f32>>) {
    kernels.resize(layers.len(), Vec::new());
    for (layer, kernel) in layers.iter().zip(kernels.iter_mut()) {
        let Some(cout) = conv_cout(layer) else {
            continue;
        };
        let (offset, count) = layer.params;
        let cols = count / cout;
        kernel.resize(count, 0.0);
        for (o, row) in theta[offset..][..count].chunks_exact(cols).enumerate() {
            for (k, &w) in row.iter().enumerate() {
                kernel[k * cout + o] = w;
            }
        }
    }
}

/// Where sample `s` of a chunk writes: `outs[l]` and `args[l]` are layer `l`'s pieces of
/// the chunk (empty for a layer whose output or argmax the forward does not keep),
/// `transient[l]` and `transient_argmax[l]` one sample's output and argmax of such a layer.
struct Sample<'s, 'a> {
    s: usize,
    outs: &'s mut [&'a mut [f32]],
    args: &'s mut [&'a mut [u32]],
    transient: &'s mut [Vec<f32>],
    transient_argmax: &'s mut [Vec<u32>],
}

/// Layer `l`'s view of a sample: its input, its output to write and its argmax to write
/// (empty but for a max-pool layer).
type LayerIo<'b> = (&'b [f32], &'b mut [f32], &'b mut [u32]);

impl Sample<'_, '_> {
    /// Layer `l`'s input (the previous layer's output, or the sample `x` for the first
    /// layer), output and argmax.
    #[inline(always)]
    fn io<'b>(&'b mut self, x: &'b [f32], l: usize, layer: &LayerPlan) -> LayerIo<'b> {
        let (in_size, out_size, s) = (size(layer.input), size(layer.output), self.s);
        let (outs_before, outs_after) = self.outs.split_at_mut(l);
        let (trans_before, trans_after) = self.transient.split_at_mut(l);
        let input: &[f32] = match l.checked_sub(1) {
            None => x,
            Some(p) if outs_before[p].is_empty() => &trans_before[p],
            Some(p) => &outs_before[p][s * in_size..][..in_size],
        };
        let out = if outs_after[0].is_empty() {
            &mut trans_after[0][..]
        } else {
            &mut outs_after[0][s * out_size..][..out_size]
        };
        let arg = &mut self.args[l];
        let arg = if arg.is_empty() {
            &mut self.transient_argmax[l][..]
        } else {
            &mut arg[s * out_size..][..out_size]
        };
        (input, out, arg)
    }
}

/// One sample through every layer; `patches[l]` is conv layer `l`'s im2col matrix.
#[inline(always)]
fn forward_sample(
    net: &Net<'_>,
    x: &[f32],
    mut sample: Sample<'_, '_>,
    patches: &mut [Option<Patches>],
) {
    for (l, layer) in net.layers.iter().enumerate() {
        let (input, out, arg) = sample.io(x, l, layer);
        let params = &net.theta[layer.params.0..][..layer.params.1];
        match layer.kind {
            Kind::Conv { cout, .. } => {
                let patches = patches[l].as_mut().unwrap_or_else(|| unreachable!());
                conv_forward(cout, &net.kernels[l], input, out, patches);
            }
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
                max_pool_forward(layer, kernel, stride, input, out, arg);
            }
            Kind::AvgPool { kernel, stride } => {
                avg_pool_forward(layer, kernel, stride, input, out);
            }
        }
    }
}

/// A convolution of one NHWC sample: im2col into `patches`, one gemm with the transposed
/// kernel (taps + 1 rows of Cout, the bias last), then the bias.
#[inline(always)]
fn conv_forward(
    cout: usize,
    kernel: &[f32],
    input: &[f32],
    out: &mut [f32],
    patches: &mut Patches,
) {
    let g = *patches.geometry();
    let taps = g.taps();
    let u = patches.fill(input);
    // out (L × Cout) = U (L × taps) · Kᵀ (taps × Cout).
    matmul(
        g.rows(),
        cout,
        taps,
        out,
        cout,
        false,
        Mat {
            data: u,
            row_stride: taps,
            col_stride: 1,
        },
        Mat {
            data: kernel,
            row_stride: cout,
            col_stride: 1,
        },
    );
    add_to_rows(out, &kernel[taps * cout..][..cout]);
}

/// A linear layer on one sample: each output is its row's bias plus a dot product, the
/// weights stored (nout × (nin + 1)) with the bias last in each row.
#[inline(always)]
fn linear_forward(nin: usize, nout: usize, params: &[f32], input: &[f32], out: &mut [f32]) {
    for (o, z) in out.iter_mut().enumerate().take(nout) {
        let row = &params[o * (nin + 1)..][..nin + 1];
        *z = row[nin] + dot(&row[..nin], input);
    }
}

/// Channels one [`pool_lanes`] call (and the max-pool backward) takes at once (one AVX2
/// register of f32).
pub(super) const POOL_LANES: usize = 8;

/// Max pooling of one NHWC sample, recording the argmax (first maximum wins, PyTorch's
/// rule). A window position's channels are contiguous, so the running maximum is taken
/// over [`POOL_LANES`] channels at a time (branch-free, vectorised).
#[inline(always)]
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
            let (out, arg) = (&mut out[o..][..c], &mut arg[o..][..c]);
            let window = |ky: usize, kx: usize| ((oy * stride + ky) * w + ox * stride + kx) * c;
            let mut ch = 0;
            while ch + POOL_LANES <= c {
                let (o, a) = (&mut out[ch..][..POOL_LANES], &mut arg[ch..][..POOL_LANES]);
                pool_lanes::<POOL_LANES>(input, kernel, &window, ch, o, a);
                ch += POOL_LANES;
            }
            for ch in ch..c {
                let (o, a) = (&mut out[ch..][..1], &mut arg[ch..][..1]);
                pool_lanes::<1>(input, kernel, &window, ch, o, a);
            }
        }
    }
}

/// The maxima and their input indices of channels `ch..ch + N` over the window whose
/// position (ky, kx) starts at `window(ky, kx)`. The choice is a lane mask applied to the
/// bits of both the maximum and its index (no `bool` lanes to widen), so each lane block
/// stays a few vector instructions.
#[inline(always)]
fn pool_lanes<const N: usize>(
    input: &[f32],
    kernel: usize,
    window: &impl Fn(usize, usize) -> usize,
    ch: usize,
    out: &mut [f32],
    arg: &mut [u32],
) {
    let first = window(0, 0) + ch;
    let lane: [u32; N] = std::array::from_fn(|k| k as u32);
    let mut best: [u32; N] = std::array::from_fn(|k| input[first + k].to_bits());
    let mut idx: [u32; N] = std::array::from_fn(|k| first as u32 + lane[k]);
    for ky in 0..kernel {
        for kx in 0..kernel {
            let start = window(ky, kx) + ch;
            let v: &[f32] = &input[start..][..N];
            for k in 0..N {
                let better = 0u32.wrapping_sub(u32::from(v[k] > f32::from_bits(best[k])));
                best[k] = (v[k].to_bits() & better) | (best[k] & !better);
                idx[k] = ((start as u32 + lane[k]) & better) | (idx[k] & !better);
            }
        }
    }
    out.iter_mut()
        .zip(best)
        .for_each(|(o, b)| *o = f32::from_bits(b));
    arg.copy_from_slice(&idx);
}

/// Average pooling of one NHWC sample (no padding).
#[inline(always)]
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
