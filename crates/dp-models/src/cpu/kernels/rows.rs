//! Row-wise kernels on a row-major (rows × d) slice: a bias's gradient (the column sums)
//! and a bias itself (one vector added to every row), in row order.

/// `out += Σ_r rows[r, :]` (d values per row), adding the rows in order.
#[inline(always)]
pub(crate) fn add_rows(rows: &[f32], d: usize, out: &mut [f32]) {
    for row in rows.chunks_exact(d) {
        out.iter_mut().zip(row).for_each(|(o, &v)| *o += v);
    }
}

/// `rows[r, :] += v` for every row (`v.len()` values per row).
#[inline(always)]
pub(crate) fn add_to_rows(rows: &mut [f32], v: &[f32]) {
    for row in rows.chunks_exact_mut(v.len()) {
        row.iter_mut().zip(v).for_each(|(o, &b)| *o += b);
    }
}
