//! The clipped sum of per-sample conv gradients, recomputed sample by sample.

use candle_core::{CpuStorage, CustomOp3, Layout, Shape};
use rayon::prelude::*;

use super::conv::conv_sample_gradient;
use super::f32_slice;
use super::Unfold;

/// Samples per task of [`ConvClippedSum`]; fixed, so that the clipped sum is reduced in
/// the same order whatever the number of threads (bit-reproducible).
const SAMPLES_PER_TASK: usize = 8;

/// `(G (B, Cout, L), x (B, C, H, W), c (B,)) → (Cout·K + Cout,)`: `Σᵢ cᵢ·∇ᵢ` of weight
/// and bias, accumulated per fixed chunk of samples, chunks summed in order.
pub(crate) struct ConvClippedSum(pub Unfold);

impl CustomOp3 for ConvClippedSum {
    fn name(&self) -> &'static str {
        "dp-conv-clipped-sum"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let geometry = self.0;
        let (b, cout, l) = l1.shape().dims3()?;
        let k = geometry.cols();
        let image = geometry.image_size();
        if l2.shape().elem_count() != b * image || l3.shape().elem_count() != b {
            return Err(candle_core::Error::Msg(
                "conv clipped sum: G, x and c disagree".into(),
            ));
        }
        let (g, x, c) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?, f32_slice(s3, l3)?);
        let size = cout * k + cout;
        let partials: Vec<Vec<f32>> = (0..b.div_ceil(SAMPLES_PER_TASK))
            .into_par_iter()
            .map(|chunk| {
                let mut acc = vec![0.0f32; size];
                let (mut u, mut scaled) = (vec![0.0f32; l * k], vec![0.0f32; cout * l]);
                let (weight, bias) = acc.split_at_mut(cout * k);
                for i in chunk * SAMPLES_PER_TASK..((chunk + 1) * SAMPLES_PER_TASK).min(b) {
                    geometry.unfold_sample(&x[i * image..][..image], &mut u);
                    conv_sample_gradient(
                        &g[i * cout * l..][..cout * l],
                        &u,
                        (cout, l, k),
                        c[i],
                        &mut scaled,
                        weight,
                        bias,
                        true,
                    );
                }
                acc
            })
            .collect();
        let mut total = vec![0.0f32; size];
        for partial in &partials {
            total.iter_mut().zip(partial).for_each(|(t, p)| *t += p);
        }
        Ok((CpuStorage::F32(total), Shape::from(size)))
    }
}
