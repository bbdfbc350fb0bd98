//! GELU: the tanh approximation (Candle's `gelu`) with the one-`exp` tanh, and the exact
//! erf form (PyTorch's default); each with its one-pass backward.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};

use super::elementwise::{map, map2, map_slice};
use super::kernels::tanh_fast;

/// √(2/π).
const SQRT_2_OVER_PI: f32 = 0.797_884_6;
/// The cubic coefficient of the approximation.
const CUBIC: f32 = 0.044_715;
/// 1/√2.
const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// 1/√(2π).
const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;

/// GELU in one pass: with `exact`, `x·Φ(x) = 0.5·x·(1 + erf(x/√2))` (PyTorch's default,
/// Candle's `gelu_erf`, with Candle's `erf`); otherwise `0.5·x·(1 + tanh(√(2/π)(x +
/// 0.044715x³)))` (Candle's CPU `gelu` calls libm's `tanhf` per element and its backward
/// builds eight tensors, `powf` among them).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gelu {
    pub exact: bool,
}

/// The exact form.
const ERF: Gelu = Gelu { exact: true };
/// The tanh approximation.
const TANH: Gelu = Gelu { exact: false };

impl Gelu {
    /// GELU(v).
    #[inline(always)]
    pub(super) fn value(self, v: f32) -> f32 {
        if self.exact {
            0.5 * v * (1.0 + erf(v))
        } else {
            0.5 * v * (1.0 + tanh_fast(SQRT_2_OVER_PI * (v + CUBIC * v * v * v)))
        }
    }

    /// `g·GELU'(v)`: `Φ(v) + v·φ(v)` exact, the tanh form's derivative otherwise.
    #[inline(always)]
    pub(super) fn backward(self, v: f32, g: f32) -> f32 {
        if self.exact {
            return g * (0.5 * (1.0 + erf(v)) + v * FRAC_1_SQRT_2PI * (-0.5 * v * v).exp());
        }
        let t = tanh_fast(SQRT_2_OVER_PI * (v + CUBIC * v * v * v));
        let du = SQRT_2_OVER_PI * (1.0 + 3.0 * CUBIC * v * v);
        g * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du)
    }
}

fn erf(v: f32) -> f32 {
    candle_core::cpu::erf::erf_f32(v * FRAC_1_SQRT_2)
}

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        if self.exact {
            "dp-gelu-erf"
        } else {
            "dp-gelu"
        }
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        // One closure per form, so that each loop is compiled (and vectorised) for it.
        if self.exact {
            return map(storage, layout, |v| ERF.value(v));
        }
        map(storage, layout, |v| TANH.value(v))
    }

    fn bwd(
        &self,
        arg: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(self.input_gradient(arg, grad_res)?))
    }
}

impl Gelu {
    /// GELU of every element of `x`.
    pub(super) fn apply(self, x: &[f32]) -> Vec<f32> {
        if self.exact {
            return map_slice(x, |v| ERF.value(v));
        }
        map_slice(x, |v| TANH.value(v))
    }

    /// `g·GELU'(x)` for the input `x` and the output's gradient `g`.
    pub(super) fn input_gradient(self, x: &Tensor, g: &Tensor) -> candle_core::Result<Tensor> {
        x.contiguous()?
            .apply_op2_no_bwd(&g.contiguous()?, &GeluBackward(self))
    }
}

/// `(x, g) → g·GELU'(x)`.
struct GeluBackward(Gelu);

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
        if self.0.exact {
            return map2((s1, l1), (s2, l2), "gelu-erf backward", |v, g| {
                ERF.backward(v, g)
            });
        }
        map2((s1, l1), (s2, l2), "gelu backward", |v, g| {
            TANH.backward(v, g)
        })
    }
}
