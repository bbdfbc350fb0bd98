//! Ghost norms that cannot fail open: `‖Σₐ Lₐᵀ Rₐ‖²` per example from the Gram matrices
//! `Lₐ L_bᵀ` and `Rₐ R_bᵀ` (Li et al. 2022), as an upper bound that rounding cannot take
//! below the true squared norm.
//!
//! The exact value is a sum of K² products that can cancel: two positions with nearly
//! equal inputs and opposite output gradients have a squared norm near zero from terms
//! of size ‖l‖²‖r‖², and an `f32` evaluation can come out small, or negative (then
//! `sqrt` is NaN), so an example would be under-clipped or not clipped at all. Here the
//! Gram matrices are computed in `f32`, their products summed in `f64`, and the
//! worst-case rounding error added:
//!
//! * a dense Gram entry `⟨x_s, x_t⟩` over n coordinates is off by at most
//!   `γₙ‖x_s‖‖x_t‖`, `γₙ = nu / (1 − nu)`, `u = 2⁻²⁴` (the standard bound for a dot
//!   product in any summation order, Higham, *Accuracy and Stability of Numerical
//!   Algorithms*, 2nd ed., §3.1; docs/training.md cites it); one-hot Gram entries and
//!   gathered rows are exact;
//! * so each product of Gram entries is off by at most
//!   `(γ_L + γ_R + γ_Lγ_R)‖l_s‖‖l_t‖‖r_s‖‖r_t‖`, and the `f64` products and sum of
//!   N terms add at most `γ_N⁽⁶⁴⁾` of the sum of their magnitudes;
//! * the magnitudes sum to at most `A² = (Σₐ Σ_s ‖l_{a,s}‖‖r_{a,s}‖)²` (Cauchy–Schwarz).
//!
//! So `s = max(computed, 0) + (γ_L + γ_R + γ_Lγ_R + γ_N⁽⁶⁴⁾)(1 + 2⁻²⁰)·A²` is never below the
//! exact squared norm of the `f32` factors. The gradient the clipped sum is built from is
//! itself an `f32` product over the K positions, off by at most `γ_K·A` in norm, so the
//! value returned is `(√s + γ_K·A)²`, rounded up to `f32`: it bounds both. Where
//! the terms cancel the bound is dominated by the error term and the example is clipped
//! harder than it needs to be (fail-closed); elsewhere the slack is a few parts in 10⁵
//! for the layers of this workspace's transformer. (On a GPU whose `f32` matmul runs in
//! TF32 the `u` above does not hold; Candle's default is full `f32`.)

use candle_core::{DType, Tensor};

use super::left_factor::Left;
use crate::cpu;
use crate::error::{Error, Result};

/// Unit roundoff of `f32` and of `f64`.
const U32: f64 = 1.0 / (1u64 << 24) as f64;
const U64: f64 = 1.0 / (1u64 << 53) as f64;

/// `γₙ = nu / (1 − nu)`: the relative error bound of an n-term dot product.
fn gamma(n: usize, u: f64) -> f64 {
    let nu = n as f64 * u;
    if nu >= 0.5 {
        return f64::INFINITY;
    }
    nu / (1.0 - nu)
}

/// `X Yᵀ` per example (B, Kₓ, K_y); one row each (a Linear on (B, in)) is a row dot
/// product, not B one-by-one matmuls.
pub(super) fn gram(x: &Tensor, y: &Tensor) -> Result<Tensor> {
    if x.dim(1)? == 1 && y.dim(1)? == 1 {
        return Ok((x * y)?.sum_keepdim(2)?);
    }
    Ok(x.matmul(&y.transpose(1, 2)?)?)
}

/// `Lₐ L_bᵀ` per example (B, Kₐ, K_b), and its entries' error bound γ (relative to the
/// product of the rows' norms): γ over the dense width, 0 where a side is one-hot (the
/// entries are exact 0/1 or gathered values).
fn left_gram(a: &Left, b: &Left) -> Result<(Tensor, f64)> {
    Ok(match (a, b) {
        (Left::Dense(x), Left::Dense(y)) => (gram(x, y)?, gamma(x.dim(2)?, U32)),
        (Left::OneHot { ids: x, .. }, Left::OneHot { ids: y, .. }) => (
            x.unsqueeze(2)?
                .broadcast_eq(&y.unsqueeze(1)?)?
                .to_dtype(DType::F32)?,
            0.0,
        ),
        // [t, s] = Dense[s, idₜ]: gather the dense rows at the ids.
        (Left::OneHot { ids, .. }, Left::Dense(d)) => {
            let (b, ks, _) = d.dims3()?;
            let kt = ids.dim(1)?;
            let index = ids.unsqueeze(1)?.broadcast_as((b, ks, kt))?.contiguous()?;
            (d.contiguous()?.gather(&index, 2)?.transpose(1, 2)?, 0.0)
        }
        (Left::Dense(_), Left::OneHot { .. }) => {
            let (g, e) = left_gram(b, a)?;
            (g.transpose(1, 2)?, e)
        }
    })
}

