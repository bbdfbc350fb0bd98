//! Scaled dot-product attention, `softmax(s·QKᵀ [+ causal mask]) V`, in one op each way.
//!
//! The inputs are (N, T, H·w): N sequences of T positions whose H heads of width w sit side
//! by side in each row, which is how a projection (B, T, d) leaves them — the heads are
//! read as strided views, so no head split or merge is copied. Per head, the T × T
//! probabilities live in a scratch tile and are recomputed in the backward instead of
//! kept (flash attention's trade; the composed form keeps several B·H·T·T tensors for its
//! backward and adds a zero-filled gradient per op).

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::kernels::{exp_nonpositive, matmul, vectorized, Mat};
use super::{f32_slice, storage_f32};

/// Attention of q, k, v (…, T, H·w), contiguous and of one shape: `scale` multiplies the
/// scores, `causal` lets position i attend to positions ≤ i only.
pub(crate) struct Attention {
    pub heads: usize,
    pub scale: f32,
    pub causal: bool,
}

/// The geometry of one sequence: T positions, rows of d = H·w.
#[derive(Clone, Copy)]
struct Geometry {
    t: usize,
    d: usize,
    w: usize,
}

impl Geometry {
    fn size(self) -> usize {
        self.t * self.d
    }
}

/// Head `h` of a sequence (T × w, row stride d), or its transpose.
fn head(data: &[f32], g: Geometry, h: usize, transposed: bool) -> Mat<'_> {
    tile(&data[h * g.w..], g.d, transposed)
}

/// Rows `stride` apart (a T × T scratch tile: stride T), or their transpose.
fn tile(data: &[f32], stride: usize, transposed: bool) -> Mat<'_> {
    if transposed {
        Mat::transposed(data, stride)
    } else {
        Mat::rows(data, stride)
    }
}

/// Lanes of the row reductions in [`softmax`].
const LANES: usize = 16;

/// `row ← softmax(scale·row)` in place, its maximum and sum in [`LANES`] lanes (so the
/// loops vectorise) and the exponentials by [`exp_nonpositive`].
#[inline(always)]
fn softmax(row: &mut [f32], scale: f32) {
    let mut maxima = [f32::NEG_INFINITY; LANES];
    for chunk in row.chunks(LANES) {
        for (m, &s) in maxima.iter_mut().zip(chunk) {
            *m = m.max(s);
        }
    }
    let max = maxima.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sums = [0.0f32; LANES];
    for chunk in row.chunks_mut(LANES) {
        for (acc, s) in sums.iter_mut().zip(chunk) {
            *s = exp_nonpositive(scale * (*s - max));
            *acc += *s;
        }
    }
    let sum: f32 = sums.iter().sum();
    row.iter_mut().for_each(|s| *s /= sum);
}

impl Attention {
    fn geometry(&self, layout: &Layout) -> candle_core::Result<Geometry> {
        match layout.dims() {
            [.., t, d] if *t > 0 && self.heads > 0 && d.is_multiple_of(self.heads) => {
                Ok(Geometry {
                    t: *t,
                    d: *d,
                    w: d / self.heads,
                })
            }
            dims => candle_core::bail!(
                "attention: q, k, v must be (…, T, H·w) with {} heads, got {dims:?}",
                self.heads
            ),
        }
    }

    /// The probabilities P (T × T) of head `h` into `p`: row i is the softmax of
    /// `scale·qᵢ·kⱼ` over the positions it attends to, 0 elsewhere.
    fn probabilities(&self, g: Geometry, h: usize, q: &[f32], k: &[f32], p: &mut [f32]) {
        let t = g.t;
        matmul(
            t,
            t,
            g.w,
            p,
            t,
            false,
            head(q, g, h, false),
            head(k, g, h, true),
        );
        vectorized(
            #[inline(always)]
            || {
                for (i, row) in p.chunks_mut(t).enumerate() {
                    let seen = if self.causal { i + 1 } else { t };
                    let (live, masked) = row.split_at_mut(seen);
                    masked.fill(0.0);
                    softmax(live, self.scale);
                }
            },
        );
    }

    /// One sequence's output: every head's `P V` into its columns of `o`.
    fn sequence(
        &self,
        g: Geometry,
        (q, k, v): (&[f32], &[f32], &[f32]),
        o: &mut [f32],
        p: &mut [f32],
    ) {
        for h in 0..self.heads {
            self.probabilities(g, h, q, k, p);
            let (t, w) = (g.t, g.w);
            matmul(
                t,
                w,
                t,
                &mut o[h * w..],
                g.d,
                false,
                tile(p, t, false),
                head(v, g, h, false),
            );
        }
    }

