//! The two sums a ghost norm is bounded from, for one use of a layer, in one pass per
//! example: for a dense use the Gram matrices by GEMM in a K × K tile each, their
//! products summed in `f64`; for a one-hot use (an embedding) the rows summed by index;
//! and the rows' norms (`nn::ghost` holds the bound and its proof).

use candle_core::Tensor;
use rayon::prelude::*;

use super::kernels::{matmul, sum_of_squares_f64, vectorized, Mat};
use super::storage_f32;

/// Per example of `l` (B, K, m) and `r` (B, K, n), contiguous f32 on the CPU:
/// `Σ_{s,t} ⟨l_s, l_t⟩⟨r_s, r_t⟩` (Gram entries in `f32`, products and sum in `f64`)
/// and `Σ_s ‖l_s‖‖r_s‖` (in `f64`).
pub(crate) fn ghost_sums(l: &Tensor, r: &Tensor) -> candle_core::Result<(Vec<f64>, Vec<f64>)> {
    let ((b, k, m), (rb, rk, n)) = (l.dims3()?, r.dims3()?);
    if (b, k) != (rb, rk) {
        candle_core::bail!(
            "ghost sums: {:?} and {:?} differ in examples or rows",
            l.dims(),
            r.dims()
        );
    }
    let (l, r) = (l.contiguous()?, r.contiguous()?);
    let (ls, rs) = (l.storage_and_layout(), r.storage_and_layout());
    let (ld, rd) = (storage_f32(&ls.0, ls.1)?, storage_f32(&rs.0, rs.1)?);
    let sums: Vec<(f64, f64)> = (0..b)
        .into_par_iter()
        .map_init(
            || (vec![0.0f32; k * k], vec![0.0f32; k * k]),
            |(gl, gr), i| {
                let (li, ri) = (
                    &ld[i * k * m..(i + 1) * k * m],
                    &rd[i * k * n..(i + 1) * k * n],
                );
                gram(li, k, m, gl);
                gram(ri, k, n, gr);
                let total = gl
                    .iter()
                    .zip(gr.iter())
                    .map(|(&a, &c)| f64::from(a) * f64::from(c))
                    .sum();
                let magnitude = (0..k)
                    .map(|s| norm(&li[s * m..(s + 1) * m]) * norm(&ri[s * n..(s + 1) * n]))
                    .sum();
                (total, magnitude)
            },
        )
        .collect();
    Ok(sums.into_iter().unzip())
}

/// `x xᵀ` (K × K) of the rows of `x` (K × w) into `g`.
fn gram(x: &[f32], k: usize, w: usize, g: &mut [f32]) {
    matmul(k, k, w, g, k, false, Mat::rows(x, w), Mat::transposed(x, w));
}

/// Per example of one-hot rows `ids` (B, K) (`u32`) and `r` (B, K, n), contiguous f32 on
/// the CPU: `Σ_{s,t} [ids_s = ids_t]⟨r_s, r_t⟩` — the one-hot Gram sum, computed as
/// `Σ_v ‖Σ_{t: ids_t = v} r_t‖²` with the rows of each index summed in `f64` (K·n work
/// instead of the Gram form's K²·n) — and `Σ_s ‖r_s‖` (in `f64`).
pub(crate) fn one_hot_sums(ids: &Tensor, r: &Tensor) -> candle_core::Result<(Vec<f64>, Vec<f64>)> {
    let ((b, k), (rb, rk, n)) = (ids.dims2()?, r.dims3()?);
    if (b, k) != (rb, rk) {
        candle_core::bail!(
            "one-hot ghost sums: {:?} and {:?} differ in examples or rows",
            ids.dims(),
            r.dims()
        );
    }
    let ids = ids.flatten_all()?.to_vec1::<u32>()?;
    let r = r.contiguous()?;
    let rs = r.storage_and_layout();
    let rd = storage_f32(&rs.0, rs.1)?;
    let sums: Vec<(f64, f64)> = (0..b)
        .into_par_iter()
        .map_init(
            || (Vec::with_capacity(k), vec![0.0f64; n]),
            |(order, group), i| {
                let (ids, ri) = (&ids[i * k..(i + 1) * k], &rd[i * k * n..(i + 1) * k * n]);
                order.clear();
                order.extend(0..k);
                order.sort_unstable_by_key(|&t| ids[t]);
                let mut total = 0.0;
                for run in order.chunk_by(|&s, &t| ids[s] == ids[t]) {
                    if let [t] = run {
                        total += norm(&ri[t * n..(t + 1) * n]).powi(2);
                        continue;
                    }
                    group.fill(0.0);
                    for &t in run {
                        let row = &ri[t * n..(t + 1) * n];
                        group
                            .iter_mut()
                            .zip(row)
                            .for_each(|(g, &v)| *g += f64::from(v));
                    }
                    total += group.iter().map(|g| g * g).sum::<f64>();
                }
                let magnitude = (0..k).map(|s| norm(&ri[s * n..(s + 1) * n])).sum();
                (total, magnitude)
            },
        )
        .collect();
    Ok(sums.into_iter().unzip())
}

/// `‖v‖` in `f64`.
fn norm(v: &[f32]) -> f64 {
    vectorized(
        #[inline(always)]
        || sum_of_squares_f64(v),
    )
    .sqrt()
}
