//! Per-sample gradients of a parameter's dense outer-product contributions, each
//! example's squared norm taken while its gradient is still in cache.

use std::mem::MaybeUninit;

use candle_core::Tensor;
use rayon::prelude::*;

use super::kernels::{matmul, matmul_uninit, sum_of_squares_f64, upper_f32, vectorized, Mat};
use super::storage_f32;

/// The uses of one parameter, each `(l (B, Kₐ, m), r (B, Kₐ, n))` f32 on the CPU →
/// `Σₐ lᵢₐᵀ rᵢₐ` per example (B, m·n) and its squared norm per example. The norm is the
/// `f64` sum of squares of the `f32` gradient returned (the values the clipped sum is
/// built from), raised by the bound of its summation error and rounded up to `f32`
/// ([`upper_f32`]), so it never understates the norm of what is summed.
pub(crate) fn outer_per_sample(
    pairs: &[(&Tensor, &Tensor)],
) -> candle_core::Result<(Tensor, Tensor)> {
    let Some((first_l, first_r)) = pairs.first() else {
        candle_core::bail!("per-sample outer products: no contributions");
    };
    let (b, _, m) = first_l.dims3()?;
    let n = first_r.dim(2)?;
    let mut views = Vec::with_capacity(pairs.len());
    for (l, r) in pairs {
        let ((lb, lk, lm), (rb, rk, rn)) = (l.dims3()?, r.dims3()?);
        if (lb, lm, rb, rk, rn) != (b, m, b, lk, n) {
            candle_core::bail!(
                "per-sample outer products: {:?} and {:?} do not make ({b}, {m}, {n})",
                l.dims(),
                r.dims()
            );
        }
        views.push((l.contiguous()?, r.contiguous()?, lk));
    }
    let guards: Vec<_> = views
        .iter()
        .map(|(l, r, k)| (l.storage_and_layout(), r.storage_and_layout(), *k))
        .collect();
    let slices = guards
        .iter()
        .map(|(ls, rs, k)| Ok((storage_f32(&ls.0, ls.1)?, storage_f32(&rs.0, rs.1)?, *k)))
        .collect::<candle_core::Result<Vec<_>>>()?;
    let width = m * n;
    let mut grads: Vec<f32> = Vec::with_capacity(b * width);
    let mut squared = vec![0.0f32; b];
    grads.spare_capacity_mut()[..b * width]
        .par_chunks_mut(width.max(1))
        .zip(squared.par_iter_mut())
        .enumerate()
        .for_each(|(i, (chunk, sq))| {
            // The first use writes the example's gradient (no zero fill: a `vec![0.0; …]`
            // would be one serial memset of the whole batch's gradients), the others add.
            let (lhs, rhs, k) = example(slices[0], i, (m, n));
            let dst = product_into(chunk, (m, n, k), lhs, rhs);
            for other in &slices[1..] {
                let (lhs, rhs, k) = example(*other, i, (m, n));
                matmul(m, n, k, dst, n, true, lhs, rhs);
            }
            let sum = vectorized(
                #[inline(always)]
                || sum_of_squares_f64(dst),
            );
            *sq = upper_f32(sum, dst.len());
        });
    // SAFETY: the chunks above cover the first `b·width` entries exactly (`width` each,
    // `b` of them; for `width = 0` there is nothing to cover) and `product_into` initialised
    // every entry of each.
    #[allow(unsafe_code)]
    unsafe {
        grads.set_len(b * width)
    };
    let device = first_l.device();
    Ok((
        Tensor::from_vec(grads, (b, width), device)?,
        Tensor::from_vec(squared, b, device)?,
    ))
}

/// Example `i`'s factors `lᵢᵀ` (m × K) and `rᵢ` (K × n) of one use `(l, r, K)`.
fn example<'a>(
    (l, r, k): (&'a [f32], &'a [f32], usize),
    i: usize,
    (m, n): (usize, usize),
) -> (Mat<'a>, Mat<'a>, usize) {
    let (li, ri) = (&l[i * k * m..][..k * m], &r[i * k * n..][..k * n]);
    (Mat::transposed(li, m), Mat::rows(ri, n), k)
}

/// `lhs (m×k) · rhs (k×n)` written into `chunk` ([`matmul_uninit`] asserts that it is
/// m·n long and writes every entry), returned as initialised floats.
fn product_into<'a>(
    chunk: &'a mut [MaybeUninit<f32>],
    (m, n, k): (usize, usize, usize),
    lhs: Mat<'_>,
    rhs: Mat<'_>,
) -> &'a mut [f32] {
    matmul_uninit(m, n, k, chunk, lhs, rhs);
    // SAFETY: `matmul_uninit` returned, so it wrote every entry of `chunk`, and
    // `MaybeUninit<f32>` has the layout of `f32`.
    #[allow(unsafe_code)]
    unsafe {
        &mut *(chunk as *mut [MaybeUninit<f32>] as *mut [f32])
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    use super::outer_per_sample;

    /// Two uses of one parameter against the definition, and norms never below the f64
    /// norm of the returned gradients.
    #[test]
    fn gradients_and_norms_equal_the_definition() -> candle_core::Result<()> {
        let (b, m, n) = (3, 4, 5);
        let values = |len: usize, seed: usize| -> Vec<f32> {
            (0..len)
                .map(|i| (((i * 7 + seed) * 37 % 97) as f32 - 48.0) / 31.0)
                .collect()
        };
        let uses = [(2usize, 1usize), (3, 2)];
        let tensors: Vec<(Vec<f32>, Vec<f32>, usize)> = uses
            .iter()
            .map(|&(k, seed)| (values(b * k * m, seed), values(b * k * n, seed + 10), k))
            .collect();
        let pairs: Vec<(Tensor, Tensor)> = tensors
            .iter()
            .map(|(l, r, k)| {
                Ok((
                    Tensor::from_vec(l.clone(), (b, *k, m), &Device::Cpu)?,
                    Tensor::from_vec(r.clone(), (b, *k, n), &Device::Cpu)?,
                ))
            })
            .collect::<candle_core::Result<_>>()?;
        let refs: Vec<(&Tensor, &Tensor)> = pairs.iter().map(|(l, r)| (l, r)).collect();
        let (grads, squared) = outer_per_sample(&refs)?;
        let (grads, squared) = (grads.to_vec2::<f32>()?, squared.to_vec1::<f32>()?);
        for i in 0..b {
            for p in 0..m {
                for q in 0..n {
                    let want: f32 = tensors
                        .iter()
                        .map(|(l, r, k)| {
                            (0..*k)
                                .map(|s| l[(i * k + s) * m + p] * r[(i * k + s) * n + q])
                                .sum::<f32>()
                        })
                        .sum();
                    let got = grads[i][p * n + q];
                    assert!((got - want).abs() < 1e-5, "example {i} at ({p}, {q})");
                }
            }
            let exact: f64 = grads[i].iter().map(|&v| f64::from(v).powi(2)).sum();
            assert!(f64::from(squared[i]) >= exact, "example {i}");
            assert!(f64::from(squared[i]) <= exact * (1.0 + 1e-6), "example {i}");
        }
        Ok(())
    }
}
