//! `x·γ + β` on every row of the last dimension: with γ and β constants (the bias of a
//! Linear layer and the scale and shift of a normalisation in a private forward) the
//! backward is the input's gradient only (Candle's broadcast ops would also reduce the
//! output gradient into the constants' unused gradients, one pass each); with them
//! trainable (a normalisation outside a private forward) their gradients are column sums
//! ([`row_sums`](super::row_sums::row_sums)), not Candle's strided reductions.

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};

use super::elementwise::map_rows;
use super::f32_slice;
use super::row_sums::row_sums;

/// `x (…, d)`, `γ (d)`, `β (d)` → `x·γ + β`; backward `g·γ` for x, and for γ and β
/// `Σ g⊙x` and `Σ g` over the rows when they are trainable.
pub(crate) struct RowAffine {
    /// Whether γ and β get gradients.
    pub trainable: bool,
}

impl CustomOp3 for RowAffine {
    fn name(&self) -> &'static str {
        "dp-row-affine"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (scale, shift) = (f32_slice(s2, l2)?, f32_slice(s3, l3)?);
        let d = l1.shape().dims().last().copied().unwrap_or(0);
        if scale.len() != d || shift.len() != d {
            return Err(candle_core::Error::Msg(format!(
                "row affine: rows of {d} with scale {} and shift {}",
                scale.len(),
                shift.len()
            )));
        }
        map_rows(s1, l1, "row affine", |row, out| {
            for (((o, &x), &g), &b) in out.iter_mut().zip(row).zip(scale).zip(shift) {
                *o = x * g + b;
            }
        })
    }

    fn bwd(
        &self,
        x: &Tensor,
        scale: &Tensor,
        _shift: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let dx = grad_res.broadcast_mul(scale)?;
        if !self.trainable {
            return Ok((Some(dx), None, None));
        }
        let d = scale.dim(0)?;
        let columns = |t: &Tensor| row_sums(&t.reshape((1, (), d))?)?.reshape(d);
        let dscale = columns(&(grad_res * x)?)?;
        let dshift = columns(grad_res)?;
        Ok((Some(dx), Some(dscale), Some(dshift)))
    }
}
