//! A linear layer that adds its output to a residual stream, in one op: `r + x wᵀ + b`.
//! A transformer block's output projections end in a residual addition; as a separate
//! node it costs a pass over the stream forward and, backward, a zero tensor and an
//! addition for the projection's output (Candle gives every node input its own).

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};

use super::elementwise::map_row_slices;
use super::kernels::Mat;
use super::linear::linear_backward;
use super::matmul::add_rows_times;
use super::{f32_slice, keep_gradient, GradientSlot};

/// `x (…, K)`, `wb (N, K)` or, with `bias`, `(N, K + 1)` (the weight with the bias as its
/// last column), `r (…, N)` → `r + x wᵀ + b`. Backward: `x`'s gradient, `r`'s (the output's
/// gradient itself) and with `parameter_gradients` `wb`'s `[gᵀ x | Σ g]` (without, the
/// parameters are constants: a private forward). The output's gradient, which is also
/// the gradient of `x wᵀ + b`, is left in `catch`.
pub(crate) struct LinearResidual {
    pub parameter_gradients: bool,
    pub catch: Option<GradientSlot>,
    pub bias: bool,
}

impl LinearResidual {
    /// (N, K) of the packed weight `wb`.
    fn weight_dims(&self, wb: &Layout) -> candle_core::Result<(usize, usize)> {
        let (n, cols) = wb.shape().dims2()?;
        let k = cols.checked_sub(usize::from(self.bias));
        k.map(|k| (n, k))
            .ok_or_else(|| candle_core::Error::Msg("linear residual: no bias column".into()))
    }
}

impl CustomOp3 for LinearResidual {
    fn name(&self) -> &'static str {
        "dp-linear-residual"
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
        let (n, k) = self.weight_dims(l2)?;
        let dims = l1.shape().dims();
        let mut out_dims = dims.to_vec();
        if let Some(last) = out_dims.last_mut() {
            *last = n;
        }
        if dims.last() != Some(&k) || l3.shape().dims() != out_dims.as_slice() {
            candle_core::bail!(
                "linear residual: {dims:?} · {:?}ᵀ + {:?}",
                l2.shape().dims(),
                l3.shape().dims()
            );
        }
        let (x, wb, r) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?, f32_slice(s3, l3)?);
        let m = x.len().checked_div(k).unwrap_or(0);
        let stride = k + usize::from(self.bias);
        let mut out = start_rows(r, wb, n, stride, self.bias);
        let w = Mat {
            data: wb,
            row_stride: 1,
            col_stride: stride,
        };
        add_rows_times(&mut out, x, w, (m, n, k));
        Ok((CpuStorage::F32(out), Shape::from(out_dims)))
    }

    fn bwd(
        &self,
        x: &Tensor,
        wb: &Tensor,
        _r: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        keep_gradient(self.catch.as_ref(), grad_res);
        let grad = grad_res.contiguous()?;
        let (n, k) = wb.dims2()?;
        let k = k - usize::from(self.bias);
        let w = wb.narrow(1, 0, k)?.contiguous()?;
        let (dx, parameters) = linear_backward(x, &w, &grad, self.parameter_gradients)?;
        let Some((dw, db)) = parameters else {
            return Ok((Some(dx), None, Some(grad)));
        };
        let dwb = if self.bias {
            Tensor::cat(&[&dw, &db.reshape((n, 1))?], 1)?
        } else {
            dw
        };
        Ok((Some(dx), Some(dwb), Some(grad)))
    }
}

/// The rows the product is added to: `r`, plus the bias (`wb`'s last column) on every row.
fn start_rows(r: &[f32], wb: &[f32], n: usize, stride: usize, bias: bool) -> Vec<f32> {
    if !bias || n == 0 {
        return r.to_vec();
    }
    let b: Vec<f32> = (0..n).map(|j| wb[j * stride + stride - 1]).collect();
    map_row_slices(r, n, |r, o| {
        for ((o, &r), &b) in o.iter_mut().zip(r).zip(&b) {
            *o = r + b;
        }
    })
}
