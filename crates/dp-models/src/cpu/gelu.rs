//! GELU (tanh approximation, as Candle's `gelu`) with the one-`exp` tanh, and its backward.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};

use super::elementwise::{map, map2};
use super::kernels::tanh_fast;

/// √(2/π).
const SQRT_2_OVER_PI: f32 = 0.797_884_6;
/// The cubic coefficient of the approximation.
const CUBIC: f32 = 0.044_715;

/// `0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³)))` in one pass (Candle's CPU `gelu` calls libm's
/// `tanhf` per element and its backward builds eight tensors, `powf` among them).
pub(crate) struct Gelu;

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        "dp-gelu"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        map(storage, layout, |v| {
            0.5 * v * (1.0 + tanh_fast(SQRT_2_OVER_PI * (v + CUBIC * v * v * v)))
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
            &GeluBackward,
        )?))
    }
}

/// `(x, g) → g·GELU'(x)`.
struct GeluBackward;

impl CustomOp2 for GeluBackward {
    fn name(&self) -> &'static str {
        "dp-gelu-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        map2((s1, l1), (s2, l2), "gelu backward", |v, g| {
            let t = tanh_fast(SQRT_2_OVER_PI * (v + CUBIC * v * v * v));
            let du = SQRT_2_OVER_PI * (1.0 + 3.0 * CUBIC * v * v);
            g * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du)
        })
    }
}
