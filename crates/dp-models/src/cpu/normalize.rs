//! Layer and RMS normalisation over the last dimension in one pass per row, and the
//! backward from the input and the output gradient.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::f32_slice;

/// Rows per parallel task.
const ROWS_PER_TASK: usize = 64;

/// `x̂ = (x − mean)·rstd` (or `x·rstd` without `remove_mean`), `rstd = 1/√(var + eps)`,
/// over each row of the last dimension. Composed from Candle ops it is eight tensors and
/// eight passes, forward and backward each.
#[derive(Clone, Copy)]
pub(crate) struct Normalize {
    pub eps: f32,
    pub remove_mean: bool,
}

impl Normalize {
    /// The row's mean (0 without `remove_mean`) and 1/√(var + eps).
    fn stats(&self, row: &[f32]) -> (f32, f32) {
        let n = row.len() as f32;
        let mean = if self.remove_mean {
            row.iter().sum::<f32>() / n
        } else {
            0.0
        };
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
        (mean, 1.0 / (var + self.eps).sqrt())
    }
}

fn row_len(layout: &Layout) -> candle_core::Result<usize> {
    layout
        .shape()
        .dims()
        .last()
        .copied()
        .filter(|&d| d > 0)
        .ok_or_else(|| {
            candle_core::Error::Msg("normalize: needs a non-empty last dimension".into())
        })
}

impl CustomOp1 for Normalize {
    fn name(&self) -> &'static str {
        "dp-normalize"
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
                    let (mean, rstd) = self.stats(row);
                    o.iter_mut()
                        .zip(row)
                        .for_each(|(o, &v)| *o = (v - mean) * rstd);
                }
            });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }

    fn bwd(
        &self,
        arg: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(arg.contiguous()?.apply_op2_no_bwd(
            &grad_res.contiguous()?,
            &NormalizeBackward(*self),
        )?))
    }
}

/// `(x, g) → rstd·(g − mean(g) − x̂·mean(g·x̂))` (no `mean(g)` term without `remove_mean`).
struct NormalizeBackward(Normalize);

impl CustomOp2 for NormalizeBackward {
    fn name(&self) -> &'static str {
        "dp-normalize-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, g, d) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?, row_len(l1)?);
        if x.len() != g.len() {
            return Err(candle_core::Error::Msg(
                "normalize backward: shape mismatch".into(),
            ));
        }
        let op = self.0;
        let mut dx = vec![0.0f32; x.len()];
        dx.par_chunks_mut(d * ROWS_PER_TASK)
            .zip(
                x.par_chunks(d * ROWS_PER_TASK)
                    .zip(g.par_chunks(d * ROWS_PER_TASK)),
            )
            .for_each(|(dx, (x, g))| {
                for ((dx, x), g) in dx.chunks_mut(d).zip(x.chunks(d)).zip(g.chunks(d)) {
                    let (mean, rstd) = op.stats(x);
                    let n = d as f32;
                    let g_mean = if op.remove_mean {
                        g.iter().sum::<f32>() / n
                    } else {
                        0.0
                    };
                    let gx = g
                        .iter()
                        .zip(x)
                        .map(|(&g, &v)| g * (v - mean) * rstd)
                        .sum::<f32>()
                        / n;
                    for ((o, &g), &v) in dx.iter_mut().zip(g).zip(x) {
                        *o = rstd * (g - g_mean - (v - mean) * rstd * gx);
                    }
                }
            });
        Ok((CpuStorage::F32(dx), l1.shape().clone()))
    }
}
