//! `Σᵢ cᵢ Lᵢᵀ Rᵢ` over the examples of one dense use of a layer: its book-keeping clipped
//! sum. The narrower side is scaled by each example's factor into one buffer, then one
//! GEMM runs over all B·K rows — no scaled copy of the wider side, no transposed copy.

use candle_core::Tensor;
use rayon::prelude::*;

use super::matmul::weight_gradient;
use super::storage_f32;

/// `l` (B, K, m), `r` (B, K, n), contiguous f32 on the CPU, and one factor per example →
/// `Σᵢ cᵢ lᵢᵀ rᵢ` (m, n).
pub(crate) fn clipped_outer_sum(
    l: &Tensor,
    r: &Tensor,
    factors: &[f32],
) -> candle_core::Result<Tensor> {
    let ((b, k, m), (rb, rk, n)) = (l.dims3()?, r.dims3()?);
    if (b, k) != (rb, rk) || factors.len() != b {
        candle_core::bail!(
            "clipped outer sum: {:?} and {:?} with {} factors",
            l.dims(),
            r.dims(),
            factors.len()
        );
    }
    let (l, r) = (l.contiguous()?, r.contiguous()?);
    let (ls, rs) = (l.storage_and_layout(), r.storage_and_layout());
    let (ld, rd) = (storage_f32(&ls.0, ls.1)?, storage_f32(&rs.0, rs.1)?);
    let sum = if m <= n {
        weight_gradient(&scaled(ld, k * m, factors), rd, b * k, m, n)
    } else {
        weight_gradient(ld, &scaled(rd, k * n, factors), b * k, m, n)
    };
    Tensor::from_vec(sum, (m, n), l.device())
}

/// Each example's `per_example` values of `x` times its factor.
fn scaled(x: &[f32], per_example: usize, factors: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0f32; x.len()];
    out.par_chunks_mut(per_example.max(1))
        .zip(x.par_chunks(per_example.max(1)))
        .zip(factors.par_iter())
        .for_each(|((dst, src), &c)| {
            for (d, &v) in dst.iter_mut().zip(src) {
                *d = c * v;
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    use super::clipped_outer_sum;

    /// Against the definition, with either side the narrower.
    #[test]
    fn the_sum_equals_the_definition() {
        let (b, k) = (3, 4);
        for (m, n) in [(2, 5), (5, 2)] {
            let values = |len: usize, seed: usize| -> Vec<f32> {
                (0..len)
                    .map(|i| (((i + seed) * 37 % 97) as f32 - 48.0) / 31.0)
                    .collect()
            };
            let (lv, rv) = (values(b * k * m, 1), values(b * k * n, 2));
            let factors = [0.5f32, 0.0, 2.0];
            let l = Tensor::from_vec(lv.clone(), (b, k, m), &Device::Cpu).expect("l");
            let r = Tensor::from_vec(rv.clone(), (b, k, n), &Device::Cpu).expect("r");
            let got: Vec<f32> = clipped_outer_sum(&l, &r, &factors)
                .and_then(|t| t.flatten_all()?.to_vec1())
                .expect("sum");
            for p in 0..m {
                for q in 0..n {
                    let want: f32 = (0..b)
                        .map(|i| {
                            factors[i]
                                * (0..k)
                                    .map(|s| lv[(i * k + s) * m + p] * rv[(i * k + s) * n + q])
                                    .sum::<f32>()
                        })
                        .sum();
                    assert!(
                        (got[p * n + q] - want).abs() < 1e-5,
                        "({m}, {n}) at ({p}, {q})"
                    );
                }
            }
        }
    }
}
