//! The parallel loops the one-pass CPU ops share: element by element, or row by row over
//! the last dimension, of one input or of two inputs of the same shape; each task's loop
//! runs on the widest vector unit the CPU has (`kernels::vectorized`; a caller's closure
//! gets it where the compiler inlines it, as it does small ones).

use candle_core::{CpuStorage, Layout, Shape};
use rayon::prelude::*;

use super::f32_slice;
use super::kernels::vectorized;

/// Elements per parallel task.
const ELEMENTS_PER_TASK: usize = 16 * 1024;
/// Rows per parallel task.
const ROWS_PER_TASK: usize = 64;

/// `f(x)` for every element of one input.
pub(super) fn map(
    storage: &CpuStorage,
    layout: &Layout,
    f: impl Fn(f32) -> f32 + Sync,
) -> candle_core::Result<(CpuStorage, Shape)> {
    let out = map_slice(f32_slice(storage, layout)?, f);
    Ok((CpuStorage::F32(out), layout.shape().clone()))
}

/// `f(x)` for every element of a slice.
pub(super) fn map_slice(x: &[f32], f: impl Fn(f32) -> f32 + Sync) -> Vec<f32> {
    let mut out = vec![0.0f32; x.len()];
    out.par_chunks_mut(ELEMENTS_PER_TASK)
        .zip(x.par_chunks(ELEMENTS_PER_TASK))
        .for_each(|(out, x)| {
            vectorized(
                #[inline(always)]
                || out.iter_mut().zip(x).for_each(|(o, &v)| *o = f(v)),
            );
        });
    out
}

/// `f(a, b)` for every pair of elements of two inputs of one shape (`what` names the op
/// in the error for a mismatch).
pub(super) fn map2(
    (s1, l1): (&CpuStorage, &Layout),
    (s2, l2): (&CpuStorage, &Layout),
    what: &str,
    f: impl Fn(f32, f32) -> f32 + Sync,
) -> candle_core::Result<(CpuStorage, Shape)> {
    let (a, b) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?);
    if a.len() != b.len() {
        return Err(candle_core::Error::Msg(format!("{what}: shape mismatch")));
    }
    let mut out = vec![0.0f32; a.len()];
    out.par_chunks_mut(ELEMENTS_PER_TASK)
        .zip(
            a.par_chunks(ELEMENTS_PER_TASK)
                .zip(b.par_chunks(ELEMENTS_PER_TASK)),
        )
        .for_each(|(out, (a, b))| {
            vectorized(
                #[inline(always)]
                || {
                    for ((o, &a), &b) in out.iter_mut().zip(a).zip(b) {
                        *o = f(a, b);
                    }
                },
            );
        });
    Ok((CpuStorage::F32(out), l1.shape().clone()))
}

/// The length of the last dimension (an error for an empty one).
fn row_len(layout: &Layout, what: &str) -> candle_core::Result<usize> {
    layout
        .shape()
        .dims()
        .last()
        .copied()
        .filter(|&d| d > 0)
        .ok_or_else(|| candle_core::Error::Msg(format!("{what}: needs a non-empty last dimension")))
}

/// `f(row, out row)` for every row of the last dimension of one input.
pub(super) fn map_rows(
    storage: &CpuStorage,
    layout: &Layout,
    what: &str,
    f: impl Fn(&[f32], &mut [f32]) + Sync,
) -> candle_core::Result<(CpuStorage, Shape)> {
    let (x, d) = (f32_slice(storage, layout)?, row_len(layout, what)?);
    let out = map_row_slices(x, d, f);
    Ok((CpuStorage::F32(out), layout.shape().clone()))
}

/// `f(row, out row)` for every row of length `d` (> 0) of a slice.
pub(super) fn map_row_slices(
    x: &[f32],
    d: usize,
    f: impl Fn(&[f32], &mut [f32]) + Sync,
) -> Vec<f32> {
    let mut out = vec![0.0f32; x.len()];
    out.par_chunks_mut(d * ROWS_PER_TASK)
        .zip(x.par_chunks(d * ROWS_PER_TASK))
        .for_each(|(out, x)| {
            vectorized(
                #[inline(always)]
                || {
                    out.chunks_mut(d)
                        .zip(x.chunks(d))
                        .for_each(|(o, r)| f(r, o))
                },
            );
        });
    out
}

/// `f(row of a, row of b, out row)` for every row of two inputs of one shape.
pub(super) fn map_rows2(
    (s1, l1): (&CpuStorage, &Layout),
    (s2, l2): (&CpuStorage, &Layout),
    what: &str,
    f: impl Fn(&[f32], &[f32], &mut [f32]) + Sync,
) -> candle_core::Result<(CpuStorage, Shape)> {
    let (a, b, d) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?, row_len(l1, what)?);
    if a.len() != b.len() {
        return Err(candle_core::Error::Msg(format!("{what}: shape mismatch")));
    }
    let task = d * ROWS_PER_TASK;
    let mut out = vec![0.0f32; a.len()];
    out.par_chunks_mut(task)
        .zip(a.par_chunks(task).zip(b.par_chunks(task)))
        .for_each(|(out, (a, b))| {
            vectorized(
                #[inline(always)]
                || {
                    for ((o, a), b) in out.chunks_mut(d).zip(a.chunks(d)).zip(b.chunks(d)) {
                        f(a, b, o);
                    }
                },
            );
        });
    Ok((CpuStorage::F32(out), l1.shape().clone()))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::cpu::kernels::{tanh_fast, FORCE_BASELINE};

    #[test]
    fn map_does_not_depend_on_the_vector_unit() {
        let n = 3 * ELEMENTS_PER_TASK + 17;
        let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 6.0).collect();
        let storage = CpuStorage::F32(x);
        let layout = Layout::contiguous(Shape::from(n));
        let run = |baseline: bool| {
            FORCE_BASELINE.store(baseline, Ordering::SeqCst);
            let (out, _) = map(&storage, &layout, tanh_fast).expect("f32 storage");
            FORCE_BASELINE.store(false, Ordering::SeqCst);
            match out {
                CpuStorage::F32(v) => v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                _ => unreachable!("map returns f32"),
            }
        };
        assert_eq!(run(false), run(true));
    }
}
