//! A matmul whose backward is the input gradient only.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::f32_slice;
use super::kernels::{matmul, Mat};

/// Rows per parallel task of [`Matmul`].
const ROWS_PER_TASK: usize = 128;

/// A matmul without a weight gradient: `x (M, K) · wᵀ` with `w (N, K)` when
/// `rhs_transposed` (the layer's forward), `x (M, K) · w (K, N)` otherwise (its input
/// gradient) → (M, N). Backward: x's gradient only — the weight is a constant in DP mode,
/// and Candle's own matmul backward would also compute the (unused, unclipped) weight
/// gradient, a gemm as large as the forward.
#[derive(Clone, Copy)]
pub(crate) struct Matmul {
    pub rhs_transposed: bool,
}

impl CustomOp2 for Matmul {
    fn name(&self) -> &'static str {
        "dp-matmul"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (m, k) = l1.shape().dims2()?;
        let (n, k2) = match (self.rhs_transposed, l2.shape().dims2()?) {
            (true, (n, k2)) => (n, k2),
            (false, (k2, n)) => (n, k2),
        };
        if k != k2 {
            return Err(candle_core::Error::Msg(format!(
                "matmul: ({m}, {k}) · {:?} (transposed: {})",
                l2.shape().dims(),
                self.rhs_transposed
            )));
        }
        let (x, w) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?);
        let rhs = if self.rhs_transposed {
            Mat {
                data: w,
                row_stride: 1,
                col_stride: k,
            }
        } else {
            Mat {
                data: w,
                row_stride: n,
                col_stride: 1,
            }
        };
        let mut out = vec![0.0f32; m * n];
        if n > 0 && k > 0 {
            out.par_chunks_mut(ROWS_PER_TASK * n)
                .zip(x.par_chunks(ROWS_PER_TASK * k))
                .for_each(|(dst, rows)| {
                    let lhs = Mat {
                        data: rows,
                        row_stride: k,
                        col_stride: 1,
                    };
                    matmul(dst.len() / n, n, k, dst, n, false, lhs, rhs);
                });
        }
        Ok((CpuStorage::F32(out), Shape::from((m, n))))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let w = if self.rhs_transposed {
            w.contiguous()?
        } else {
            w.t()?.contiguous()?
        };
        let dx = grad_res.contiguous()?.apply_op2_no_bwd(
            &w,
            &Matmul {
                rhs_transposed: false,
            },
        )?;
        Ok((Some(dx), None))
    }
}
