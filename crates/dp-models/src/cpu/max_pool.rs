//! Max pooling on NCHW, with its backward.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::f32_slice;

/// Max pooling on NCHW, any kernel and stride; the first maximum in a window wins
/// (PyTorch's order), and the backward sends the gradient to it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MaxPool {
    pub kernel: usize,
    pub stride: usize,
}

impl MaxPool {
    /// Calls `f(output index, input index of the window's first maximum)` per output.
    fn argmax(&self, x: &[f32], h: usize, w: usize, mut f: impl FnMut(usize, usize)) {
        let (k, s) = (self.kernel, self.stride);
        let (oh, ow) = ((h - k) / s + 1, (w - k) / s + 1);
        for oy in 0..oh {
            let rows = &x[oy * s * w..(oy * s + k) * w];
            for ox in 0..ow {
                let (mut best, mut value) = (ox * s, rows[ox * s]);
                for ky in 0..k {
                    let window = &rows[ky * w + ox * s..ky * w + ox * s + k];
                    for (kx, &v) in window.iter().enumerate() {
                        if v > value {
                            (best, value) = (ky * w + ox * s + kx, v);
                        }
                    }
                }
                f(oy * ow + ox, oy * s * w + best);
            }
        }
    }
}

impl CustomOp1 for MaxPool {
    fn name(&self) -> &'static str {
        "dp-max-pool"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = f32_slice(storage, layout)?;
        let (b, c, h, w) = layout.shape().dims4()?;
        if h < self.kernel || w < self.kernel {
            return Err(candle_core::Error::Msg(format!(
                "pool window {} exceeds the input {h}×{w}",
                self.kernel
            )));
        }
        let (oh, ow) = (
            (h - self.kernel) / self.stride + 1,
            (w - self.kernel) / self.stride + 1,
        );
        let mut out = vec![0.0f32; b * c * oh * ow];
        // One task per sample (a task per channel plane would be too small to pay off).
        out.par_chunks_mut(c * oh * ow)
            .zip(x.par_chunks(c * h * w))
            .for_each(|(out, x)| {
                for (out, x) in out.chunks_mut(oh * ow).zip(x.chunks(h * w)) {
                    self.argmax(x, h, w, |o, i| out[o] = x[i]);
                }
            });
        Ok((CpuStorage::F32(out), Shape::from((b, c, oh, ow))))
    }

    fn bwd(
        &self,
        arg: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(arg.contiguous()?.apply_op2_no_bwd(
            &grad_res.contiguous()?,
            &MaxPoolBackward(*self),
        )?))
    }
}

/// `d input` of [`MaxPool`] from its input and `d output` (the direct backward).
pub(crate) fn max_pool_backward(
    pool: MaxPool,
    input: &Tensor,
    grad: &Tensor,
) -> candle_core::Result<Tensor> {
    input
        .contiguous()?
        .apply_op2_no_bwd(&grad.contiguous()?, &MaxPoolBackward(pool))
}

/// `(input, d output) → d input` of [`MaxPool`].
struct MaxPoolBackward(MaxPool);

impl CustomOp2 for MaxPoolBackward {
    fn name(&self) -> &'static str {
        "dp-max-pool-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, g) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?);
        let (b, c, h, w) = l1.shape().dims4()?;
        let (_, _, oh, ow) = l2.shape().dims4()?;
        let mut dx = vec![0.0f32; b * c * h * w];
        dx.par_chunks_mut(c * h * w)
            .zip(x.par_chunks(c * h * w).zip(g.par_chunks(c * oh * ow)))
            .for_each(|(dx, (x, g))| {
                for (dx, (x, g)) in dx
                    .chunks_mut(h * w)
                    .zip(x.chunks(h * w).zip(g.chunks(oh * ow)))
                {
                    self.0.argmax(x, h, w, |o, i| dx[i] += g[o]);
                }
            });
        Ok((CpuStorage::F32(dx), l1.shape().clone()))
    }
}
