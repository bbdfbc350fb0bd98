//! `x + b` on every row of the last dimension: a Linear layer's bias. Its backward is the
//! output gradient itself for `x` and, where `b` trains, its column sums for `b`
//! ([`row_sums`](super::row_sums::row_sums)); Candle's broadcast add reduces into `b` with
//! a strided sum.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};

use super::elementwise::map_rows;
use super::row_sums::row_sums;
use super::{f32_slice, keep_gradient, GradientSlot};

/// `x (…, d)`, `b (d)` → `x + b`; `b` gets a gradient with `bias_gradient` (a constant in
/// a private forward), and the output's gradient is left in `catch`.
pub(crate) struct AddBias {
    pub bias_gradient: bool,
    pub catch: Option<GradientSlot>,
}

impl CustomOp2 for AddBias {
    fn name(&self) -> &'static str {
        "dp-add-bias"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let bias = f32_slice(s2, l2)?;
        let d = l1.shape().dims().last().copied().unwrap_or(0);
        if bias.len() != d {
            return Err(candle_core::Error::Msg(format!(
                "add bias: rows of {d} with a bias of {}",
                bias.len()
            )));
        }
        map_rows(s1, l1, "add bias", |row, out| {
            for ((o, &x), &b) in out.iter_mut().zip(row).zip(bias) {
                *o = x + b;
            }
        })
    }

    fn bwd(
        &self,
        _x: &Tensor,
        bias: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        keep_gradient(self.catch.as_ref(), grad_res);
        if !self.bias_gradient {
            return Ok((Some(grad_res.clone()), None));
        }
        let d = bias.dim(0)?;
        let summed = row_sums(&grad_res.reshape((1, (), d))?)?.reshape(d)?;
        Ok((Some(grad_res.clone()), Some(summed)))
    }
}