/// `‖x_s‖` of each row (B, K) in `f64`; 1 for one-hot rows.
fn row_norms(left: &Left) -> Result<Tensor> {
    Ok(match left {
        Left::Dense(x) => x.to_dtype(DType::F64)?.sqr()?.sum(2)?.sqrt()?,
        Left::OneHot { ids, .. } => Tensor::ones(ids.dims2()?, DType::F64, ids.device())?,
    })
}

/// What the bound is computed from: per example the `f64` sum of the Gram products and
/// `A = Σₐ Σ_s ‖l_{a,s}‖‖r_{a,s}‖`; the worst relative error of a product of Gram entries,
/// the number of products, and the positions K.
struct Sums {
    total: Tensor,
    magnitude: Tensor,
    worst: f64,
    terms: usize,
    positions: usize,
}

/// The rigorous upper bound (B,) of `Σₐ Σ_b ⟨Lₐ L_bᵀ, Rₐ R_bᵀ⟩`, the squared norm of
/// `Σₐ Lₐᵀ Rₐ` per example (module docs).
pub(crate) fn ghost_norms(outers: &[(&Left, &Tensor)]) -> Result<Tensor> {
    let sums = match outers {
        [(Left::Dense(l), r)] if cpu::applies(l) && cpu::applies(r) => one_use_on_cpu(l, r)?,
        [(Left::OneHot { ids, .. }, r)] if ids.device().is_cpu() && cpu::applies(r) => {
            one_hot_on_cpu(ids, r)?
        }
        _ => composed_sums(outers)?,
    };
    let slack =
        (sums.worst + gamma(2 * sums.terms + outers.len(), U64)) * (1.0 + 1.0 / (1 << 20) as f64);
    let exact_bound = (sums.total.relu()? + (sums.magnitude.sqr()? * slack)?)?;
    let computed_bound =
        (exact_bound.sqrt()? + (&sums.magnitude * gamma(sums.positions, U32))?)?.sqr()?;
    // Rounded up: f64 → f32 rounds to nearest (relative error ≤ 2⁻²⁴).
    Ok((computed_bound * (1.0 + 1.0 / (1 << 22) as f64))?.to_dtype(DType::F32)?)
}

/// [`Sums`] of one dense use (a Linear applied once) in one CPU pass per example.
fn one_use_on_cpu(l: &Tensor, r: &Tensor) -> Result<Sums> {
    let (b, k, m) = l.dims3()?;
    let n = r.dim(2)?;
    let (total, magnitude) = cpu::ghost_sums(l, r)?;
    let (gamma_l, gamma_r) = (gamma(m, U32), gamma(n, U32));
    Ok(Sums {
        total: Tensor::from_vec(total, b, l.device())?,
        magnitude: Tensor::from_vec(magnitude, b, l.device())?,
        worst: gamma_l + gamma_r + gamma_l * gamma_r,
        terms: k * k,
        positions: k,
    })
}

/// [`Sums`] of one one-hot use (an embedding looked up once) in one CPU pass per example,
/// bounded as the composed form bounds it (one-hot Gram entries exact, the dense side's
/// `γₙ`; the rows here are summed in `f64`, well inside that).
fn one_hot_on_cpu(ids: &Tensor, r: &Tensor) -> Result<Sums> {
    let (b, k, n) = r.dims3()?;
    let (total, magnitude) = cpu::one_hot_sums(ids, r)?;
    Ok(Sums {
        total: Tensor::from_vec(total, b, r.device())?,
        magnitude: Tensor::from_vec(magnitude, b, r.device())?,
        worst: gamma(n, U32),
        terms: k * k,
        positions: k,
    })
}

