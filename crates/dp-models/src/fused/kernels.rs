//! Per-sample building blocks: a bounds-checked gemm, im2col/col2im in NHWC, fast tanh.

/// A row-major matrix view: `data[row * row_stride + col * col_stride]`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a> {
    pub data: &'a [f32],
    pub row_stride: usize,
    pub col_stride: usize,
}

/// The largest index a `rows × cols` view with these strides touches, plus one.
fn extent(rows: usize, cols: usize, row_stride: usize, col_stride: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * row_stride + (cols - 1) * col_stride + 1
    }
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
    assert!(
        extent(m, k, lhs.row_stride, lhs.col_stride) <= lhs.data.len(),
        "matmul: lhs too short"
    );
    assert!(
        extent(k, n, rhs.row_stride, rhs.col_stride) <= rhs.data.len(),
        "matmul: rhs too short"
    );
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
    // SAFETY: the asserts above prove that every index gemm reads or writes lies inside the
    // corresponding slice; `dst` is borrowed mutably and cannot alias `lhs` or `rhs`.
    #[allow(unsafe_code)]
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_row_stride as isize,
            accumulate,
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
}

/// Geometry of a convolution on one sample.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConvGeometry {
    pub h: usize,
    pub w: usize,
    pub cin: usize,
    pub kernel: usize,
    pub stride: usize,
    pub padding: usize,
    pub oh: usize,
    pub ow: usize,
}

impl ConvGeometry {
    /// Columns of the im2col matrix: kh·kw·cin plus the ones column for the bias.
    pub fn cols(&self) -> usize {
        self.kernel * self.kernel * self.cin + 1
    }

    /// Rows: output pixels.
    pub fn rows(&self) -> usize {
        self.oh * self.ow
    }
}

/// For output pixel (oy, ox) and kernel row ky: the input row, and the kernel columns
/// [lo, hi) that fall inside the image with the first one's input column. One contiguous
/// run of (hi − lo)·cin values in NHWC.
#[inline]
fn tap_run(
    g: &ConvGeometry,
    oy: usize,
    ox: usize,
    ky: usize,
) -> Option<(usize, usize, usize, usize)> {
    let iy = (oy * g.stride + ky)
        .checked_sub(g.padding)
        .filter(|&iy| iy < g.h)?;
    let x0 = (ox * g.stride) as isize - g.padding as isize;
    let lo = (-x0).max(0) as usize;
    let hi = ((g.w as isize - x0).max(0) as usize).min(g.kernel);
    (lo < hi).then(|| (iy, lo, hi, (x0 + lo as isize) as usize))
}

/// im2col of an NHWC image into `u` (rows × cols), ones in the last column.
pub(crate) fn im2col(g: &ConvGeometry, image: &[f32], u: &mut [f32]) {
    let cols = g.cols();
    let run = g.kernel * g.cin;
    for oy in 0..g.oh {
        for ox in 0..g.ow {
            let row = &mut u[(oy * g.ow + ox) * cols..][..cols];
            for ky in 0..g.kernel {
                let dst = &mut row[ky * run..][..run];
                match tap_run(g, oy, ox, ky) {
                    Some((iy, lo, hi, ix)) => {
                        dst[..lo * g.cin].fill(0.0);
                        dst[lo * g.cin..hi * g.cin].copy_from_slice(
                            &image[(iy * g.w + ix) * g.cin..][..(hi - lo) * g.cin],
                        );
                        dst[hi * g.cin..].fill(0.0);
                    }
                    None => dst.fill(0.0),
                }
            }
            row[cols - 1] = 1.0;
        }
    }
}

/// The adjoint of `im2col`: accumulates `du` (rows × cols, last column ignored) into the
/// image gradient (zeroed first).
pub(crate) fn col2im(g: &ConvGeometry, du: &[f32], image_grad: &mut [f32]) {
    image_grad.fill(0.0);
    let cols = g.cols();
    let run = g.kernel * g.cin;
    for oy in 0..g.oh {
        for ox in 0..g.ow {
            let row = &du[(oy * g.ow + ox) * cols..][..cols];
            for ky in 0..g.kernel {
                if let Some((iy, lo, hi, ix)) = tap_run(g, oy, ox, ky) {
                    let src = &row[ky * run + lo * g.cin..ky * run + hi * g.cin];
                    let dst = &mut image_grad[(iy * g.w + ix) * g.cin..][..(hi - lo) * g.cin];
                    dst.iter_mut().zip(src).for_each(|(d, s)| *d += s);
                }
            }
        }
    }
}

/// Lanes of the split accumulators below: enough independent sums for the compiler to
/// vectorise (a plain `.sum()` of floats is a serial chain the compiler may not reorder).
const LANES: usize = 16;

/// `Σ aᵢ·bᵢ` with [`LANES`] independent partial sums (pairwise order fixed, so results are
/// deterministic).
#[inline]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..LANES {
            acc[k] += x[k] * y[k];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// `Σ aᵢ²`, vectorised like [`dot`].
#[inline]
pub(crate) fn sum_of_squares(a: &[f32]) -> f32 {
    dot(a, a)
}

/// tanh via one `exp` (|error| ≤ 1.2e-7; glibc's `tanhf` is ~7× slower).
#[inline(always)]
pub(crate) fn tanh_fast(x: f32) -> f32 {
    if x.abs() < 0.004 {
        return x * (1.0 - x * x / 3.0);
    }
    let e = (2.0 * x.clamp(-9.0, 9.0)).exp();
    (e - 1.0) / (e + 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tanh_fast_is_accurate() {
        let mut worst = 0.0f32;
        for i in -20_000..20_000 {
            let x = i as f32 * 5e-4;
            worst = worst.max((tanh_fast(x) - x.tanh()).abs());
        }
        assert!(worst < 3e-7, "{worst}");
    }

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
