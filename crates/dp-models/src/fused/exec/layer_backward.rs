//! The backward of each layer kind on one sample, on slices: parameter gradients, ghost
//! norms' ingredients and input gradients.

use super::super::spec::LayerPlan;
use super::forward::POOL_LANES;
use crate::cpu::kernels::{add_rows, matmul, sum_of_squares, Mat, Patches};

/// One sample's linear weight gradient `g ⊗ [a; 1]` into `region` (nout × (nin + 1)).
#[inline(always)]
pub(super) fn linear_weight_gradient(
    nin: usize,
    nout: usize,
    a: &[f32],
    grad_out: &[f32],
    region: &mut [f32],
) {
    for (o, &go) in grad_out.iter().enumerate().take(nout) {
        let row = &mut region[o * (nin + 1)..][..nin + 1];
        row[..nin].iter_mut().zip(a).for_each(|(r, &x)| *r = go * x);
        row[nin] = go;
    }
}

/// The ghost norm of a linear layer's gradient: `‖g ⊗ [a; 1]‖² = ‖g‖²·(‖a‖² + 1)`.
#[inline(always)]
pub(super) fn linear_squared_norm(grad_out: &[f32], a: &[f32]) -> f32 {
    sum_of_squares(grad_out) * (sum_of_squares(a) + 1.0)
}

/// `d input = Wᵀ·g` of a linear layer (bias column skipped). Each input's sum starts at 0
/// and takes the outputs' terms in output order; [`INPUT_BLOCK`] inputs' sums at a time
/// stay in registers over the outputs instead of one pass over `grad_in` per output.
#[inline(always)]
pub(super) fn linear_input_gradient(
    nin: usize,
    nout: usize,
    params: &[f32],
    grad_out: &[f32],
    grad_in: &mut [f32],
) {
    let weights = |o: usize, start: usize, len: usize| &params[o * (nin + 1) + start..][..len];
    let mut blocks = grad_in[..nin].chunks_exact_mut(INPUT_BLOCK);
    for (b, block) in (&mut blocks).enumerate() {
        let mut acc = [0.0f32; INPUT_BLOCK];
        for (o, &go) in grad_out.iter().enumerate().take(nout) {
            let w = weights(o, b * INPUT_BLOCK, INPUT_BLOCK);
            for k in 0..INPUT_BLOCK {
                acc[k] += go * w[k];
            }
        }
        block.copy_from_slice(&acc);
    }
    let rest = blocks.into_remainder();
    let start = nin - rest.len();
    rest.fill(0.0);
    for (o, &go) in grad_out.iter().enumerate().take(nout) {
        let w = weights(o, start, rest.len());
        rest.iter_mut().zip(w).for_each(|(g, &w)| *g += go * w);
    }
}

/// Inputs whose gradient sums [`linear_input_gradient`] keeps in registers at once
/// (eight AVX2 registers: eight independent chains of additions).
const INPUT_BLOCK: usize = 64;

/// Where a conv layer's weight gradient goes.
pub(super) enum ConvTarget<'a> {
    /// Added to the chunk's sum (plain backward, no norm).
    Accumulate(&'a mut [f32]),
    /// Written out, its squared norm into the second field.
    Write(&'a mut [f32], &'a mut f32),
}

/// One sample's conv weight gradient into its region (Cout rows of taps + 1, the bias
/// last): the weights' `Gᵀ·U`, with the im2col `U` recomputed into `patches` rather than
/// stored, and the bias's column sums of `G` (summed into `bias`, Cout values, in row
/// order: the values the ones column of an im2col with a bias column gave).
#[inline(always)]
pub(super) fn conv_weight_gradient(
    cout: usize,
    a: &[f32],
    grad_out: &[f32],
    patches: &mut Patches,
    bias: &mut [f32],
    target: ConvTarget<'_>,
) {
    let g = *patches.geometry();
    let (rows, taps) = (g.rows(), g.taps());
    let u = patches.fill(a);
    let (dst, accumulate, norm) = match target {
        ConvTarget::Accumulate(dst) => (dst, true, None),
        ConvTarget::Write(dst, norm) => (dst, false, Some(norm)),
    };
    // dst (Cout × taps, rows taps + 1 apart) = Gᵀ (Cout × L) · U (L × taps), G stored L × Cout.
    matmul(
        cout,
        taps,
        rows,
        dst,
        taps + 1,
        accumulate,
        Mat {
            data: grad_out,
            row_stride: 1,
            col_stride: cout,
        },
        Mat {
            data: u,
            row_stride: taps,
            col_stride: 1,
        },
    );
    let bias = &mut bias[..cout];
    bias.fill(0.0);
    add_rows(&grad_out[..rows * cout], cout, bias);
    for (o, &b) in bias.iter().enumerate() {
        let d = &mut dst[o * (taps + 1) + taps];
        *d = if accumulate { *d + b } else { b };
    }
    if let Some(norm) = norm {
        *norm = sum_of_squares(&dst[..cout * (taps + 1)]);
    }
}