    /// One sequence's dQ, dK, dV from its inputs and output gradient `gr`; `p` and `ds`
    /// are T × T scratch.
    fn sequence_backward(
        &self,
        g: Geometry,
        (q, k, v, gr): (&[f32], &[f32], &[f32], &[f32]),
        (dq, dk, dv): (&mut [f32], &mut [f32], &mut [f32]),
        (p, ds): &mut (Vec<f32>, Vec<f32>),
    ) {
        let (t, w, d) = (g.t, g.w, g.d);
        for h in 0..self.heads {
            self.probabilities(g, h, q, k, p);
            let at = h * w;
            matmul(
                t,
                w,
                t,
                &mut dv[at..],
                d,
                false,
                tile(p, t, true),
                head(gr, g, h, false),
            );
            matmul(
                t,
                t,
                w,
                ds,
                t,
                false,
                head(gr, g, h, false),
                head(v, g, h, true),
            );
            // dS = s·P ∘ (dP − rowsum(P ∘ dP)): the softmax backward, the scale folded in.
            for (prow, drow) in p.chunks(t).zip(ds.chunks_mut(t)) {
                let dot: f32 = prow.iter().zip(drow.iter()).map(|(p, d)| p * d).sum();
                for (d, &p) in drow.iter_mut().zip(prow) {
                    *d = self.scale * p * (*d - dot);
                }
            }
            matmul(
                t,
                w,
                t,
                &mut dq[at..],
                d,
                false,
                tile(ds, t, false),
                head(k, g, h, false),
            );
            matmul(
                t,
                w,
                t,
                &mut dk[at..],
                d,
                false,
                tile(ds, t, true),
                head(q, g, h, false),
            );
        }
    }
}

impl CustomOp3 for Attention {
    fn name(&self) -> &'static str {
        "dp-attention"
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
        if l1.shape() != l2.shape() || l1.shape() != l3.shape() {
            candle_core::bail!("attention: q, k, v differ in shape");
        }
        let g = self.geometry(l1)?;
        let (q, k, v) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?, f32_slice(s3, l3)?);
        let mut out = vec![0.0f32; q.len()];
        out.par_chunks_mut(g.size()).enumerate().for_each_init(
            || vec![0.0f32; g.t * g.t],
            |p, (i, o)| {
                let at = i * g.size()..(i + 1) * g.size();
                let inputs = (&q[at.clone()], &k[at.clone()], &v[at]);
                self.sequence(g, inputs, o, p);
            },
        );
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let [q, k, v, gr] = [q, k, v, grad_res].map(|t| t.contiguous());
        let (q, k, v, gr) = (q?, k?, v?, gr?);
        let g = self.geometry(q.layout())?;
        let n = q.elem_count();
        let (mut dq, mut dk, mut dv) = (vec![0.0f32; n], vec![0.0f32; n], vec![0.0f32; n]);
        let guards = [&q, &k, &v, &gr].map(|t| t.storage_and_layout());
        let [qs, ks, vs, gs] = &guards;
        let (qd, kd, vd, gd) = (
            storage_f32(&qs.0, qs.1)?,
            storage_f32(&ks.0, ks.1)?,
            storage_f32(&vs.0, vs.1)?,
            storage_f32(&gs.0, gs.1)?,
        );
        let sequences = dq
            .par_chunks_mut(g.size())
            .zip(dk.par_chunks_mut(g.size()))
            .zip(dv.par_chunks_mut(g.size()))
            .enumerate();
        sequences.for_each_init(
            || (vec![0.0f32; g.t * g.t], vec![0.0f32; g.t * g.t]),
            |scratch, (i, ((dq, dk), dv))| {
                let at = i * g.size()..(i + 1) * g.size();
                let inputs = (&qd[at.clone()], &kd[at.clone()], &vd[at.clone()], &gd[at]);
                self.sequence_backward(g, inputs, (dq, dk, dv), scratch);
            },
        );
        drop(guards);
        let back = |d: Vec<f32>| Tensor::from_vec(d, q.shape(), q.device());
        Ok((Some(back(dq)?), Some(back(dk)?), Some(back(dv)?)))
    }
}
