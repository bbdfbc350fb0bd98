//! tanh with the one-`exp` kernel, and its backward.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::f32_slice;
use super::kernels::tanh_fast;

/// Elements per parallel task of [`Tanh`] and its backward.
const ELEMENTS_PER_TASK: usize = 16 * 1024;

/// tanh with the fused tier's one-`exp` kernel (|error| ≤ 1.2e-7; Candle's CPU tanh calls
/// libm per element); backward `g·(1 − tanh²)` in one pass over the result.
pub(crate) struct Tanh;

impl CustomOp1 for Tanh {
    fn name(&self) -> &'static str {
        "dp-tanh"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = f32_slice(storage, layout)?;
        let mut out = vec![0.0f32; x.len()];
        out.par_chunks_mut(ELEMENTS_PER_TASK)
            .zip(x.par_chunks(ELEMENTS_PER_TASK))
            .for_each(|(out, x)| {
                out.iter_mut().zip(x).for_each(|(o, &v)| *o = tanh_fast(v));
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
            &TanhBackward,
        )?))
    }
}

/// `d x` of [`Tanh`] from its output and `d output` (the direct backward).
pub(crate) fn tanh_backward(output: &Tensor, grad: &Tensor) -> candle_core::Result<Tensor> {
    output
        .contiguous()?
        .apply_op2_no_bwd(&grad.contiguous()?, &TanhBackward)
}

/// `(tanh(x), g) → g·(1 − tanh²(x))`.
struct TanhBackward;

impl CustomOp2 for TanhBackward {
    fn name(&self) -> &'static str {
        "dp-tanh-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (t, g) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?);
        if t.len() != g.len() {
            return Err(candle_core::Error::Msg(
                "tanh backward: shape mismatch".into(),
            ));
        }
        let mut dx = vec![0.0f32; t.len()];
        dx.par_chunks_mut(ELEMENTS_PER_TASK)
            .zip(
                t.par_chunks(ELEMENTS_PER_TASK)
                    .zip(g.par_chunks(ELEMENTS_PER_TASK)),
            )
            .for_each(|(dx, (t, g))| {
                for ((d, &t), &g) in dx.iter_mut().zip(t).zip(g) {
                    *d = g * (1.0 - t * t);
                }
            });
        Ok((CpuStorage::F32(dx), l1.shape().clone()))
    }
}
