//! A layer norm with its scale and shift in one op, `x̂·γ + β` with `x̂` the row's
//! normalisation ([`Normalize`]): one node of Candle's graph instead of two, so the
//! backward gives no zero tensor and addition to `x̂`, and `x`'s gradient, `Σ g⊙x̂` and
//! `Σ g` come from one pass over the rows.

use candle_core::{CpuStorage, CustomOp3, Device, Layout, Shape, Tensor};
use rayon::prelude::*;

use super::kernels::vectorized;
use super::normalize::Normalize;
use super::{f32_slice, keep_gradient, storage_f32, GradientSlot};

/// Rows per parallel task.
const ROWS_PER_TASK: usize = 64;

/// γ's and β's gradients: the column sums `Σ g⊙x̂` and `Σ g`.
type ColumnSums = (Vec<f32>, Vec<f32>);

/// `x (…, d)`, `γ (d)`, `β (d)` → `x̂·γ + β`. Backward: `x`'s gradient, and with
/// `trainable` γ's `Σ g⊙x̂` and β's `Σ g` over all rows (without, both are constants: a
/// private forward). The output's gradient is left in `catch`; with `keep_normalised`
/// the forward also leaves `x̂` there (what a tap's per-sample `∇γ` is built from).
pub(crate) struct NormAffine {
    normalize: Normalize,
    trainable: bool,
    catch: Option<GradientSlot>,
    normalised: Option<GradientSlot>,
}

impl NormAffine {
    /// The op; see the type's documentation.
    pub(crate) fn new(
        normalize: Normalize,
        trainable: bool,
        catch: Option<GradientSlot>,
        normalised: Option<GradientSlot>,
    ) -> Self {
        NormAffine {
            normalize,
            trainable,
            catch,
            normalised,
        }
    }
}

/// The row width `d`, checked against the scale's and the shift's lengths.
fn width(layout: &Layout, scale: usize, shift: usize) -> candle_core::Result<usize> {
    match layout.shape().dims().last() {
        Some(&d) if d > 0 && d == scale && d == shift => Ok(d),
        _ => candle_core::bail!(
            "norm affine: rows {:?} with scale {scale} and shift {shift}",
            layout.shape().dims()
        ),
    }
}

impl CustomOp3 for NormAffine {
    fn name(&self) -> &'static str {
        "dp-norm-affine"
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
        let (x, scale, shift) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?, f32_slice(s3, l3)?);
        let d = width(l1, scale.len(), shift.len())?;
        let mut y = vec![0.0f32; x.len()];
        let task = d * ROWS_PER_TASK;
        let rows = |y: &mut [f32], x: &[f32], mut xhat: Option<&mut [f32]>| {
            vectorized(
                #[inline(always)]
                || {
                    for (r, (y, x)) in y.chunks_mut(d).zip(x.chunks(d)).enumerate() {
                        let xhat = xhat.as_deref_mut().map(|h| &mut h[r * d..][..d]);
                        row_forward(self.normalize, x, (scale, shift), y, xhat);
                    }
                },
            )
        };
        let mut xhat = Vec::new();
        if self.normalised.is_some() {
            xhat = vec![0.0f32; x.len()];
            y.par_chunks_mut(task)
                .zip(x.par_chunks(task).zip(xhat.par_chunks_mut(task)))
                .for_each(|(y, (x, xhat))| rows(y, x, Some(xhat)));
        } else {
            y.par_chunks_mut(task)
                .zip(x.par_chunks(task))
                .for_each(|(y, x)| rows(y, x, None));
        }
        if let Some(slot) = &self.normalised {
            keep_gradient(
                Some(slot),
                &Tensor::from_vec(xhat, l1.shape().clone(), &Device::Cpu)?,
            );
        }
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        scale: &Tensor,
        _shift: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        keep_gradient(self.catch.as_ref(), grad_res);
        let (x, g, scale) = (x.contiguous()?, grad_res.contiguous()?, scale.contiguous()?);
        let (xs, gs, ss) = (
            x.storage_and_layout(),
            g.storage_and_layout(),
            scale.storage_and_layout(),
        );
        let (xd, gd, sd) = (
            storage_f32(&xs.0, xs.1)?,
            storage_f32(&gs.0, gs.1)?,
            storage_f32(&ss.0, ss.1)?,
        );
        let (dx, sums) = backward(self.normalize, xd, gd, sd, self.trainable);
        let dx = Tensor::from_vec(dx, x.shape(), x.device())?;
        let Some((dscale, dshift)) = sums else {
            return Ok((Some(dx), None, None));
        };
        let d = sd.len();
        Ok((
            Some(dx),
            Some(Tensor::from_vec(dscale, d, x.device())?),
            Some(Tensor::from_vec(dshift, d, x.device())?),
        ))
    }
}

