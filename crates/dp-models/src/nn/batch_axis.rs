//! The batch-axis probe: that every DP layer's output is batch first and that no
//! example's loss reads another example's activations.
//!
//! The per-sample gradients of a DP layer read row i of its output gradient as example
//! i's. That is true only if the layer was applied to a (B, …) input and the loss of
//! example i depends on row i alone. A (T, B, d) input with T = B passes any shape check,
//! and a loss that mixes examples (batch statistics: candle-nn's `BatchNorm`, a mean over
//! the batch, attention across it) gives rows that hold other examples' contributions:
//! either way an example's clipped "gradient" is not its own and the sensitivity is not
//! C. So the first private backward of each new set of shapes backpropagates
//! `Σᵢ wᵢ ℓᵢ` with distinct weights wᵢ as well as `Σᵢ ℓᵢ`: backpropagation is linear in
//! the loss's weights, so every row i of every probed output must scale by exactly wᵢ
//! (up to rounding); a row that does not is a structural error naming the output. Shapes
//! once verified are not probed again (the network is the same program); a network
//! whose mixing depends on the data itself is outside what this probe can see, and
//! outside the guarantee (docs/training.md).

use candle_core::{Tensor, D};

use super::taps::Record;
use crate::error::{Error, Result};

/// The distinct weights wᵢ = 1 + (i + 1)/(B + 1) and each record's output gradient of
/// `Σᵢ wᵢ ℓᵢ` (`None` where the output does not reach the loss).
pub(super) fn weighted_gradients(
    losses: &Tensor,
    records: &[Record],
) -> Result<(Tensor, Vec<Option<Tensor>>)> {
    let b = losses.dim(0)?;
    let w: Vec<f32> = (0..b)
        .map(|i| 1.0 + (i + 1) as f32 / (b + 1) as f32)
        .collect();
    let weights = Tensor::from_vec(w, b, losses.device())?;
    let grads = (losses * &weights)?.sum_all()?.backward()?;
    let weighted = records.iter().map(|r| r.probe.gradient(&grads)).collect();
    Ok((weights, weighted))
}

/// Refuses a record whose weighted gradient is not its plain gradient scaled row by row;
/// whether every record could be judged (`false` where a gradient is not finite: the
/// shapes are probed again on a later batch).
pub(super) fn check(
    weights: &Tensor,
    weighted: &[Option<Tensor>],
    plain: &[Option<Tensor>],
    records: &[Record],
) -> Result<bool> {
    let mut judged = true;
    let b = weights.dim(0)?;
    for ((w_grad, grad), record) in weighted.iter().zip(plain).zip(records) {
        let (Some(w_grad), Some(grad)) = (w_grad, grad) else {
            continue;
        };
        if grad.rank() == 0 || grad.dim(0)? != b || grad.elem_count() == 0 {
            continue; // the shape check after the probe names this one.
        }
        let mut dims = vec![1usize; grad.rank()];
        dims[0] = b;
        let expected = grad.broadcast_mul(&weights.reshape(dims)?)?;
        let scale = expected
            .abs()?
            .flatten_all()?
            .max(D::Minus1)?
            .to_scalar::<f32>()?;
        let error = (w_grad - &expected)?
            .abs()?
            .flatten_all()?
            .max(D::Minus1)?
            .to_scalar::<f32>()?;
        if !(error.is_finite() && scale.is_finite()) {
            judged = false;
        } else if error > 1e-3 * scale {
            return Err(Error::invalid_model(
                "DP layer",
                format!(
                    "a layer's output {:?} is not per example: its row i is not example i's \
                     alone (the layer is applied to a batch-second input, or the loss mixes \
                     examples, e.g. batch statistics or a mean over the batch); apply DP \
                     layers to (B, …) inputs and return one loss per example that reads \
                     only that example",
                    record.shape
                ),
            ));
        }
    }
    Ok(judged)
}
