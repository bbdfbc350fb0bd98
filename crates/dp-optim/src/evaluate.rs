//! Evaluation of a model on (public) data: accuracy, and the GDP paper's RMSE metric.

use candle_core::{Device, Tensor};
use dp_models::data::Dataset;
use dp_models::loss::argmax_rows;
use dp_models::Classifier;

use crate::error::{Error, Result};

/// Calls `visit(logits, labels)` for `data` in batches of 1000 examples.
pub(crate) fn for_each_logit_batch<M: Classifier>(
    model: &M,
    data: &Dataset,
    mut visit: impl FnMut(&[f32], &[u32]),
) -> Result<()> {
    let size = data.example_size();
    for (xs, ys) in data
        .features
        .chunks(1000 * size)
        .zip(data.labels.chunks(1000))
    {
        let x = Tensor::from_slice(xs, (ys.len(), size), &Device::Cpu)?;
        let logits = model.logits(&x)?;
        if logits.len() != ys.len() * data.classes {
            return Err(Error::InvalidSetting {
                name: "classes",
                value: data.classes.to_string(),
                reason: format!(
                    "do not match the model's {} logits per record",
                    logits.len() / ys.len().max(1)
                ),
            });
        }
        visit(&logits, ys);
    }
    Ok(())
}

/// Accuracy of `model` on `data`.
pub fn accuracy<M: Classifier>(model: &M, data: &Dataset) -> Result<f64> {
    let mut correct = 0usize;
    for_each_logit_batch(model, data, |logits, labels| {
        correct += argmax_rows(logits, data.classes)
            .iter()
            .zip(labels)
            .filter(|(p, y)| p == y)
            .count();
    })?;
    Ok(correct as f64 / data.len().max(1) as f64)
}

/// Root-mean-square error of the softmax expectation `Σₖ k·softmax(z)ₖ` against the label
/// index — the GDP paper's MovieLens metric (labels are ratings − 1).
pub fn expected_class_rmse<M: Classifier>(model: &M, data: &Dataset) -> Result<f64> {
    let mut squared = 0.0f64;
    for_each_logit_batch(model, data, |logits, labels| {
        for (row, &y) in logits.chunks(data.classes).zip(labels) {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let weights: Vec<f64> = row.iter().map(|&z| f64::from(z - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            let mean = weights
                .iter()
                .enumerate()
                .map(|(k, w)| k as f64 * w)
                .sum::<f64>()
                / total;
            squared += (mean - f64::from(y)).powi(2);
        }
    })?;
    Ok((squared / data.len().max(1) as f64).sqrt())
}
