//! OpenBLAS's `sgemm` for the views it can express (feature `openblas`).
//!
//! The system library (Debian: `apt-get install libopenblas-dev`), linked, never
//! downloaded. On the 2-core AVX-512 machine of docs/training.md it runs the transformer's
//! and the CNN's shapes 1.3–1.9× faster than the `gemm` crate on one thread. Every call
//! here is single-threaded, as the `gemm` crate's are: the callers are already parallel
//! over samples or row blocks, and OpenBLAS's own threads beside rayon's would
//! oversubscribe the cores.

use std::sync::Once;

use super::mat::Mat;

const ROW_MAJOR: i32 = 101;
const NO_TRANS: i32 = 111;
const TRANS: i32 = 112;

#[link(name = "openblas")]
extern "C" {
    fn cblas_sgemm(
        layout: i32,
        trans_a: i32,
        trans_b: i32,
        m: i32,
        n: i32,
        k: i32,
        alpha: f32,
        a: *const f32,
        lda: i32,
        b: *const f32,
        ldb: i32,
        beta: f32,
        c: *mut f32,
        ldc: i32,
    );
    fn openblas_set_num_threads(threads: i32);
}

static ONE_THREAD: Once = Once::new();

/// A `rows × cols` view as row-major BLAS sees it: (transpose flag, leading dimension),
/// or `None` where neither stride is 1 or the leading dimension is too short.
fn as_blas(view: &Mat<'_>, rows: usize, cols: usize) -> Option<(i32, i32)> {
    let (flag, lead, min) = if view.col_stride == 1 {
        (NO_TRANS, view.row_stride, cols)
    } else if view.row_stride == 1 {
        (TRANS, view.col_stride, rows)
    } else {
        return None;
    };
    (lead >= min.max(1)).then_some(())?;
    Some((flag, i32::try_from(lead).ok()?))
}

/// `dst (m×n) = [dst +] lhs (m×k) · rhs (k×n)` by OpenBLAS, or `false` (nothing written)
/// where a view or a size is not expressible; the caller has checked every extent.
#[allow(clippy::too_many_arguments)]
pub(super) fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    dst_row_stride: usize,
    accumulate: bool,
    lhs: Mat<'_>,
    rhs: Mat<'_>,
) -> bool {
    let sizes = (i32::try_from(m), i32::try_from(n), i32::try_from(k));
    let (Ok(mi), Ok(ni), Ok(ki)) = sizes else {
        return false;
    };
    let (Some((ta, lda)), Some((tb, ldb))) = (as_blas(&lhs, m, k), as_blas(&rhs, k, n)) else {
        return false;
    };
    if m > 1 && dst_row_stride < n {
        return false;
    }
    let Ok(ldc) = i32::try_from(dst_row_stride.max(n)) else {
        return false;
    };
    ONE_THREAD.call_once(|| {
        // SAFETY: sets a global thread count; no memory is touched.
        #[allow(unsafe_code)]
        unsafe {
            openblas_set_num_threads(1)
        }
    });
    let beta = if accumulate { 1.0 } else { 0.0 };
    // SAFETY: the caller asserted that every index of the m×k, k×n and m×n views lies
    // inside its slice; the flags and leading dimensions above describe exactly those
    // views (a leading dimension at least the row length), and `dst` cannot alias them.
    #[allow(unsafe_code)]
    unsafe {
        cblas_sgemm(
            ROW_MAJOR,
            ta,
            tb,
            mi,
            ni,
            ki,
            1.0,
            lhs.data.as_ptr(),
            lda,
            rhs.data.as_ptr(),
            ldb,
            beta,
            dst.as_mut_ptr(),
            ldc,
        );
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The product by definition, in f64.
    fn reference(m: usize, n: usize, k: usize, lhs: &Mat<'_>, rhs: &Mat<'_>) -> Vec<f64> {
        let at = |v: &Mat<'_>, r: usize, c: usize| {
            f64::from(v.data[r * v.row_stride + c * v.col_stride])
        };
        (0..m * n)
            .map(|i| (0..k).map(|j| at(lhs, i / n, j) * at(rhs, j, i % n)).sum())
            .collect()
    }

    /// Every stride pattern the kernels use (plain, transposed, padded rows, a row
    /// stride of a wider matrix), with and without accumulation, against the definition.
    #[test]
    fn sgemm_equals_the_definition_on_strided_views() {
        let data: Vec<f32> = (0..4096)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
            .collect();
        let (m, n, k) = (5, 7, 6);
        let layouts = [(k, 1), (1, m + 2), (k + 3, 1)];
        for &(lr, lc) in &layouts {
            for &(rr, rc) in &[(n, 1), (1, k), (n + 4, 1)] {
                let lhs = Mat {
                    data: &data,
                    row_stride: lr,
                    col_stride: lc,
                };
                let rhs = Mat {
                    data: &data[300..],
                    row_stride: rr,
                    col_stride: rc,
                };
                for accumulate in [false, true] {
                    let mut dst = vec![1.5f32; m * (n + 2)];
                    assert!(sgemm(m, n, k, &mut dst, n + 2, accumulate, lhs, rhs));
                    let want = reference(m, n, k, &lhs, &rhs);
                    for (i, w) in want.iter().enumerate() {
                        let got = f64::from(dst[(i / n) * (n + 2) + i % n]);
                        let w = w + if accumulate { 1.5 } else { 0.0 };
                        assert!((got - w).abs() < 1e-4 * (1.0 + w.abs()), "{got} vs {w}");
                    }
                    assert!(dst[n..n + 2].iter().all(|&v| v == 1.5), "padding written");
                }
            }
        }
    }

    #[test]
    fn views_blas_cannot_express_are_left_to_the_gemm_crate() {
        let data = [0.0f32; 64];
        let strided = Mat {
            data: &data,
            row_stride: 4,
            col_stride: 2,
        };
        let plain = Mat {
            data: &data,
            row_stride: 3,
            col_stride: 1,
        };
        let mut dst = [7.0f32; 9];
        assert!(!sgemm(3, 3, 3, &mut dst, 3, false, strided, plain));
        assert!(!sgemm(3, 3, 3, &mut dst, 2, false, plain, plain));
        assert_eq!(dst, [7.0; 9], "nothing written");
    }
}
