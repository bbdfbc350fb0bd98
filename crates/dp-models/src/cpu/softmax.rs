//! Softmax over the last dimension in one pass per row, and its backward from the output.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::f32_slice;

/// Rows per parallel task.
const ROWS_PER_TASK: usize = 64;

fn row_len(layout: &Layout) -> candle_core::Result<usize> {
    layout
        .shape()
        .dims()
        .last()
        .copied()
        .filter(|&d| d > 0)
        .ok_or_else(|| candle_core::Error::Msg("softmax: needs a non-empty last dimension".into()))
}

/// `exp(x − max)/Σ exp(x − max)` per row (composed from Candle ops: five tensors and
/// passes; candle-nn's fused `softmax_last_dim` has no backward). Rows of −∞ only give 0.
pub(crate) struct SoftmaxLastDim;

impl CustomOp1 for SoftmaxLastDim {
    fn name(&self) -> &'static str {
        "dp-softmax-last-dim"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, d) = (f32_slice(storage, layout)?, row_len(layout)?);
        let mut out = vec![0.0f32; x.len()];
        out.par_chunks_mut(d * ROWS_PER_TASK)
            .zip(x.par_chunks(d * ROWS_PER_TASK))
            .for_each(|(out, x)| {
                for (o, row) in out.chunks_mut(d).zip(x.chunks(d)) {
                    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    if max == f32::NEG_INFINITY {
                        o.fill(0.0);
                        continue;
                    }
                    let mut sum = 0.0;
                    for (o, &v) in o.iter_mut().zip(row) {
                        *o = (v - max).exp();
                        sum += *o;
                    }
                    o.iter_mut().for_each(|o| *o /= sum);
                }
            });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }

    fn bwd(
        &self,
        _arg: &Tensor,
        res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(res.contiguous()?.apply_op2_no_bwd(
            &grad_res.contiguous()?,
            &SoftmaxBackward,
        )?))
    }
}

/// `(y, g) → y·(g − Σ g·y)` per row.
struct SoftmaxBackward;

impl CustomOp2 for SoftmaxBackward {
    fn name(&self) -> &'static str {
        "dp-softmax-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (y, g, d) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?, row_len(l1)?);
        if y.len() != g.len() {
            return Err(candle_core::Error::Msg(
                "softmax backward: shape mismatch".into(),
            ));
        }
        let mut dx = vec![0.0f32; y.len()];
        dx.par_chunks_mut(d * ROWS_PER_TASK)
            .zip(
                y.par_chunks(d * ROWS_PER_TASK)
                    .zip(g.par_chunks(d * ROWS_PER_TASK)),
            )
            .for_each(|(dx, (y, g))| {
                for ((dx, y), g) in dx.chunks_mut(d).zip(y.chunks(d)).zip(g.chunks(d)) {
                    let dot: f32 = y.iter().zip(g).map(|(y, g)| y * g).sum();
                    for ((o, &y), &g) in dx.iter_mut().zip(y).zip(g) {
                        *o = y * (g - dot);
                    }
                }
            });
        Ok((CpuStorage::F32(dx), l1.shape().clone()))
    }
}
