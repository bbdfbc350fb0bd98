//! im2col on NCHW input in PyTorch's column order: the geometry the staged executor's
//! convolution ops share, and the unfold op of its portable path.

use candle_core::{CpuStorage, CustomOp1, Layout, Shape};
use rayon::prelude::*;

use super::f32_slice;
use super::kernels::copy_short;

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

    pub(super) fn image_size(&self) -> usize {
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

    /// im2col of one sample's image into `u` (L × C·k·k), zero padding.
    pub(super) fn unfold_sample(&self, x: &[f32], u: &mut [f32]) {
        u.fill(0.0);
        self.visit_runs(|dst, src, n| copy_short(&mut u[dst..dst + n], &x[src..src + n]));
    }

    /// Accumulates one sample's `du` (L × C·k·k) into its image gradient `dx`.
    pub(super) fn fold_sample(&self, du: &[f32], dx: &mut [f32]) {
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
                self.visit_runs(|dst, src, n| copy_short(&mut u[dst..dst + n], &x[src..src + n]))
            });
        Ok((CpuStorage::F32(u), Shape::from((b, oh * ow, self.cols()))))
    }
}
