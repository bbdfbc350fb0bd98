//! Softmax over the last dimension in one pass per row, and its backward from the output.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};

use super::elementwise::{map_rows, map_rows2};

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
        map_rows(storage, layout, "softmax", |row, o| {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            if max == f32::NEG_INFINITY {
                o.fill(0.0);
                return;
            }
            let mut sum = 0.0;
            for (o, &v) in o.iter_mut().zip(row) {
                *o = (v - max).exp();
                sum += *o;
            }
            o.iter_mut().for_each(|o| *o /= sum);
        })
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
        map_rows2((s1, l1), (s2, l2), "softmax backward", |y, g, dx| {
            let dot: f32 = y.iter().zip(g).map(|(y, g)| y * g).sum();
            for ((o, &y), &g) in dx.iter_mut().zip(y).zip(g) {
                *o = y * (g - dot);
            }
        })
    }
}
