//! Per-example losses and their gradients with respect to the logits.

use crate::error::{Error, Result};

/// Checks that `logits` hold one row of `classes` per label and every label is a class:
/// [`cross_entropy`] indexes by label, so callers check first rather than panic.
pub fn check_labels(logits: usize, labels: &[u32], classes: usize) -> Result<()> {
    if logits != labels.len() * classes {
        return Err(Error::invalid_model(
            "labels",
            format!(
                "{logits} logits for {} labels of {classes} classes",
                labels.len()
            ),
        ));
    }
    match labels.iter().find(|&&y| y as usize >= classes) {
        Some(label) => Err(Error::invalid_model(
            "labels",
            format!("label {label} out of range for {classes} classes"),
        )),
        None => Ok(()),
    }
}

/// Per-example cross-entropy of `logits` (B × classes) against `labels`, and
/// `d(Σᵢ ℓᵢ)/d logits` (B × classes): softmax minus one-hot.
pub fn cross_entropy(logits: &[f32], labels: &[u32], classes: usize) -> (Vec<f32>, Vec<f32>) {
    let mut losses = Vec::with_capacity(labels.len());
    let mut grad = vec![0.0f32; logits.len()];
    for (i, &y) in labels.iter().enumerate() {
        let row = &logits[i * classes..][..classes];
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = row.iter().map(|z| (z - max).exp()).sum();
        let log_sum = max + sum.ln();
        losses.push(log_sum - row[y as usize]);
        let g = &mut grad[i * classes..][..classes];
        for (gk, &z) in g.iter_mut().zip(row) {
            *gk = (z - log_sum).exp();
        }
        g[y as usize] -= 1.0;
    }
    (losses, grad)
}

/// The predicted class of each row.
pub fn argmax_rows(logits: &[f32], classes: usize) -> Vec<u32> {
    logits
        .chunks(classes)
        .map(|row| {
            row.iter()
                .enumerate()
                .fold(
                    (0, f32::NEG_INFINITY),
                    |b, (k, &z)| if z > b.1 { (k, z) } else { b },
                )
                .0 as u32
        })
        .collect()
}
