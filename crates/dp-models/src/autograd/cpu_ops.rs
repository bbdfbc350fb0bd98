//! CPU custom ops of the autograd tier, each with its own backward where it sits in the
//! graph: convolution sample by sample with its im2col in cache and only the input
//! gradient, matmuls without the unused weight gradient, max pooling, tanh, and per-sample
//! conv norms and clipped sums. Candle's CPU `conv2d` backward and the `index_select`
//! pooling cost ~85% of a DP step (docs/training.md). Other devices keep the portable
//! Candle path.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::fused::f32_slice;
use crate::fused::kernels::{matmul, tanh_fast, Mat};

/// Whether the CPU ops apply to `t` (f32 on the CPU).
pub(crate) fn applies(t: &Tensor) -> bool {
    t.device().is_cpu() && t.dtype() == candle_core::DType::F32
}

/// A convolution's geometry on NCHW input.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unfold {
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    pub kernel: usize,
    pub stride: usize,
    pub padding: usize,
}

impl Unfold {
    pub(crate) fn out_size(&self) -> (usize, usize) {
        let out = |n: usize| (n + 2 * self.padding - self.kernel) / self.stride + 1;
        (out(self.height), out(self.width))
    }

    pub(crate) fn cols(&self) -> usize {
        self.channels * self.kernel * self.kernel
    }

    fn image_size(&self) -> usize {
        self.channels * self.height * self.width
    }

    /// For output pixel (oy, ox) and kernel row (c, ky): calls `f(column, image offset,
    /// run length)` for the run of kernel columns kx that fall inside the image — `run`
    /// consecutive values in both the im2col row and the NCHW image.
    fn visit_runs(&self, mut f: impl FnMut(usize, usize, usize)) {
        let (oh, ow) = self.out_size();
        let (k, s, p) = (self.kernel, self.stride, self.padding as isize);
        let cols = self.cols();
        for oy in 0..oh {
            for ox in 0..ow {
                let row = (oy * ow + ox) * cols;
                let x0 = (ox * s) as isize - p;
                let lo = (-x0).max(0) as usize;
                let hi = ((self.width as isize - x0).max(0) as usize).min(k);
                if lo >= hi {
                    continue;
                }
                for c in 0..self.channels {
                    for ky in 0..k {
                        let iy = (oy * s + ky) as isize - p;
                        if iy < 0 || iy as usize >= self.height {
                            continue;
                        }
                        let image = (c * self.height + iy as usize) * self.width;
                        f(
                            row + (c * k + ky) * k + lo,
                            image + (x0 + lo as isize) as usize,
                            hi - lo,
                        );
                    }
                }
            }
        }
    }
}

impl Unfold {
    /// im2col of one sample's image into `u` (L × C·k·k), zero padding.
    fn unfold_sample(&self, x: &[f32], u: &mut [f32]) {
        u.fill(0.0);
        self.visit_runs(|dst, src, n| u[dst..dst + n].copy_from_slice(&x[src..src + n]));
    }

    /// Accumulates one sample's `du` (L × C·k·k) into its image gradient `dx`.
    fn fold_sample(&self, du: &[f32], dx: &mut [f32]) {
        self.visit_runs(|src, dst, n| {
            dx[dst..dst + n]
                .iter_mut()
                .zip(&du[src..src + n])
                .for_each(|(d, s)| *d += s)
        });
    }
}

/// (B, C, H, W) → (B, L, C·k·k), columns in PyTorch's (c, ky, kx) order, zero padding
/// (no backward: the portable path's per-sample gradients and the tests use it).
impl CustomOp1 for Unfold {
    fn name(&self) -> &'static str {
        "dp-unfold"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = f32_slice(storage, layout)?;
        let (b, c, h, w) = layout.shape().dims4()?;
        if (c, h, w) != (self.channels, self.height, self.width) {
            return Err(candle_core::Error::Msg(format!(
                "unfold: input (_, {c}, {h}, {w}) does not match {self:?}"
            )));
        }
        let (oh, ow) = self.out_size();
        let per_sample = oh * ow * self.cols();
        let mut u = vec![0.0f32; b * per_sample];
        u.par_chunks_mut(per_sample)
            .zip(x.par_chunks(self.image_size()))
            .for_each(|(u, x)| {
                self.visit_runs(|dst, src, n| u[dst..dst + n].copy_from_slice(&x[src..src + n]))
            });
        Ok((CpuStorage::F32(u), Shape::from((b, oh * ow, self.cols()))))
    }
}