/// A conv layer's input gradient: `dU (L × taps) = G (L × Cout) · W (Cout × taps)` into
/// `du` (the bias column of the parameters skipped), then col2im into `grad_in`.
#[inline(always)]
pub(super) fn conv_input_gradient(
    cout: usize,
    params: &[f32],
    grad_out: &[f32],
    patches: &Patches,
    du: &mut [f32],
    grad_in: &mut [f32],
) {
    let g = patches.geometry();
    let (rows, taps) = (g.rows(), g.taps());
    let du = &mut du[..rows * taps];
    matmul(
        rows,
        taps,
        cout,
        du,
        taps,
        false,
        Mat {
            data: grad_out,
            row_stride: cout,
            col_stride: 1,
        },
        Mat {
            data: params,
            row_stride: taps + 1,
            col_stride: 1,
        },
    );
    patches.col2im(du, grad_in);
}

/// `g·(1 − t²)` from the layer's output `t = tanh(x)`.
#[inline(always)]
pub(super) fn tanh_backward(grad_out: &[f32], out: &[f32], grad_in: &mut [f32]) {
    grad_in
        .iter_mut()
        .zip(grad_out)
        .zip(out)
        .for_each(|((gi, &go), &t)| *gi = go * (1.0 - t * t));
}

/// `g` where the output is positive, 0 elsewhere.
#[inline(always)]
pub(super) fn relu_backward(grad_out: &[f32], out: &[f32], grad_in: &mut [f32]) {
    grad_in
        .iter_mut()
        .zip(grad_out)
        .zip(out)
        .for_each(|((gi, &go), &y)| *gi = if y > 0.0 { go } else { 0.0 });
}

/// Each output's gradient to the input its forward recorded as the window's maximum
/// (`arg`, an input index per output). Channels go [`POOL_LANES`] at a time: for each
/// position of the window, the lanes whose maximum it was receive their gradient and the
/// others +0.0, which leaves a sum unchanged (a sum that starts at +0.0 is never −0.0).
/// Each input thus takes its terms in output order, the order of a scatter.
#[inline(always)]
pub(super) fn max_pool_backward(
    layer: &LayerPlan,
    kernel: usize,
    stride: usize,
    grad_out: &[f32],
    arg: &[u32],
    grad_in: &mut [f32],
) {
    grad_in.fill(0.0);
    let ((_, w, c), (oh, ow, _)) = (layer.input, layer.output);
    for oy in 0..oh {
        for ox in 0..ow {
            let o = (oy * ow + ox) * c;
            let window = |ky: usize, kx: usize| ((oy * stride + ky) * w + ox * stride + kx) * c;
            let mut ch = 0;
            while ch + POOL_LANES <= c {
                let go: &[f32; POOL_LANES] = (&grad_out[o + ch..][..POOL_LANES])
                    .try_into()
                    .unwrap_or_else(|_| unreachable!());
                let idx = &arg[o + ch..][..POOL_LANES];
                for ky in 0..kernel {
                    for kx in 0..kernel {
                        let at = window(ky, kx) + ch;
                        let gi: &mut [f32; POOL_LANES] = (&mut grad_in[at..][..POOL_LANES])
                            .try_into()
                            .unwrap_or_else(|_| unreachable!());
                        for k in 0..POOL_LANES {
                            // All ones where this position was the maximum: a mask, not a
                            // branch, so that the lanes stay one vector.
                            let hit = 0u32.wrapping_sub(u32::from(idx[k] == (at + k) as u32));
                            gi[k] += f32::from_bits(go[k].to_bits() & hit);
                        }
                    }
                }
                ch += POOL_LANES;
            }
            for ch in ch..c {
                grad_in[arg[o + ch] as usize] += grad_out[o + ch];
            }
        }
    }
}

/// Each output's gradient, divided by the window size, to every input of its window.
#[inline(always)]
pub(super) fn avg_pool_backward(
    layer: &LayerPlan,
    kernel: usize,
    stride: usize,
    grad_out: &[f32],
    grad_in: &mut [f32],
) {
    grad_in.fill(0.0);
    let ((_, w, c), (oh, ow, _)) = (layer.input, layer.output);
    let scale = 1.0 / (kernel * kernel) as f32;
    for oy in 0..oh {
        for ox in 0..ow {
            for ch in 0..c {
                let go = grad_out[(oy * ow + ox) * c + ch] * scale;
                for ky in 0..kernel {
                    for kx in 0..kernel {
                        grad_in[((oy * stride + ky) * w + ox * stride + kx) * c + ch] += go;
                    }
                }
            }
        }
    }
}
