//! The sum of each group of rows, (G, R, d) → (G, d): a per-example bias gradient
//! (the output gradients summed over an example's positions) and, with one group, the
//! summed bias gradient of a whole batch. Candle's `sum` over a middle axis walks the
//! tensor with strided index arithmetic; this is one contiguous pass per group.

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::f32_slice;
use super::kernels::{self, vectorized};

/// Rows per parallel task when there is a single group.
const ROWS_PER_TASK: usize = 256;

/// (G, R, d) → (G, d), no backward (a gradient computation).
struct RowSums;

/// `Σ_r x[g, r, :]` for every group, in row order within a task.
pub(crate) fn row_sums(x: &Tensor) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op1_no_bwd(&RowSums)
}

fn add_rows(rows: &[f32], d: usize, out: &mut [f32]) {
    vectorized(
        #[inline(always)]
        || kernels::add_rows(rows, d, out),
    );
}

impl CustomOp1 for RowSums {
    fn name(&self) -> &'static str {
        "dp-row-sums"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = f32_slice(storage, layout)?;
        let &[groups, rows, d] = layout.shape().dims() else {
            return Err(candle_core::Error::Msg("row sums: needs (G, R, d)".into()));
        };
        let mut out = vec![0.0f32; groups * d];
        if groups == 1 && rows > ROWS_PER_TASK && d > 0 {
            // One group (a batch's bias gradient): partial sums over row blocks, added in
            // block order.
            let partial: Vec<Vec<f32>> = x
                .par_chunks(ROWS_PER_TASK * d)
                .map(|block| {
                    let mut acc = vec![0.0f32; d];
                    add_rows(block, d, &mut acc);
                    acc
                })
                .collect();
            for p in partial {
                out.iter_mut().zip(p).for_each(|(o, v)| *o += v);
            }
        } else if d > 0 && rows > 0 {
            out.par_chunks_mut(d)
                .zip(x.par_chunks(rows * d))
                .for_each(|(o, group)| add_rows(group, d, o));
        }
        Ok((CpuStorage::F32(out), Shape::from((groups, d))))
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    /// Against Candle's sum over the middle axis: many groups, one group of many rows
    /// (the blocked path), and shapes that do not divide the block.
    #[test]
    fn row_sums_equal_candles_sum() {
        for (g, r, d) in [(5, 7, 3), (1, 1000, 17), (1, 3, 4), (2, 0, 3)] {
            let n = g * r * d;
            let v: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
                .collect();
            let x = Tensor::from_vec(v, (g, r, d), &Device::Cpu).expect("x");
            let ours: Vec<f32> = super::row_sums(&x)
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1())
                .expect("ours");
            let theirs: Vec<f32> = x
                .sum(1)
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1())
                .expect("candle");
            assert_eq!(ours.len(), theirs.len());
            for (a, b) in ours.iter().zip(&theirs) {
                assert!(
                    (a - b).abs() <= 1e-4 * b.abs().max(1.0),
                    "{g}×{r}×{d}: {a} vs {b}"
                );
            }
        }
    }
}
