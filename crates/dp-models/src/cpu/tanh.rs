//! tanh with the one-`exp` kernel, and its backward.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};

use super::elementwise::{map, map2};
use super::kernels::tanh_fast;

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
        map(storage, layout, tanh_fast)
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
        map2((s1, l1), (s2, l2), "tanh backward", |t, g| {
            g * (1.0 - t * t)
        })
    }
}
