//! tanh with one polynomial `exp`, and the `exp` of a softmax's shifted scores; both
//! branch-free so that loops over them vectorise.

/// `e^y` for `y` ∈ [−80, 18] without a libm call (the two callers' ranges, each tested): `y = k·ln 2 + r` with `k` rounded to
/// an integer by the 1.5·2²³ trick (so `k` is read off the sum's low mantissa bits),
/// `ln 2` split Cody–Waite style (`k·LN2_HI` is exact for |k| < 2⁹) and `e^r`, |r| ≤ ln 2/2,
/// by its degree-7 Taylor polynomial (truncation below 6e-9 relative). Every operation is
/// an f32/i32 lane operation, so a loop over this compiles to SIMD.
#[inline(always)]
fn exp_bounded(y: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0; // 1.5·2²³
    const LN2_HI: f32 = 0.693_359_4; // 0x3f31_8000: 0.693359375, 9 significant bits
    const LN2_LO: f32 = -2.121_944_4e-4;
    let shifted = y * std::f32::consts::LOG2_E + ROUND;
    let k = shifted - ROUND;
    let k_int = shifted.to_bits().wrapping_sub(ROUND.to_bits()) as i32;
    let r = (y - k * LN2_HI) - k * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    p * f32::from_bits(((k_int + 127) as u32) << 23)
}

/// `e^y` for `y ≤ 0` (a softmax's scores less their maximum; `y > 0` is read as 0),
/// within 4e-7 relative of the exact value down to y = −80 (tested; lower, the result
/// nears f32's subnormals and loses precision); below, it returns e^−80 ≈ 1.8e-35 for
/// any y. In a softmax of T terms (the maximum's term is 1) that moves each probability
/// by at most T·1.8e-35 absolute: 7e-32 at T = 4096. NaN stays NaN.
#[inline(always)]
pub(crate) fn exp_nonpositive(y: f32) -> f32 {
    exp_bounded(y.clamp(-80.0, 0.0))
}

/// tanh as `(e − 1)/(e + 1)` with `e = e^{2x}` ([`exp_bounded`], x clamped to ±9 where
/// tanh is 1 in f32), and `x·(1 − x²/3)` below |x| = 0.004 where the quotient cancels
/// (|error| ≤ 3e-7 everywhere, tested; glibc's `tanhf` is ~7× slower and does not
/// vectorise). Both branches are computed and one selected, so the loop stays SIMD.
#[inline(always)]
pub(crate) fn tanh_fast(x: f32) -> f32 {
    let small = x * (1.0 - x * x * (1.0 / 3.0));
    let e = exp_bounded(2.0 * x.clamp(-9.0, 9.0));
    let large = (e - 1.0) / (e + 1.0);
    if x.abs() < 0.004 {
        small
    } else {
        large
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tanh_fast_is_accurate() {
        let mut worst = 0.0f32;
        for i in -40_000..40_000 {
            let x = i as f32 * 5e-4;
            worst = worst.max((tanh_fast(x) - x.tanh()).abs());
        }
        assert!(worst < 3e-7, "{worst}");
        assert_eq!(tanh_fast(f32::INFINITY), 1.0);
        assert_eq!(tanh_fast(f32::NEG_INFINITY), -1.0);
        assert!(tanh_fast(f32::NAN).is_nan());
    }

    #[test]
    fn exp_nonpositive_is_accurate_and_keeps_nan() {
        let mut worst = 0.0f64;
        for i in 0..=160_000 {
            let y = -(i as f32) * 5e-4;
            let exact = f64::from(y).exp();
            worst = worst.max(((f64::from(exp_nonpositive(y)) - exact) / exact).abs());
        }
        assert!(worst < 4e-7, "{worst}");
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert!(exp_nonpositive(f32::NEG_INFINITY) < 1.9e-35);
        assert!(exp_nonpositive(f32::NAN).is_nan());
    }

    #[test]
    fn exp_bounded_is_accurate() {
        let mut worst = 0.0f64;
        for i in -36_000..=36_000 {
            let y = i as f32 * 5e-4;
            let exact = f64::from(y).exp();
            worst = worst.max(((f64::from(exp_bounded(y)) - exact) / exact).abs());
        }
        assert!(worst < 4e-7, "{worst}");
    }
}
