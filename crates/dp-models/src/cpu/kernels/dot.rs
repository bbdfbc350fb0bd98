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

/// `Σ aᵢ²` in `f64` with [`LANES`] independent partial sums (each square of an `f32` is
/// exact in `f64`; the order is fixed, so results are deterministic). A plain iterator sum
/// is one serial chain of additions, several times slower on long rows.
#[inline(always)]
pub(crate) fn sum_of_squares_f64(a: &[f32]) -> f64 {
    let mut acc = [0.0f64; LANES];
    let chunks = a.chunks_exact(LANES);
    let rest = chunks.remainder();
    for x in chunks {
        for k in 0..LANES {
            let v = f64::from(x[k]);
            acc[k] += v * v;
        }
    }
    let tail: f64 = rest.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    acc.iter().sum::<f64>() + tail
}

/// An upper bound of the exact sum of `terms` non-negative values whose `f64` sum in any
/// order is `sum`: the summation's error is at most `(terms − 1)·2⁻⁵³` of the exact sum
/// to first order (Higham, *Accuracy and Stability of Numerical Algorithms*, §4.2), so
/// `sum·(1 + terms·2⁻⁵²)` bounds it, rounded up to `f32` (NaN and ∞ stay as they are).
pub(crate) fn upper_f32(sum: f64, terms: usize) -> f32 {
    let bound = sum * (1.0 + terms as f64 * f64::EPSILON);
    let y = bound as f32;
    if f64::from(y) < bound {
        y.next_up()
    } else {
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The split sum equals an exact (integer) sum of squares on values whose squares
    /// are small integers, at every length around the lane count.
    #[test]
    fn sum_of_squares_f64_is_the_sum() {
        for len in [0, 1, LANES - 1, LANES, LANES + 1, 5 * LANES + 3] {
            let a: Vec<f32> = (0..len).map(|i| (i % 7) as f32 - 3.0).collect();
            let exact: i64 = (0..len).map(|i| ((i % 7) as i64 - 3).pow(2)).sum();
            assert_eq!(sum_of_squares_f64(&a), exact as f64, "length {len}");
        }
    }

    /// The bound is never below the sum and is the next float up where the sum is not
    /// an f32.
    #[test]
    fn upper_f32_bounds_the_sum() {
        assert_eq!(upper_f32(0.0, 10), 0.0);
        let s = 1.0 + f64::EPSILON;
        assert!(f64::from(upper_f32(s, 1)) > s);
        assert_eq!(upper_f32(s, 1), 1.0f32.next_up());
        assert!(upper_f32(f64::NAN, 3).is_nan());
        assert_eq!(upper_f32(f64::INFINITY, 3), f32::INFINITY);
    }
}