/// One row of the forward: `y = x̂·γ + β`, and `x̂` itself where asked for.
#[inline(always)]
fn row_forward(
    normalize: Normalize,
    x: &[f32],
    (scale, shift): (&[f32], &[f32]),
    y: &mut [f32],
    xhat: Option<&mut [f32]>,
) {
    let (mean, rstd) = normalize.stats(x);
    for (((o, &v), &g), &b) in y.iter_mut().zip(x).zip(scale).zip(shift) {
        *o = (v - mean) * rstd * g + b;
    }
    if let Some(xhat) = xhat {
        for (o, &v) in xhat.iter_mut().zip(x) {
            *o = (v - mean) * rstd;
        }
    }
}

/// `x`'s gradient `rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ⊙x̂))` with `ĝ = g⊙γ` (no `mean(ĝ)`
/// without `remove_mean`), and with `trainable` the column sums `Σ g⊙x̂` and `Σ g`, in
/// one pass over the rows (the partial sums of each task added in task order).
fn backward(
    normalize: Normalize,
    x: &[f32],
    g: &[f32],
    scale: &[f32],
    trainable: bool,
) -> (Vec<f32>, Option<ColumnSums>) {
    let d = scale.len();
    let task = d * ROWS_PER_TASK;
    let mut dx = vec![0.0f32; x.len()];
    let partials: Vec<ColumnSums> = dx
        .par_chunks_mut(task)
        .zip(x.par_chunks(task).zip(g.par_chunks(task)))
        .map(|(dx, (x, g))| {
            let mut sums = (vec![0.0f32; d], vec![0.0f32; d]);
            vectorized(
                #[inline(always)]
                || {
                    for ((dx, x), g) in dx.chunks_mut(d).zip(x.chunks(d)).zip(g.chunks(d)) {
                        row_backward(normalize, x, g, scale, dx, trainable.then_some(&mut sums));
                    }
                },
            );
            sums
        })
        .collect();
    if !trainable {
        return (dx, None);
    }
    let mut total = (vec![0.0f32; d], vec![0.0f32; d]);
    for (ds, db) in &partials {
        total.0.iter_mut().zip(ds).for_each(|(t, v)| *t += v);
        total.1.iter_mut().zip(db).for_each(|(t, v)| *t += v);
    }
    (dx, Some(total))
}

/// One row of [`backward`].
#[inline(always)]
fn row_backward(
    normalize: Normalize,
    x: &[f32],
    g: &[f32],
    scale: &[f32],
    dx: &mut [f32],
    sums: Option<&mut ColumnSums>,
) {
    let (mean, rstd) = normalize.stats(x);
    let n = x.len() as f32;
    let (mut g_sum, mut gx_sum) = (0.0f32, 0.0f32);
    for ((&g, &s), &v) in g.iter().zip(scale).zip(x) {
        let gh = g * s;
        g_sum += gh;
        gx_sum += gh * (v - mean) * rstd;
    }
    let g_mean = if normalize.remove_mean {
        g_sum / n
    } else {
        0.0
    };
    let gx = gx_sum / n;
    for (((o, &g), &s), &v) in dx.iter_mut().zip(g).zip(scale).zip(x) {
        *o = rstd * (g * s - g_mean - (v - mean) * rstd * gx);
    }
    if let Some((ds, db)) = sums {
        for (((ds, db), &g), &v) in ds.iter_mut().zip(db.iter_mut()).zip(g).zip(x) {
            *ds += g * (v - mean) * rstd;
            *db += g;
        }
    }
}
