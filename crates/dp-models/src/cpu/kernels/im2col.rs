//! im2col and col2im of one NHWC sample, for the fused tier's convolutions.

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
#[inline(always)]
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
#[inline(always)]
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
#[inline(always)]
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
