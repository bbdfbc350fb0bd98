//! Per-example losses, shape (B,), for [`Taps::clipped_gradients`](super::Taps): each is the
//! mean over one example's positions, so that an example's loss does not grow with its
//! length. Any closure returning a (B,) tensor will do; these are the common ones.

use candle_core::{DType, Result, Tensor, D};

/// The per-example mean over all non-batch dimensions of `t` (B, …).
fn mean_per_example(t: &Tensor) -> Result<Tensor> {
    let b = t.dim(0)?;
    t.reshape((b, ()))?.mean(1)
}

/// Cross-entropy of `logits` (B, …, C) against class ids `targets` (B, …) (`u32`), the
/// mean over each example's positions whose target is not `ignore_index` (0 for an
/// example with none).
pub fn cross_entropy(
    logits: &Tensor,
    targets: &Tensor,
    ignore_index: Option<u32>,
) -> Result<Tensor> {
    let b = logits.dim(0)?;
    let classes = logits.dim(D::Minus1)?;
    let targets = targets.to_dtype(DType::U32)?.reshape((b, ()))?;
    let log_probs = candle_nn::ops::log_softmax(&logits.reshape((b, (), classes))?, D::Minus1)?;
    let keep = match ignore_index {
        Some(ignore) => targets.ne(ignore)?,
        None => targets.ones_like()?.to_dtype(DType::U8)?,
    };
    // Ignored positions read class 0 and are then masked out.
    let safe = keep.where_cond(&targets, &targets.zeros_like()?)?;
    let picked = log_probs.gather(&safe.unsqueeze(2)?, 2)?.squeeze(2)?;
    let keep = keep.to_dtype(DType::F32)?;
    let total = (picked * &keep)?.sum(1)?.neg()?;
    let count = keep.sum(1)?.maximum(1.0)?;
    total / count
}

/// Next-token cross-entropy of a causal LM: `logits` (B, T, V) at position t predict
/// `tokens` (B, T) at t + 1; positions whose next token is `ignore_index` do not count.
pub fn next_token_cross_entropy(
    logits: &Tensor,
    tokens: &Tensor,
    ignore_index: Option<u32>,
) -> Result<Tensor> {
    let t = logits.dim(1)?;
    if t < 2 {
        candle_core::bail!("next-token loss: sequences of {t} tokens have no next token");
    }
    cross_entropy(
        &logits.narrow(1, 0, t - 1)?,
        &tokens.narrow(1, 1, t - 1)?,
        ignore_index,
    )
}

/// Mean squared error per example.
pub fn mse(predictions: &Tensor, targets: &Tensor) -> Result<Tensor> {
    mean_per_example(&(predictions - targets)?.sqr()?)
}

/// Binary cross-entropy of `logits` against targets in [0, 1], per example, in the
/// stable form `max(z, 0) − z·y + ln(1 + e^{−|z|})`.
pub fn binary_cross_entropy_with_logits(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let softplus = (logits.abs()?.neg()?.exp()? + 1.0)?.log()?;
    let loss = ((logits.relu()? - (logits * targets)?)? + softplus)?;
    mean_per_example(&loss)
}
