//! im2col and its adjoint on NHWC images, for the fused tier's convolutions, as copies
//! planned once per geometry.
//!
//! A convolution's im2col matrix has the same zeros (the padding) for every sample; only
//! the runs of image values inside it change. [`Patches`] owns one such matrix, zeroed
//! once, and per sample copies only the runs,
//! each a contiguous stretch of `(kernel columns inside the image) · cin` values in both
//! the image and the matrix. The runs are short (8 values for the papers' first layer),
//! so they are copied inline in fixed-size pieces rather than by a `memcpy` call each.
//!
//! The matrix has no ones column for the bias: its width, `kernel² · cin`, is then a
//! multiple of 16 for the usual channel counts, the width gemm multiplies without first
//! packing its operand into a copy. The executor adds the bias (forward) and sums the
//! output gradient's rows (bias gradient) itself.

/// Geometry of a convolution on one sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// Columns of the im2col matrix: kh·kw·cin, a kernel's taps (its weights but the bias).
    pub fn taps(&self) -> usize {
        self.kernel * self.kernel * self.cin
    }

    /// Rows: output pixels.
    pub fn rows(&self) -> usize {
        self.oh * self.ow
    }

    /// Values of one input image.
    fn image_len(&self) -> usize {
        self.h * self.w * self.cin
    }

    /// For output pixel (oy, ox) and kernel row ky: the input row, and the kernel columns
    /// [lo, hi) that fall inside the image with the first one's input column.
    fn tap_run(&self, oy: usize, ox: usize, ky: usize) -> Option<(usize, usize, usize, usize)> {
        let iy = (oy * self.stride + ky)
            .checked_sub(self.padding)
            .filter(|&iy| iy < self.h)?;
        let x0 = (ox * self.stride) as isize - self.padding as isize;
        let lo = (-x0).max(0) as usize;
        let hi = ((self.w as isize - x0).max(0) as usize).min(self.kernel);
        (lo < hi).then(|| (iy, lo, hi, (x0 + lo as isize) as usize))
    }
}

/// One contiguous copy between the image and the im2col matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    /// Offset in the matrix.
    matrix: usize,
    /// Offset in the image.
    image: usize,
    len: usize,
}

/// The im2col matrix (rows × taps) of one geometry, its padding zeroed once.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Patches {
    geometry: ConvGeometry,
    /// In matrix order; every run lies inside the image and the matrix (checked in `new`).
    runs: Vec<Run>,
    matrix: Vec<f32>,
}

impl Patches {
    /// The plan of `g`'s copies and a zeroed matrix.
    pub fn new(g: ConvGeometry) -> Self {
        let (taps, run) = (g.taps(), g.kernel * g.cin);
        let matrix = vec![0.0; g.rows() * taps];
        let mut runs = Vec::new();
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                let row = (oy * g.ow + ox) * taps;
                for ky in 0..g.kernel {
                    if let Some((iy, lo, hi, ix)) = g.tap_run(oy, ox, ky) {
                        runs.push(Run {
                            matrix: row + ky * run + lo * g.cin,
                            image: (iy * g.w + ix) * g.cin,
                            len: (hi - lo) * g.cin,
                        });
                    }
                }
            }
        }
        let fits = |r: &Run| r.matrix + r.len <= matrix.len() && r.image + r.len <= g.image_len();
        assert!(runs.iter().all(fits), "im2col: a run outside its buffers");
        Patches {
            geometry: g,
            runs,
            matrix,
        }
    }

    /// The geometry the matrix was planned for.
    pub fn geometry(&self) -> &ConvGeometry {
        &self.geometry
    }

    /// im2col of an NHWC `image` (h·w·cin values): the matrix, rows × taps.
    #[inline(always)]
    pub fn fill(&mut self, image: &[f32]) -> &[f32] {
        assert_eq!(image.len(), self.geometry.image_len(), "im2col: image size");
        match self.full_run() {
            8 => self.fill_runs::<8>(image),
            16 => self.fill_runs::<16>(image),
            32 => self.fill_runs::<32>(image),
            64 => self.fill_runs::<64>(image),
            _ => self.fill_runs::<0>(image),
        }
        &self.matrix
    }

    /// The length of a run with every kernel column inside the image: `kernel · cin`.
    fn full_run(&self) -> usize {
        self.geometry.kernel * self.geometry.cin
    }

    /// [`fill`](Self::fill)'s copies, those of `N` values (the full runs) with `N` known
    /// at compile time (a few vector moves, no loop); `N = 0` copies every run generically.
    #[inline(always)]
    fn fill_runs<const N: usize>(&mut self, image: &[f32]) {
        for r in &self.runs {
            if N > 0 && r.len == N {
                let src: &[f32; N] = (&image[r.image..][..N])
                    .try_into()
                    .unwrap_or_else(|_| unreachable!());
                self.matrix[r.matrix..][..N].copy_from_slice(src);
            } else {
                copy_short(
                    &mut self.matrix[r.matrix..][..r.len],
                    &image[r.image..][..r.len],
                );
            }
        }
    }

    /// The adjoint of [`fill`](Self::fill): `image_grad` (zeroed first) receives the sum
    /// of `du`'s (rows × taps) entries over the positions each image value was copied to,
    /// run by run in matrix order (so every sum's order is fixed).
    #[inline(always)]
    pub fn col2im(&self, du: &[f32], image_grad: &mut [f32]) {
        assert_eq!(du.len(), self.matrix.len(), "col2im: matrix size");
        assert_eq!(
            image_grad.len(),
            self.geometry.image_len(),
            "col2im: image size"
        );
        image_grad.fill(0.0);
        match self.full_run() {
            8 => self.add_runs::<8>(du, image_grad),
            16 => self.add_runs::<16>(du, image_grad),
            32 => self.add_runs::<32>(du, image_grad),
            64 => self.add_runs::<64>(du, image_grad),
            _ => self.add_runs::<0>(du, image_grad),
        }
    }

    /// [`col2im`](Self::col2im)'s sums, runs of `N` values unrolled as in
    /// [`fill_runs`](Self::fill_runs).
    #[inline(always)]
    fn add_runs<const N: usize>(&self, du: &[f32], image_grad: &mut [f32]) {
        for r in &self.runs {
            if N > 0 && r.len == N {
                add_run(&mut image_grad[r.image..][..N], &du[r.matrix..][..N]);
            } else {
                add_run(
                    &mut image_grad[r.image..][..r.len],
                    &du[r.matrix..][..r.len],
                );
            }
        }
    }
}

