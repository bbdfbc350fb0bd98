//! Per-sample conv gradients with their squared norms, kept as rows.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape};
use rayon::prelude::*;

use super::conv::conv_sample_gradient;
use super::f32_slice;
use super::kernels::sum_of_squares;
use super::Unfold;

/// `(G (B, Cout, L), x (B, C, H, W)) → (B, Cout·K + Cout + 1)`: each sample's gradient
/// (weight, then bias) followed by its squared norm. Kept by the tape so that the clipped
/// sum is one weighted row sum ([`WeightedRowSum`](super::WeightedRowSum)) instead of a second im2col and gemm
/// per sample.
pub(crate) struct ConvPerSampleRows(pub Unfold);

impl CustomOp2 for ConvPerSampleRows {
    fn name(&self) -> &'static str {
        "dp-conv-per-sample-rows"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let geometry = self.0;
        let (b, cout, l) = l1.shape().dims3()?;
        let (k, image) = (geometry.cols(), geometry.image_size());
        let (oh, ow) = geometry.out_size();
        if l != oh * ow || l2.shape().elem_count() != b * image {
            return Err(candle_core::Error::Msg(
                "conv per-sample rows: G and x disagree".into(),
            ));
        }
        let (g, x) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?);
        let width = cout * k + cout + 1;
        let mut rows = vec![0.0f32; b * width];
        rows.par_chunks_mut(width).enumerate().for_each_init(
            || (vec![0.0f32; l * k], vec![0.0f32; cout * l]),
            |(u, scaled), (i, row)| {
                geometry.unfold_sample(&x[i * image..][..image], u);
                let (gradient, norm) = row.split_at_mut(cout * k + cout);
                let (weight, bias) = gradient.split_at_mut(cout * k);
                conv_sample_gradient(
                    &g[i * cout * l..][..cout * l],
                    u,
                    (cout, l, k),
                    1.0,
                    scaled,
                    weight,
                    bias,
                    false,
                );
                norm[0] = sum_of_squares(gradient);
            },
        );
        Ok((CpuStorage::F32(rows), Shape::from((b, width))))
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    use super::ConvPerSampleRows;
    use crate::cpu::{ConvClippedSum, Unfold, WeightedRowSum};

    fn pseudo_random(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    /// The kept-rows path (per-sample rows with their norms, then a weighted row sum) and
    /// the recomputing path (clipped sums sample by sample) agree, and a zero factor keeps a
    /// non-finite row out of the sum.
    #[test]
    fn kept_rows_agree_with_recomputed_norms_and_sums() -> candle_core::Result<()> {
        let geometry = Unfold {
            channels: 3,
            height: 9,
            width: 7,
            kernel: 3,
            stride: 2,
            padding: 1,
        };
        let (b, cout) = (11, 5);
        let (oh, ow) = geometry.out_size();
        let l = oh * ow;
        let x = Tensor::from_vec(
            pseudo_random(b * geometry.image_size(), 1),
            (b, 3, 9, 7),
            &Device::Cpu,
        )?;
        let mut g_data = pseudo_random(b * cout * l, 2);
        let c_data: Vec<f32> = (0..b).map(|i| 0.1 * (i % 4) as f32).collect();
        let g = Tensor::from_vec(g_data.clone(), (b, cout, l), &Device::Cpu)?;
        let c = Tensor::from_vec(c_data.clone(), b, &Device::Cpu)?;

        let rows = g.apply_op2_no_bwd(&x, &ConvPerSampleRows(geometry))?;
        let width = cout * geometry.cols() + cout + 1;
        assert_eq!(rows.dims2()?, (b, width));
        let kept_norms = rows
            .narrow(1, width - 1, 1)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        // The norm column is the squared norm of the row's gradient part.
        let norms = rows
            .narrow(1, 0, width - 1)?
            .sqr()?
            .sum(1)?
            .to_vec1::<f32>()?;
        for (a, e) in kept_norms.iter().zip(&norms) {
            assert!((a - e).abs() <= 1e-5 * e.abs().max(1.0), "{a} vs {e}");
        }
        let kept_sum = rows
            .apply_op2_no_bwd(&c, &WeightedRowSum { trailing: 1 })?
            .to_vec1::<f32>()?;
        let sum = g
            .apply_op3_no_bwd(&x, &c, &ConvClippedSum(geometry))?
            .to_vec1::<f32>()?;
        assert_eq!(kept_sum.len(), sum.len());
        for (a, e) in kept_sum.iter().zip(&sum) {
            assert!((a - e).abs() <= 1e-5 * e.abs().max(1.0), "{a} vs {e}");
        }

        // Sample 0 has factor 0: a NaN in its gradient must not reach the sum.
        g_data[0] = f32::NAN;
        let g = Tensor::from_vec(g_data, (b, cout, l), &Device::Cpu)?;
        let rows = g.apply_op2_no_bwd(&x, &ConvPerSampleRows(geometry))?;
        let with_nan = rows
            .apply_op2_no_bwd(&c, &WeightedRowSum { trailing: 1 })?
            .to_vec1::<f32>()?;
        assert_eq!(c_data[0], 0.0);
        assert!(with_nan.iter().all(|v| v.is_finite()));
        Ok(())
    }
}