/// Max pooling on NCHW, any kernel and stride; the first maximum in a window wins
/// (PyTorch's order), and the backward sends the gradient to it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MaxPool {
    pub kernel: usize,
    pub stride: usize,
}

impl MaxPool {
    /// Calls `f(output index, input index of the window's first maximum)` per output.
    fn argmax(&self, x: &[f32], h: usize, w: usize, mut f: impl FnMut(usize, usize)) {
        let (k, s) = (self.kernel, self.stride);
        let (oh, ow) = ((h - k) / s + 1, (w - k) / s + 1);
        for oy in 0..oh {
            let rows = &x[oy * s * w..(oy * s + k) * w];
            for ox in 0..ow {
                let (mut best, mut value) = (ox * s, rows[ox * s]);
                for ky in 0..k {
                    let window = &rows[ky * w + ox * s..ky * w + ox * s + k];
                    for (kx, &v) in window.iter().enumerate() {
                        if v > value {
                            (best, value) = (ky * w + ox * s + kx, v);
                        }
                    }
                }
                f(oy * ow + ox, oy * s * w + best);
            }
        }
    }
}

impl CustomOp1 for MaxPool {
    fn name(&self) -> &'static str {
        "dp-max-pool"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = f32_slice(storage, layout)?;
        let (b, c, h, w) = layout.shape().dims4()?;
        if h < self.kernel || w < self.kernel {
            return Err(candle_core::Error::Msg(format!(
                "pool window {} exceeds the input {h}×{w}",
                self.kernel
            )));
        }
        let (oh, ow) = (
            (h - self.kernel) / self.stride + 1,
            (w - self.kernel) / self.stride + 1,
        );
        let mut out = vec![0.0f32; b * c * oh * ow];
        // One task per sample (a task per channel plane would be too small to pay off).
        out.par_chunks_mut(c * oh * ow)
            .zip(x.par_chunks(c * h * w))
            .for_each(|(out, x)| {
                for (out, x) in out.chunks_mut(oh * ow).zip(x.chunks(h * w)) {
                    self.argmax(x, h, w, |o, i| out[o] = x[i]);
                }
            });
        Ok((CpuStorage::F32(out), Shape::from((b, c, oh, ow))))
    }

    fn bwd(
        &self,
        arg: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(arg.contiguous()?.apply_op2_no_bwd(
            &grad_res.contiguous()?,
            &MaxPoolBackward(*self),
        )?))
    }
}

/// `d input` of [`MaxPool`] from its input and `d output` (the direct backward).
pub(crate) fn max_pool_backward(
    pool: MaxPool,
    input: &Tensor,
    grad: &Tensor,
) -> candle_core::Result<Tensor> {
    input
        .contiguous()?
        .apply_op2_no_bwd(&grad.contiguous()?, &MaxPoolBackward(pool))
}

/// `d x` of [`Tanh`] from its output and `d output` (the direct backward).
pub(crate) fn tanh_backward(output: &Tensor, grad: &Tensor) -> candle_core::Result<Tensor> {
    output
        .contiguous()?
        .apply_op2_no_bwd(&grad.contiguous()?, &TanhBackward)
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

/// `(input, d output) → d input` of [`MaxPool`].
struct MaxPoolBackward(MaxPool);

impl CustomOp2 for MaxPoolBackward {
    fn name(&self) -> &'static str {
        "dp-max-pool-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, g) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?);
        let (b, c, h, w) = l1.shape().dims4()?;
        let (_, _, oh, ow) = l2.shape().dims4()?;
        let mut dx = vec![0.0f32; b * c * h * w];
        dx.par_chunks_mut(c * h * w)
            .zip(x.par_chunks(c * h * w).zip(g.par_chunks(c * oh * ow)))
            .for_each(|(dx, (x, g))| {
                for (dx, (x, g)) in dx
                    .chunks_mut(h * w)
                    .zip(x.chunks(h * w).zip(g.chunks(oh * ow)))
                {
                    self.0.argmax(x, h, w, |o, i| dx[i] += g[o]);
                }
            });
        Ok((CpuStorage::F32(dx), l1.shape().clone()))
    }
}

/// Rows per parallel task of the matmuls below.
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

/// Elements per parallel task of the element-wise ops below.
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

