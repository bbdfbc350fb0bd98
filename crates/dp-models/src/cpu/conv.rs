//! The convolution sample by sample, its input gradient, and one sample's weight and
//! bias gradient (shared by the per-sample ops).

use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::f32_slice;
use super::kernels::{matmul, Mat};
use super::Unfold;

/// A convolution computed sample by sample with the im2col matrix in a per-thread scratch
/// (it never exists for the whole batch): `x (B, C, H, W)`, `W (Cout, K)`, bias `(Cout)` →
/// `Z (B, Cout, L)` with `Zᵢ = W·Uᵢᵀ + b`, already in NCHW order. Backward: x's gradient
/// only, and only when x is tracked (`dxᵢ = fold(dZᵢᵀ·W)`); weight and bias are constants
/// in DP mode.
pub(crate) struct Conv(pub Unfold);

impl CustomOp3 for Conv {
    fn name(&self) -> &'static str {
        "dp-conv"
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
        let g = self.0;
        let (b, c, h, w) = l1.shape().dims4()?;
        let (cout, k) = l2.shape().dims2()?;
        if (c, h, w) != (g.channels, g.height, g.width)
            || k != g.cols()
            || l3.shape().elem_count() != cout
        {
            return Err(candle_core::Error::Msg(format!(
                "conv: input {:?}, weight {:?}, bias {:?} do not fit {g:?}",
                l1.shape(),
                l2.shape(),
                l3.shape()
            )));
        }
        let (x, weight, bias) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?, f32_slice(s3, l3)?);
        let (oh, ow) = g.out_size();
        let l = oh * ow;
        let mut z = vec![0.0f32; b * cout * l];
        z.par_chunks_mut(cout * l)
            .zip(x.par_chunks(g.image_size()))
            .for_each_init(
                || vec![0.0f32; l * k],
                |u, (z, x)| {
                    g.unfold_sample(x, u);
                    for (plane, &bias) in z.chunks_mut(l).zip(bias) {
                        plane.fill(bias);
                    }
                    let lhs = Mat {
                        data: weight,
                        row_stride: k,
                        col_stride: 1,
                    };
                    let rhs = Mat {
                        data: u,
                        row_stride: 1,
                        col_stride: k,
                    };
                    matmul(cout, l, k, z, l, true, lhs, rhs);
                },
            );
        Ok((CpuStorage::F32(z), Shape::from((b, cout, l))))
    }

    fn bwd(
        &self,
        x: &Tensor,
        weight: &Tensor,
        _bias: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        if !x.track_op() {
            return Ok((None, None, None));
        }
        let dx = grad_res
            .contiguous()?
            .apply_op2_no_bwd(&weight.contiguous()?, &ConvInputGradient(self.0))?;
        Ok((Some(dx), None, None))
    }
}

/// `d x (B, C, H, W)` of [`Conv`] from `dZ (B, Cout, L)` and the weight `(Cout, K)` (the
/// direct backward).
pub(crate) fn conv_input_gradient(
    geometry: Unfold,
    grad: &Tensor,
    weight: &Tensor,
) -> candle_core::Result<Tensor> {
    grad.contiguous()?
        .apply_op2_no_bwd(&weight.contiguous()?, &ConvInputGradient(geometry))
}

/// `(dZ (B, Cout, L), W (Cout, K)) → dx (B, C, H, W)`, `dxᵢ = fold(dZᵢᵀ·W)`, sample by
/// sample.
struct ConvInputGradient(Unfold);

impl CustomOp2 for ConvInputGradient {
    fn name(&self) -> &'static str {
        "dp-conv-input-gradient"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let geometry = self.0;
        let ((b, cout, l), (cout2, k)) = (l1.shape().dims3()?, l2.shape().dims2()?);
        if cout != cout2 || k != geometry.cols() {
            return Err(candle_core::Error::Msg(
                "conv input gradient: shapes disagree".into(),
            ));
        }
        let (g, w) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?);
        let mut dx = vec![0.0f32; b * geometry.image_size()];
        dx.par_chunks_mut(geometry.image_size())
            .zip(g.par_chunks(cout * l))
            .for_each_init(
                || vec![0.0f32; l * k],
                |du, (dx, g)| {
                    let lhs = Mat {
                        data: g,
                        row_stride: 1,
                        col_stride: l,
                    };
                    let rhs = Mat {
                        data: w,
                        row_stride: k,
                        col_stride: 1,
                    };
                    matmul(l, k, cout, du, k, false, lhs, rhs);
                    geometry.fold_sample(du, dx);
                },
            );
        Ok((
            CpuStorage::F32(dx),
            Shape::from((b, geometry.channels, geometry.height, geometry.width)),
        ))
    }
}

/// `Gᵢ·Uᵢ` (Cout × K) and the bias gradient `Σ_l Gᵢ[:, l]` of sample i, into `weight`
/// and `bias` (overwritten, or accumulated with factor `scale` into `weight`/`bias` when
/// `accumulate`; `scaled` is scratch of Cout·L).
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_sample_gradient(
    g: &[f32],
    u: &[f32],
    (cout, l, k): (usize, usize, usize),
    scale: f32,
    scaled: &mut [f32],
    weight: &mut [f32],
    bias: &mut [f32],
    accumulate: bool,
) {
    scaled.iter_mut().zip(g).for_each(|(s, &v)| *s = scale * v);
    let lhs = Mat {
        data: scaled,
        row_stride: l,
        col_stride: 1,
    };
    let rhs = Mat {
        data: u,
        row_stride: k,
        col_stride: 1,
    };
    matmul(cout, k, l, weight, k, accumulate, lhs, rhs);
    for (b, row) in bias.iter_mut().zip(scaled.chunks(l)) {
        let sum: f32 = row.iter().sum();
        *b = if accumulate { *b + sum } else { sum };
    }
}
