//! A weighted sum of per-sample rows: the clipped sum from kept rows.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape};
use rayon::prelude::*;

use super::f32_slice;

/// Columns per parallel task of [`WeightedRowSum`].
const COLUMNS_PER_TASK: usize = 256;

/// `(rows (B, W), c (B,)) → (W − 1,)`: `Σᵢ cᵢ·rowsᵢ` over all but the last column (the
/// norm of [`ConvPerSampleRows`](super::ConvPerSampleRows)). Rows with `cᵢ = 0` are skipped, not multiplied, so a
/// non-finite gradient with a zero factor cannot turn the sum into NaN. Parallel over
/// columns, samples summed in order: the same bits whatever the number of threads.
pub(crate) struct WeightedRowSum;

impl CustomOp2 for WeightedRowSum {
    fn name(&self) -> &'static str {
        "dp-weighted-row-sum"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (b, width) = l1.shape().dims2()?;
        if l2.shape().elem_count() != b || width == 0 {
            return Err(candle_core::Error::Msg(
                "weighted row sum: rows and factors disagree".into(),
            ));
        }
        let (rows, c) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?);
        let mut sum = vec![0.0f32; width - 1];
        sum.par_chunks_mut(COLUMNS_PER_TASK)
            .enumerate()
            .for_each(|(task, out)| {
                let start = task * COLUMNS_PER_TASK;
                for (row, &factor) in rows.chunks(width).zip(c) {
                    if factor != 0.0 {
                        let row = &row[start..start + out.len()];
                        out.iter_mut().zip(row).for_each(|(o, &v)| *o += factor * v);
                    }
                }
            });
        Ok((CpuStorage::F32(sum), Shape::from(width - 1)))
    }
}