/// Values a fixed-size piece of a run holds (one AVX2 register of f32).
const PIECE: usize = 8;

/// `dst = src` (equal lengths) in fixed-size pieces, inline: for the short runs of an
/// im2col, where a `memcpy` call per run costs more than the copy.
#[inline(always)]
pub(crate) fn copy_short(dst: &mut [f32], src: &[f32]) {
    let mut d = dst.chunks_exact_mut(PIECE);
    let mut s = src.chunks_exact(PIECE);
    for (d, s) in (&mut d).zip(&mut s) {
        let piece: &[f32; PIECE] = s.try_into().unwrap_or_else(|_| unreachable!());
        d.copy_from_slice(piece);
    }
    let (d, s) = (d.into_remainder(), s.remainder());
    let mut at = 0;
    if s.len() - at >= 4 {
        d[at..at + 4].copy_from_slice(&s[at..at + 4]);
        at += 4;
    }
    if s.len() - at >= 2 {
        d[at..at + 2].copy_from_slice(&s[at..at + 2]);
        at += 2;
    }
    if s.len() > at {
        d[at] = s[at];
    }
}

/// `dst += src` elementwise (equal lengths).
#[inline(always)]
fn add_run(dst: &mut [f32], src: &[f32]) {
    dst.iter_mut().zip(src).for_each(|(d, s)| *d += s);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The im2col matrix entry by entry from its definition.
    fn reference(g: &ConvGeometry, image: &[f32]) -> Vec<f32> {
        let taps = g.taps();
        let mut u = vec![0.0; g.rows() * taps];
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                let row = &mut u[(oy * g.ow + ox) * taps..][..taps];
                for ky in 0..g.kernel {
                    for kx in 0..g.kernel {
                        let iy = (oy * g.stride + ky) as isize - g.padding as isize;
                        let ix = (ox * g.stride + kx) as isize - g.padding as isize;
                        let inside =
                            (0..g.h as isize).contains(&iy) && (0..g.w as isize).contains(&ix);
                        for c in 0..g.cin {
                            row[(ky * g.kernel + kx) * g.cin + c] = if inside {
                                image[(iy as usize * g.w + ix as usize) * g.cin + c]
                            } else {
                                0.0
                            };
                        }
                    }
                }
            }
        }
        u
    }

    fn geometries() -> Vec<ConvGeometry> {
        let g = |h, cin, kernel, stride, padding| {
            let o = (h + 2 * padding - kernel) / stride + 1;
            ConvGeometry {
                h,
                w: h,
                cin,
                kernel,
                stride,
                padding,
                oh: o,
                ow: o,
            }
        };
        // The papers' two MNIST layers, odd run lengths, no padding, padding past a kernel,
        // full runs of 16 and 32 values.
        vec![
            g(28, 1, 8, 2, 3),
            g(13, 16, 4, 2, 0),
            g(9, 3, 3, 1, 1),
            g(7, 5, 3, 2, 0),
            g(5, 7, 2, 1, 3),
            g(6, 4, 4, 1, 1),
            g(6, 8, 4, 2, 1),
        ]
    }

    #[test]
    fn fill_matches_the_definition_on_every_sample_and_col2im_is_its_adjoint() {
        for g in geometries() {
            let mut patches = Patches::new(g);
            for sample in 0..3 {
                let image: Vec<f32> = (0..g.image_len())
                    .map(|i| (i * 7 + sample * 13) as f32 % 11.0 - 5.0)
                    .collect();
                assert_eq!(
                    patches.fill(&image),
                    reference(&g, &image).as_slice(),
                    "{g:?}"
                );
            }
            // ⟨fill(x), du⟩ = ⟨x, col2im(du)⟩, exactly in small integers.
            let du: Vec<f32> = (0..g.rows() * g.taps())
                .map(|i| (i % 5) as f32 - 2.0)
                .collect();
            let x: Vec<f32> = (0..g.image_len()).map(|i| (i % 3) as f32 - 1.0).collect();
            let mut grad = vec![f32::NAN; g.image_len()];
            patches.col2im(&du, &mut grad);
            let u = patches.fill(&x).to_vec();
            let lhs: f32 = u.iter().zip(&du).map(|(a, b)| a * b).sum();
            let rhs: f32 = x.iter().zip(&grad).map(|(a, b)| a * b).sum();
            assert_eq!(lhs, rhs, "{g:?}");
        }
    }
}
