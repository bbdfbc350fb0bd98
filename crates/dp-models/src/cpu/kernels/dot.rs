//! Dot products with split accumulators (vectorised, in a fixed order).

/// Lanes of the split accumulators below: enough independent sums for the compiler to
/// vectorise (a plain `.sum()` of floats is a serial chain the compiler may not reorder).
const LANES: usize = 16;

/// `Σ aᵢ·bᵢ` with [`LANES`] independent partial sums (pairwise order fixed, so results are
/// deterministic).
#[inline(always)]
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
#[inline(always)]
pub(crate) fn sum_of_squares(a: &[f32]) -> f32 {
    dot(a, a)
}
