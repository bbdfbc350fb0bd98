//! The matmul of a linear layer on the CPU: rows of any rank times a weight, with the
//! weight gradient computed only where the weight trains.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::kernels::{matmul, matmul_uninit, Mat};
use super::{f32_slice, keep_gradient, storage_f32, GradientSlot};

/// The fewest rows per parallel task of [`Matmul`].
const MIN_ROWS_PER_TASK: usize = 128;

/// Rows per parallel task for `m` rows: two tasks per thread (a straggling core is
/// absorbed), never fewer than [`MIN_ROWS_PER_TASK`]. gemm packs the weight once per
/// call, so 128-row tasks repack it 32 times for 4,096 rows: on the transformer's
/// shapes (4,096 rows, K and N of 256–1,024; 2 cores) the forward ran at 280–345
/// GFLOP/s in 128-row tasks and 420–450 in these (a throwaway gemm microbenchmark,
/// 2026-12-06).
fn rows_per_task(m: usize) -> usize {
    let tasks = 2 * rayon::current_num_threads().max(1);
    m.div_ceil(tasks).max(MIN_ROWS_PER_TASK)
}

/// `x (…, K) · wᵀ` with `w (N, K)` when `rhs_transposed` (a layer's forward), `x (…, K)
/// · w (K, N)` otherwise (its input gradient) → (…, N): every leading axis is rows, so a
/// layer over sequences needs no reshape nodes (each costs Candle's backward a zero
/// tensor and an addition). Backward: x's gradient, and with `weight_gradient` (and
/// `rhs_transposed`) the weight's, `gᵀ x`; without it the weight is a constant (DP mode:
/// Candle's matmul backward would compute the unused, unclipped weight gradient, a gemm
/// as large as the forward). The output's gradient is left in `catch`.
#[derive(Clone)]
pub(crate) struct Matmul {
    pub rhs_transposed: bool,
    pub weight_gradient: bool,
    pub catch: Option<GradientSlot>,
}

impl Matmul {
    /// The forward of a linear layer with weight `(N, K)`.
    pub(crate) fn linear(weight_gradient: bool) -> Self {
        Matmul {
            rhs_transposed: true,
            weight_gradient,
            catch: None,
        }
    }

    /// The input gradient of a linear layer with weight `(N, K)`.
    pub(crate) fn input_gradient() -> Self {
        Matmul {
            rhs_transposed: false,
            weight_gradient: false,
            catch: None,
        }
    }
}

/// `f` of a contiguous f32 CPU tensor's data, read in place.
fn with_f32<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> candle_core::Result<R> {
    let (storage, layout) = t.storage_and_layout();
    Ok(f(storage_f32(&storage, layout)?))
}

/// `dW (N, K) = gᵀ (N × M) · x (M × K)`, parallel over blocks of W's rows.
pub(super) fn weight_gradient(g: &[f32], x: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let mut dw = vec![0.0f32; n * k];
    if m == 0 || k == 0 {
        return dw;
    }
    let block = n.div_ceil(rayon::current_num_threads().max(1) * 2).max(1);
    dw.par_chunks_mut(block * k)
        .enumerate()
        .for_each(|(i, dst)| {
            let (row, rows) = (i * block, dst.len() / k);
            let lhs = Mat {
                data: &g[row..],
                row_stride: 1,
                col_stride: n,
            };
            let rhs = Mat {
                data: x,
                row_stride: k,
                col_stride: 1,
            };
            matmul(rows, k, m, dst, k, false, lhs, rhs);
        });
    dw
}

/// A linear layer's weight gradient `gᵀ x` (N, K) from its input `x` (…, K), weight `w`
/// (N, K) and contiguous output gradient `grad` (…, N).
pub(super) fn linear_weight_gradient(
    x: &Tensor,
    w: &Tensor,
    grad: &Tensor,
) -> candle_core::Result<Tensor> {
    let (n, k) = w.dims2()?;
    let m = x.elem_count() / k.max(1);
    let x = x.contiguous()?;
    let dw = with_f32(grad, |g| with_f32(&x, |xs| weight_gradient(g, xs, m, n, k)))??;
    Tensor::from_vec(dw, (n, k), w.device())
}