/// Samples per task of the per-sample conv ops below; fixed, so that the clipped sum is
/// reduced in the same order whatever the number of threads (bit-reproducible).
const SAMPLES_PER_TASK: usize = 8;

/// `Gᵢ·Uᵢ` (Cout × K) and the bias gradient `Σ_l Gᵢ[:, l]` of sample i, into `weight`
/// and `bias` (overwritten, or accumulated with factor `scale` into `weight`/`bias` when
/// `accumulate`; `scaled` is scratch of Cout·L).
#[allow(clippy::too_many_arguments)]
fn conv_sample_gradient(
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

/// `(G (B, Cout, L), x (B, C, H, W), c (B,)) → (Cout·K + Cout,)`: `Σᵢ cᵢ·∇ᵢ` of weight
/// and bias, accumulated per fixed chunk of samples, chunks summed in order.
pub(crate) struct ConvClippedSum(pub Unfold);

impl CustomOp3 for ConvClippedSum {
    fn name(&self) -> &'static str {
        "dp-conv-clipped-sum"
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
        let geometry = self.0;
        let (b, cout, l) = l1.shape().dims3()?;
        let k = geometry.cols();
        let image = geometry.image_size();
        if l2.shape().elem_count() != b * image || l3.shape().elem_count() != b {
            return Err(candle_core::Error::Msg(
                "conv clipped sum: G, x and c disagree".into(),
            ));
        }
        let (g, x, c) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?, f32_slice(s3, l3)?);
        let size = cout * k + cout;
        let partials: Vec<Vec<f32>> = (0..b.div_ceil(SAMPLES_PER_TASK))
            .into_par_iter()
            .map(|chunk| {
                let mut acc = vec![0.0f32; size];
                let (mut u, mut scaled) = (vec![0.0f32; l * k], vec![0.0f32; cout * l]);
                let (weight, bias) = acc.split_at_mut(cout * k);
                for i in chunk * SAMPLES_PER_TASK..((chunk + 1) * SAMPLES_PER_TASK).min(b) {
                    geometry.unfold_sample(&x[i * image..][..image], &mut u);
                    conv_sample_gradient(
                        &g[i * cout * l..][..cout * l],
                        &u,
                        (cout, l, k),
                        c[i],
                        &mut scaled,
                        weight,
                        bias,
                        true,
                    );
                }
                acc
            })
            .collect();
        let mut total = vec![0.0f32; size];
        for partial in &partials {
            total.iter_mut().zip(partial).for_each(|(t, p)| *t += p);
        }
        Ok((CpuStorage::F32(total), Shape::from(size)))
    }
}

/// `(G (B, Cout, L), x (B, C, H, W)) → (B, Cout·K + Cout + 1)`: each sample's gradient
/// (weight, then bias) followed by its squared norm. Kept by the tape so that the clipped
/// sum is one weighted row sum ([`WeightedRowSum`]) instead of a second im2col and gemm
/// per sample.
pub(crate) struct ConvPerSampleRows(pub Unfold);

impl CustomOp2 for ConvPerSampleRows {
    fn name(&self) -> &'static str {
        "dp-conv-per-sample-rows"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let geometry = self.0;
        let (b, cout, l) = l1.shape().dims3()?;
        let (k, image) = (geometry.cols(), geometry.image_size());
        let (oh, ow) = geometry.out_size();
        if l != oh * ow || l2.shape().elem_count() != b * image {
            return Err(candle_core::Error::Msg(
                "conv per-sample rows: G and x disagree".into(),
            ));
        }
        let (g, x) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?);
        let width = cout * k + cout + 1;
        let mut rows = vec![0.0f32; b * width];
        rows.par_chunks_mut(width).enumerate().for_each_init(
            || (vec![0.0f32; l * k], vec![0.0f32; cout * l]),
            |(u, scaled), (i, row)| {
                geometry.unfold_sample(&x[i * image..][..image], u);
                let (gradient, norm) = row.split_at_mut(cout * k + cout);
                let (weight, bias) = gradient.split_at_mut(cout * k);
                conv_sample_gradient(
                    &g[i * cout * l..][..cout * l],
                    u,
                    (cout, l, k),
                    1.0,
                    scaled,
                    weight,
                    bias,
                    false,
                );
                norm[0] = crate::fused::kernels::sum_of_squares(gradient);
            },
        );
        Ok((CpuStorage::F32(rows), Shape::from((b, width))))
    }
}

/// Columns per parallel task of [`WeightedRowSum`].
const COLUMNS_PER_TASK: usize = 256;

