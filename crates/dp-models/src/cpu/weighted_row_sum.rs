//! A weighted sum of per-sample rows: the clipped sum from kept rows.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape};
use rayon::prelude::*;

use super::f32_slice;
use super::kernels::vectorized;

/// Columns per parallel task of [`WeightedRowSum`].
const COLUMNS_PER_TASK: usize = 256;

/// `(rows (B, W), c (B,)) → (W − trailing,)`: `Σᵢ cᵢ·rowsᵢ` over all but the last
/// `trailing` columns (1 for the norm column of
/// [`ConvPerSampleRows`](super::ConvPerSampleRows), 0 for kept per-sample gradients).
/// Rows with `cᵢ = 0` are skipped, not multiplied, so a non-finite gradient with a zero
/// factor cannot turn the sum into NaN. Parallel over columns, samples summed in order:
/// the same bits whatever the number of threads or the vector unit.
pub(crate) struct WeightedRowSum {
    /// Columns at the end of each row left out of the sum.
    pub(crate) trailing: usize,
}

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
        if l2.shape().elem_count() != b || width < self.trailing {
            return Err(candle_core::Error::Msg(
                "weighted row sum: rows and factors disagree".into(),
            ));
        }
        let (rows, c) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?);
        let mut sum = vec![0.0f32; width - self.trailing];
        sum.par_chunks_mut(COLUMNS_PER_TASK)
            .enumerate()
            .for_each(|(task, out)| {
                let start = task * COLUMNS_PER_TASK;
                for (row, &factor) in rows.chunks(width).zip(c) {
                    if factor != 0.0 {
                        add_scaled(out, &row[start..start + out.len()], factor);
                    }
                }
            });
        Ok((CpuStorage::F32(sum), Shape::from(width - self.trailing)))
    }
}

/// `out += factor·row`, on the widest vector unit (no fused multiply-add: the same bits).
fn add_scaled(out: &mut [f32], row: &[f32], factor: f32) {
    vectorized(
        #[inline(always)]
        || out.iter_mut().zip(row).for_each(|(o, &v)| *o += factor * v),
    );
}