/// `x (M × K) · wᵀ` (`w` N × K) when `rhs_transposed`, else `x · w` (`w` K × N), plus
/// `bias` (N) on every row where given (the rows start from it: one pass, not two),
/// parallel over blocks of rows.
pub(super) fn rows_times(
    x: &[f32],
    w: &[f32],
    (m, n, k): (usize, usize, usize),
    rhs_transposed: bool,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let rhs = if rhs_transposed {
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
    let Some(bias) = bias else {
        return rows_times_fresh(x, rhs, (m, n, k));
    };
    // The rows start from the bias; gemm adds the product to them.
    let mut out = bias.repeat(m);
    add_rows_times(&mut out, x, rhs, (m, n, k));
    out
}

/// `out (M × N) += x (M × K) · rhs (K × N)`, parallel over blocks of rows.
pub(super) fn add_rows_times(
    out: &mut [f32],
    x: &[f32],
    rhs: Mat<'_>,
    (m, n, k): (usize, usize, usize),
) {
    if n == 0 || k == 0 {
        return;
    }
    let rows = rows_per_task(m);
    out.par_chunks_mut(rows * n)
        .zip(x.par_chunks(rows * k))
        .for_each(|(dst, rows)| {
            matmul(dst.len() / n, n, k, dst, n, true, Mat::rows(rows, k), rhs);
        });
}

/// `x (M × K) · rhs` (K × N) into a new vector that is written once, by the gemm (no
/// zero fill first).
fn rows_times_fresh(x: &[f32], rhs: Mat<'_>, (m, n, k): (usize, usize, usize)) -> Vec<f32> {
    if n == 0 || k == 0 {
        return vec![0.0; m * n];
    }
    // The chunks below partition the output only if x has all m rows.
    assert_eq!(x.len(), m * k, "rows_times: x is not m·k");
    let mut out = Vec::with_capacity(m * n);
    let rows = rows_per_task(m);
    out.spare_capacity_mut()[..m * n]
        .par_chunks_mut(rows * n)
        .zip(x.par_chunks(rows * k))
        .for_each(|(dst, xs)| {
            let rows = dst.len() / n;
            matmul_uninit(rows, n, k, dst, Mat::rows(xs, k), rhs);
        });
    // SAFETY: the chunks partition the first m·n elements of the capacity, and
    // `matmul_uninit` writes every element of the chunk it is given.
    #[allow(unsafe_code)]
    unsafe {
        out.set_len(m * n)
    };
    out
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
        let dims = l1.shape().dims();
        let k = dims.last().copied().unwrap_or(0);
        let m = l1.shape().elem_count().checked_div(k).unwrap_or(0);
        let (n, k2) = match (self.rhs_transposed, l2.shape().dims2()?) {
            (true, (n, k2)) => (n, k2),
            (false, (k2, n)) => (n, k2),
        };
        if k != k2 || dims.is_empty() {
            return Err(candle_core::Error::Msg(format!(
                "matmul: {dims:?} · {:?} (transposed: {})",
                l2.shape().dims(),
                self.rhs_transposed
            )));
        }
        let (x, w) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?);
        let out = rows_times(x, w, (m, n, k), self.rhs_transposed, None);
        let mut shape = dims.to_vec();
        if let Some(last) = shape.last_mut() {
            *last = n;
        }
        Ok((CpuStorage::F32(out), Shape::from(shape)))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        keep_gradient(self.catch.as_ref(), grad_res);
        let grad = grad_res.contiguous()?;
        let wk = if self.rhs_transposed {
            w.contiguous()?
        } else {
            w.t()?.contiguous()?
        };
        let dx = grad.apply_op2_no_bwd(&wk, &Matmul::input_gradient())?;
        if !(self.weight_gradient && self.rhs_transposed) {
            return Ok((Some(dx), None));
        }
        Ok((Some(dx), Some(linear_weight_gradient(x, w, &grad)?)))
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor, Var};

    use super::Matmul;

    /// On rows of rank 3, the values and both gradients equal Candle's matmul's.
    #[test]
    fn a_trainable_linear_matmul_equals_candles() {
        let (b, t, k, n) = (3, 5, 7, 4);
        let values = |len: usize, seed: usize| -> Vec<f32> {
            (0..len)
                .map(|i| (((i + seed) * 37 % 97) as f32 - 48.0) / 31.0)
                .collect()
        };
        let x = Var::from_vec(values(b * t * k, 1), (b, t, k), &Device::Cpu).expect("x");
        let w = Var::from_vec(values(n * k, 2), (n, k), &Device::Cpu).expect("w");
        let g = Tensor::from_vec(values(b * t * n, 3), (b, t, n), &Device::Cpu).expect("g");
        let ours = x
            .as_tensor()
            .apply_op2(w.as_tensor(), Matmul::linear(true))
            .expect("ours");
        let theirs = x
            .as_tensor()
            .reshape((b * t, k))
            .and_then(|r| r.matmul(&w.as_tensor().t()?))
            .and_then(|r| r.reshape((b, t, n)))
            .expect("candle");
        let host =
            |t: &Tensor| -> Vec<f32> { t.flatten_all().and_then(|t| t.to_vec1()).expect("host") };
        let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5);
        assert!(close(&host(&ours), &host(&theirs)), "values");
        let grads = |y: &Tensor| {
            (y * &g)
                .and_then(|l| l.sum_all())
                .and_then(|l| l.backward())
                .expect("backward")
        };
        let (a, c) = (grads(&ours), grads(&theirs));
        for v in [&x, &w] {
            let (ga, gc) = (
                a.get(v.as_tensor()).expect("ours"),
                c.get(v.as_tensor()).expect("candle"),
            );
            assert!(close(&host(ga), &host(gc)), "gradient");
        }
    }
}
