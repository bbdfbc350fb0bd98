//! Layer and RMS normalisation over the last dimension in one pass per row, and the
//! backward from the input and the output gradient.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};

use super::elementwise::{map_rows, map_rows2};

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
    #[inline(always)]
    pub(super) fn stats(&self, row: &[f32]) -> (f32, f32) {
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

impl CustomOp1 for Normalize {
    fn name(&self) -> &'static str {
        "dp-normalize"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        map_rows(storage, layout, "normalize", |row, o| {
            let (mean, rstd) = self.stats(row);
            o.iter_mut()
                .zip(row)
                .for_each(|(o, &v)| *o = (v - mean) * rstd);
        })
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
        let op = self.0;
        map_rows2((s1, l1), (s2, l2), "normalize backward", |x, g, dx| {
            let (mean, rstd) = op.stats(x);
            let n = x.len() as f32;
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
        })
    }
}
