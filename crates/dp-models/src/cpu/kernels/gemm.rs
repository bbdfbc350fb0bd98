//! A bounds-checked single-threaded gemm over strided row-major views.

use std::mem::MaybeUninit;

use super::mat::Mat;

/// The largest index a `rows × cols` view with these strides touches, plus one.
fn extent(rows: usize, cols: usize, row_stride: usize, col_stride: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * row_stride + (cols - 1) * col_stride + 1
    }
}

/// Panics unless `lhs` holds an m × k view and `rhs` a k × n one.
fn assert_operands_fit(m: usize, n: usize, k: usize, lhs: Mat<'_>, rhs: Mat<'_>) {
    assert!(
        extent(m, k, lhs.row_stride, lhs.col_stride) <= lhs.data.len(),
        "matmul: lhs too short"
    );
    assert!(
        extent(k, n, rhs.row_stride, rhs.col_stride) <= rhs.data.len(),
        "matmul: rhs too short"
    );
}

/// `dst (m×n) = [dst +] lhs (m×k) · rhs (k×n)`, single-threaded (samples are parallel).
///
/// Panics if a view is too short for its shape and strides, which would be a bug in the
/// executor's geometry, never a data-dependent condition.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    dst_row_stride: usize,
    accumulate: bool,
    lhs: Mat<'_>,
    rhs: Mat<'_>,
) {
    assert!(
        extent(m, n, dst_row_stride, 1) <= dst.len(),
        "matmul: dst too short"
    );
    assert_operands_fit(m, n, k, lhs, rhs);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                dst[r * dst_row_stride..r * dst_row_stride + n].fill(0.0);
            }
        }
        return;
    }
    #[cfg(feature = "openblas")]
    if super::openblas::sgemm(m, n, k, dst, dst_row_stride, accumulate, lhs, rhs) {
        return;
    }
    // SAFETY: the asserts above prove that every index gemm reads or writes lies inside the
    // corresponding slice; `dst` is borrowed mutably and cannot alias `lhs` or `rhs`.
    #[allow(unsafe_code)]
    unsafe {
        single_threaded_gemm(
            (m, n, k),
            dst.as_mut_ptr(),
            dst_row_stride,
            accumulate,
            lhs,
            rhs,
        );
    }
}

/// `dst (m×n, rows n apart) = lhs (m×k) · rhs (k×n)` into memory not yet written: every
/// element of `dst` is written (zeros for k = 0) and none is read, so a caller can hand
/// it a vector's spare capacity instead of zero-filling the output first (a pass over
/// it as long as the gemm's own writes). Single-threaded.
///
/// Panics if `dst` is not exactly m·n long or a view is too short for its shape.
pub(crate) fn matmul_uninit(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [MaybeUninit<f32>],
    lhs: Mat<'_>,
    rhs: Mat<'_>,
) {
    assert_eq!(dst.len(), m * n, "matmul_uninit: dst is not m·n");
    assert_operands_fit(m, n, k, lhs, rhs);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        dst.iter_mut().for_each(|d| {
            d.write(0.0);
        });
        return;
    }
    // SAFETY: the asserts bound every index gemm reads in lhs and rhs and writes in dst
    // (m·n elements, rows n apart); `dst` is borrowed mutably and aliases neither input.
    // With `read_dst` false gemm sets its alpha to zero and its kernels then only store
    // into dst (gemm-common 0.19 `gemm_basic_generic` and the microkernels' alpha_status
    // 0 path); later K blocks read only what the first block stored. MaybeUninit<f32> has
    // f32's layout.
    #[allow(unsafe_code)]
    unsafe {
        single_threaded_gemm(
            (m, n, k),
            dst.as_mut_ptr().cast::<f32>(),
            n,
            false,
            lhs,
            rhs,
        );
    }
}

/// `dst (m×n, rows `dst_row_stride` apart) = [dst +] lhs · rhs` by gemm on this thread.
///
/// # Safety
/// `dst` must be valid for writes (and, with `read_dst`, reads) of the m × n view, and
/// `lhs`, `rhs` must hold their m × k and k × n views ([`assert_operands_fit`]); `dst`
/// must alias neither.
#[allow(unsafe_code)]
unsafe fn single_threaded_gemm(
    (m, n, k): (usize, usize, usize),
    dst: *mut f32,
    dst_row_stride: usize,
    read_dst: bool,
    lhs: Mat<'_>,
    rhs: Mat<'_>,
) {
    gemm::gemm(
        m,
        n,
        k,
        dst,
        1,
        dst_row_stride as isize,
        read_dst,
        lhs.data.as_ptr(),
        lhs.col_stride as isize,
        lhs.row_stride as isize,
        rhs.data.as_ptr(),
        rhs.col_stride as isize,
        rhs.row_stride as isize,
        1.0,
        1.0,
        false,
        false,
        false,
        gemm::Parallelism::None,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_with_strides() {
        // (2×3)·(3×2) with the rhs given transposed through its strides.
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let bt = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]; // rhs = btᵀ: columns (1,0,1) and (0,1,0)
        let mut d = [0.0f32; 4];
        matmul(
            2,
            2,
            3,
            &mut d,
            2,
            false,
            Mat {
                data: &a,
                row_stride: 3,
                col_stride: 1,
            },
            Mat {
                data: &bt,
                row_stride: 1,
                col_stride: 3,
            },
        );
        assert_eq!(d, [4.0, 2.0, 10.0, 5.0]);
    }
}