/// `(rows (B, W), c (B,)) → (W − 1,)`: `Σᵢ cᵢ·rowsᵢ` over all but the last column (the
/// norm of [`ConvPerSampleRows`]). Rows with `cᵢ = 0` are skipped, not multiplied, so a
/// non-finite gradient with a zero factor cannot turn the sum into NaN. Parallel over
/// columns, samples summed in order: the same bits whatever the number of threads.
pub(crate) struct WeightedRowSum;

impl CustomOp2 for WeightedRowSum {
    fn name(&self) -> &'static str {
        "dp-weighted-row-sum"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (b, width) = l1.shape().dims2()?;
        if l2.shape().elem_count() != b || width == 0 {
            return Err(candle_core::Error::Msg(
                "weighted row sum: rows and factors disagree".into(),
            ));
        }
        let (rows, c) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?);
        let mut sum = vec![0.0f32; width - 1];
        sum.par_chunks_mut(COLUMNS_PER_TASK)
            .enumerate()
            .for_each(|(task, out)| {
                let start = task * COLUMNS_PER_TASK;
                for (row, &factor) in rows.chunks(width).zip(c) {
                    if factor != 0.0 {
                        let row = &row[start..start + out.len()];
                        out.iter_mut().zip(row).for_each(|(o, &v)| *o += factor * v);
                    }
                }
            });
        Ok((CpuStorage::F32(sum), Shape::from(width - 1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn pseudo_random(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    /// The kept-rows path (per-sample rows with their norms, then a weighted row sum) and
    /// the recomputing path (clipped sums sample by sample) agree, and a zero factor keeps a
    /// non-finite row out of the sum.
    #[test]
    fn kept_rows_agree_with_recomputed_norms_and_sums() -> candle_core::Result<()> {
        let geometry = Unfold {
            channels: 3,
            height: 9,
            width: 7,
            kernel: 3,
            stride: 2,
            padding: 1,
        };
        let (b, cout) = (11, 5);
        let (oh, ow) = geometry.out_size();
        let l = oh * ow;
        let x = Tensor::from_vec(
            pseudo_random(b * geometry.image_size(), 1),
            (b, 3, 9, 7),
            &Device::Cpu,
        )?;
        let mut g_data = pseudo_random(b * cout * l, 2);
        let c_data: Vec<f32> = (0..b).map(|i| 0.1 * (i % 4) as f32).collect();
        let g = Tensor::from_vec(g_data.clone(), (b, cout, l), &Device::Cpu)?;
        let c = Tensor::from_vec(c_data.clone(), b, &Device::Cpu)?;

        let rows = g.apply_op2_no_bwd(&x, &ConvPerSampleRows(geometry))?;
        let width = cout * geometry.cols() + cout + 1;
        assert_eq!(rows.dims2()?, (b, width));
        let kept_norms = rows
            .narrow(1, width - 1, 1)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        // The norm column is the squared norm of the row's gradient part.
        let norms = rows
            .narrow(1, 0, width - 1)?
            .sqr()?
            .sum(1)?
            .to_vec1::<f32>()?;
        for (a, e) in kept_norms.iter().zip(&norms) {
            assert!((a - e).abs() <= 1e-5 * e.abs().max(1.0), "{a} vs {e}");
        }
        let kept_sum = rows
            .apply_op2_no_bwd(&c, &WeightedRowSum)?
            .to_vec1::<f32>()?;
        let sum = g
            .apply_op3_no_bwd(&x, &c, &ConvClippedSum(geometry))?
            .to_vec1::<f32>()?;
        assert_eq!(kept_sum.len(), sum.len());
        for (a, e) in kept_sum.iter().zip(&sum) {
            assert!((a - e).abs() <= 1e-5 * e.abs().max(1.0), "{a} vs {e}");
        }

        // Sample 0 has factor 0: a NaN in its gradient must not reach the sum.
        g_data[0] = f32::NAN;
        let g = Tensor::from_vec(g_data, (b, cout, l), &Device::Cpu)?;
        let rows = g.apply_op2_no_bwd(&x, &ConvPerSampleRows(geometry))?;
        let with_nan = rows
            .apply_op2_no_bwd(&c, &WeightedRowSum)?
            .to_vec1::<f32>()?;
        assert_eq!(c_data[0], 0.0);
        assert!(with_nan.iter().all(|v| v.is_finite()));
        Ok(())
    }
}