/// [`Sums`] of any uses from Candle ops, on any device.
fn composed_sums(outers: &[(&Left, &Tensor)]) -> Result<Sums> {
    let mut total: Option<Tensor> = None;
    let mut magnitude: Option<Tensor> = None;
    let (mut worst, mut terms, mut positions) = (0.0f64, 0usize, 0usize);
    for (a, (la, ra)) in outers.iter().enumerate() {
        positions += ra.dim(1)?;
        let a_norms = (row_norms(la)? * ra.to_dtype(DType::F64)?.sqr()?.sum(2)?.sqrt()?)?;
        let a_sum = a_norms.sum(1)?;
        magnitude = Some(match magnitude {
            None => a_sum,
            Some(m) => (m + a_sum)?,
        });
        for (b, (lb, rb)) in outers.iter().enumerate().skip(a) {
            let (lg, gamma_l) = left_gram(la, lb)?;
            let gamma_r = gamma(ra.dim(2)?, U32);
            worst = worst.max(gamma_l + gamma_r + gamma_l * gamma_r);
            terms += lg.dim(1)? * lg.dim(2)?;
            let rg = gram(ra, rb)?.to_dtype(DType::F64)?;
            let term = (lg.to_dtype(DType::F64)? * rg)?.flatten_from(1)?.sum(1)?;
            let term = if a == b { term } else { (term * 2.0)? };
            total = Some(match total {
                None => term,
                Some(t) => (t + term)?,
            });
        }
    }
    let missing = || Error::invalid_model("DP layer", "a parameter without contributions");
    Ok(Sums {
        total: total.ok_or_else(missing)?,
        magnitude: magnitude.ok_or_else(missing)?,
        worst,
        terms,
        positions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn host(t: &Tensor) -> Vec<f64> {
        t.to_vec1::<f64>().expect("host")
    }

    /// A CPU pass's sums against the composed ones: the same bound's terms, the Gram
    /// products within the f32 rounding of the Gram entries, the magnitudes within f64's.
    fn assert_same_sums(fast: &Sums, composed: &Sums) {
        assert_eq!(
            (fast.worst, fast.terms, fast.positions),
            (composed.worst, composed.terms, composed.positions)
        );
        let mag = host(&fast.magnitude);
        let totals = host(&fast.total).into_iter().zip(host(&composed.total));
        for ((f, c), m) in totals.zip(&mag) {
            assert!((f - c).abs() <= 1e-5 * m * m, "total {f} vs {c}");
        }
        for (f, c) in mag.iter().zip(host(&composed.magnitude)) {
            assert!((f - c).abs() <= 1e-12 * c, "magnitude {f} vs {c}");
        }
    }

    /// The one-pass CPU sums equal the composed ones: the Gram products agree to the f32
    /// rounding of the Gram entries, the magnitudes to f64 rounding; a NaN stays NaN.
    #[test]
    fn the_cpu_pass_gives_the_composed_sums() -> Result<()> {
        let device = Device::Cpu;
        let l = Tensor::randn(0f32, 1.0, (3, 5, 7), &device)?;
        let r = Tensor::randn(0f32, 1.0, (3, 5, 4), &device)?;
        let left = Left::Dense(l.clone());
        assert_same_sums(&one_use_on_cpu(&l, &r)?, &composed_sums(&[(&left, &r)])?);
        let mut values = l.flatten_all()?.to_vec1::<f32>()?;
        values[0] = f32::NAN;
        let poisoned = Tensor::from_vec(values, (3, 5, 7), &device)?;
        let sums = one_use_on_cpu(&poisoned, &r)?;
        assert!(host(&sums.total)[0].is_nan() && host(&sums.total)[1].is_finite());
        Ok(())
    }

    /// The one-hot CPU pass (rows summed by index) equals the composed Gram form, with
    /// repeated, distinct and single indices; a NaN stays NaN.
    #[test]
    fn the_one_hot_cpu_pass_gives_the_composed_sums() -> Result<()> {
        let device = Device::Cpu;
        let ids: Vec<u32> = vec![3, 1, 3, 3, 0, 1, 2, 4, 5, 6, 7, 7, 7, 7, 7];
        let ids = Tensor::from_vec(ids, (3, 5), &device)?;
        let r = Tensor::randn(0f32, 1.0, (3, 5, 6), &device)?;
        let left = Left::OneHot {
            ids: ids.clone(),
            width: 8,
        };
        assert_same_sums(&one_hot_on_cpu(&ids, &r)?, &composed_sums(&[(&left, &r)])?);
        let mut values = r.flatten_all()?.to_vec1::<f32>()?;
        values[0] = f32::NAN;
        let poisoned = Tensor::from_vec(values, (3, 5, 6), &device)?;
        let sums = one_hot_on_cpu(&ids, &poisoned)?;
        assert!(host(&sums.total)[0].is_nan() && host(&sums.total)[1].is_finite());
        Ok(())
    }
}
