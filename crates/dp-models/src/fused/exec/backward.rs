//! The DP backward of a batch: per chunk of samples, each sample's backward, norm and clip
//! factors, its clipped conv gradients accumulated, then the chunk's linear layers in one
//! book-keeping gemm each; the chunks' sums reduced in order.

use rayon::prelude::*;

use super::super::spec::{LayerPlan, NetSpec};
use super::per_sample::{backward_sample, Inputs, Mode};
use super::workspace::{chunk_len, linear_shape, Scratch, Workspace};
use crate::cpu::kernels::{matmul, vectorized, Mat};
use crate::ClipRule;

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
/// after [`forward`](super::forward) on the same batch.
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
    let mut squared_norms = vec![0.0f32; batch];
    let norm_chunks: Vec<&mut [f32]> = squared_norms.chunks_mut(chunk).collect();
    let used = norm_chunks.len();
    let (activations, scratch) = ws.split();
    let plan = Plan::new(
        Inputs {
            spec,
            theta,
            dlogits,
            activations,
        },
        rule,
    );
    scratch[..used]
        .par_iter_mut()
        .zip(norm_chunks)
        .enumerate()
        .for_each(|(j, (scratch, norms))| {
            vectorized(
                #[inline(always)]
                || plan.chunk(j * chunk, scratch, norms),
            );
        });
    let gradient_sum = reduce_chunks(&scratch[..used], spec.num_params);
    BackwardOutput {
        gradient_sum,
        squared_norms,
    }
}

/// Parameters one task of [`reduce_chunks`] sums.
const REDUCE_PIECE: usize = 4096;

/// The chunks' clipped sums added, each parameter's over the chunks in chunk order (so
/// bit-reproducible), pieces of the parameters in parallel.
fn reduce_chunks(chunks: &[Scratch], num_params: usize) -> Vec<f32> {
    let mut gradient_sum = vec![0.0f32; num_params];
    gradient_sum
        .par_chunks_mut(REDUCE_PIECE)
        .enumerate()
        .for_each(|(p, piece)| {
            for scratch in chunks {
                let acc = &scratch.acc[p * REDUCE_PIECE..][..piece.len()];
                piece.iter_mut().zip(acc).for_each(|(g, a)| *g += a);
            }
        });
    gradient_sum
}

/// What every chunk of one backward shares.
struct Plan<'a> {
    inputs: Inputs<'a>,
    rule: ClipRule,
    mode: Mode,
    /// The parametric layers, in order.
    param_layers: Vec<&'a LayerPlan>,
    /// Outputs of all linear layers together (a sample's stash of output gradients).
    linear_out: usize,
    /// Linear layers (a sample's stash of clip factors).
    linear_count: usize,
}

impl<'a> Plan<'a> {
    fn new(inputs: Inputs<'a>, rule: ClipRule) -> Self {
        let mode = if rule == ClipRule::None {
            Mode::Plain
        } else {
            Mode::Private
        };
        let param_layers: Vec<&LayerPlan> = inputs
            .spec
            .layers
            .iter()
            .filter(|l| l.params.1 > 0)
            .collect();
        let linear_out: usize = param_layers
            .iter()
            .map(|l| linear_shape(l).map_or(0, |(_, nout)| nout))
            .sum();
        let linear_count = param_layers
            .iter()
            .filter(|l| linear_shape(l).is_some())
            .count();
        Plan {
            inputs,
            rule,
            mode,
            param_layers,
            linear_out,
            linear_count,
        }
    }

    /// One chunk, samples `first..first + norms.len()`: their clipped gradient sum into
    /// `scratch.acc`, their squared norms into `norms`.
    #[inline(always)]
    fn chunk(&self, first: usize, scratch: &mut Scratch, norms: &mut [f32]) {
        scratch.acc.fill(0.0);
        let samples = norms.len();
        scratch.linear_grads.resize(samples * self.linear_out, 0.0);
        scratch
            .linear_factors
            .resize(samples * self.linear_count, 0.0);
        for (s, norm) in norms.iter_mut().enumerate() {
            backward_sample(
                &self.inputs,
                first + s,
                s * self.linear_out,
                scratch,
                self.mode,
            );
            // Norms are only computed for private backwards (the plain one reports 0).
            let sq: f32 = if self.mode == Mode::Plain {
                0.0
            } else {
                scratch.layer_sq.iter().sum()
            };
            *norm = if sq.is_finite() { sq } else { f32::NAN };
            self.clip_sample(s, sq, scratch);
        }
        self.accumulate_linear_layers(first, samples, scratch);
    }

    /// Sample `s` of the chunk, of squared norm `sq`: its clip factor per parametric layer
    /// (equal for all but `PerLayer`); conv gradients are added to `acc` with their factor,
    /// linear layers' factors stashed for the book-keeping gemm.
    #[inline(always)]
    fn clip_sample(&self, s: usize, sq: f32, scratch: &mut Scratch) {
        let Scratch {
            psg,
            acc,
            layer_sq,
            linear_factors,
            ..
        } = scratch;
        let rule = self.rule;
        let mut linear_slot = 0;
        for (layer, &layer_norm) in self.param_layers.iter().zip(layer_sq.iter()) {
            let factor = match (sq.is_finite(), rule) {
                (_, ClipRule::None) => 1.0,
                (false, _) => 0.0,
                (true, ClipRule::PerLayer { .. }) => {
                    rule.factor(layer_norm, self.param_layers.len())
                }
                (true, _) => rule.factor(sq, 1),
            };
            if linear_shape(layer).is_some() {
                linear_factors[s * self.linear_count + linear_slot] = factor;
                linear_slot += 1;
            } else if self.mode == Mode::Private && factor != 0.0 {
                let (offset, count) = layer.params;
                acc[offset..offset + count]
                    .iter_mut()
                    .zip(&psg[offset..offset + count])
                    .for_each(|(a, g)| *a += factor * g);
            }
        }
    }

    /// Book-keeping for the linear layers: `acc += (G ⊙ c)ᵀ · [A 1]` over the chunk's
    /// `samples` samples from `first`, one gemm per layer.
    #[inline(always)]
    fn accumulate_linear_layers(&self, first: usize, samples: usize, scratch: &mut Scratch) {
        let Scratch {
            acc,
            linear_grads,
            linear_factors,
            linear_inputs,
            ..
        } = scratch;
        let (linear_out, linear_count) = (self.linear_out, self.linear_count);
        let (mut linear_slot, mut g_offset) = (0, 0);
        for (index, layer) in self.inputs.spec.layers.iter().enumerate() {
            let Some((nin, nout)) = linear_shape(layer) else {
                continue;
            };
            linear_inputs.resize(samples * (nin + 1), 0.0);
            for s in 0..samples {
                let a = self.inputs.activations.layer_input(index, first + s, nin);
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
    }
}
