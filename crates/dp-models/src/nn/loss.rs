//! Per-example losses, shape (B,), for [`Taps::clipped_gradients`](super::Taps): by
//! default each is the mean over one example's positions, so that an example's loss does
//! not grow with its length ([`Reduction`]). Any closure returning a (B,) tensor will do;
//! these are the common ones.

use candle_core::{DType, Result, Tensor, D};

/// The per-example mean over all non-batch dimensions of `t` (B, …).
fn mean_per_example(t: &Tensor) -> Result<Tensor> {
    let b = t.dim(0)?;
    t.reshape((b, ()))?.mean(1)
}

/// How one example's per-position losses become its loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// The mean over the example's counted positions (0 for an example with none), so an
    /// example's loss does not grow with its length.
    Mean,
    /// The sum over the example's counted positions. PyTorch's `reduction="sum"` over a
    /// batch is the sum of these; its `"mean"` divides by the batch's token count, which
    /// couples examples, so it has no per-example form.
    Sum,
}

/// Cross-entropy of `logits` (B, …, C) against class ids `targets` (B, …), the mean over
/// each example's positions whose target is not `ignore_index` (0 for an example with
/// none). See [`cross_entropy_reduced`].
pub fn cross_entropy(
    logits: &Tensor,
    targets: &Tensor,
    ignore_index: Option<i64>,
) -> Result<Tensor> {
    cross_entropy_reduced(logits, targets, ignore_index, Reduction::Mean)
}

/// Cross-entropy per example with a chosen [`Reduction`] over its positions. Targets are
/// integer class ids, unsigned or signed (`u8`, `u32`, `i64`: PyTorch's `-100` ignore
/// index works as it does there); a counted target outside `0..C` is an error, never a
/// wrapped or clamped id.
pub fn cross_entropy_reduced(
    logits: &Tensor,
    targets: &Tensor,
    ignore_index: Option<i64>,
    reduction: Reduction,
) -> Result<Tensor> {
    let b = logits.dim(0)?;
    let classes = logits.dim(D::Minus1)?;
    if targets.dtype().is_float() {
        candle_core::bail!(
            "cross-entropy: targets are class ids, not {:?} values",
            targets.dtype()
        );
    }
    if b == 0 {
        return Tensor::zeros(0, logits.dtype(), logits.device());
    }
    let targets = targets.to_dtype(DType::I64)?.reshape((b, ()))?;
    let keep = match ignore_index {
        Some(ignore) => targets.ne(ignore)?,
        None => targets.ones_like()?.to_dtype(DType::U8)?,
    };
    // Ignored positions read class 0 and are then masked out.
    let safe = keep.where_cond(&targets, &targets.zeros_like()?)?;
    check_classes(&safe, classes)?;
    let safe = safe.to_dtype(DType::U32)?;
    let log_probs = candle_nn::ops::log_softmax(&logits.reshape((b, (), classes))?, D::Minus1)?;
    let picked = log_probs.gather(&safe.unsqueeze(2)?, 2)?.squeeze(2)?;
    let keep = keep.to_dtype(log_probs.dtype())?;
    let total = (picked * &keep)?.sum(1)?.neg()?;
    match reduction {
        Reduction::Sum => Ok(total),
        Reduction::Mean => total / keep.sum(1)?.maximum(1.0)?,
    }
}

/// Every counted target (ignored ones read 0) is a class in `0..classes`.
fn check_classes(targets: &Tensor, classes: usize) -> Result<()> {
    if targets.elem_count() == 0 {
        return Ok(());
    }
    let flat = targets.flatten_all()?;
    let (lo, hi) = (
        flat.min(0)?.to_scalar::<i64>()?,
        flat.max(0)?.to_scalar::<i64>()?,
    );
    if lo < 0 || hi >= classes as i64 {
        let bad = if lo < 0 { lo } else { hi };
        candle_core::bail!(
            "cross-entropy: target {bad} is not a class in 0..{classes} (nor the ignore index)"
        );
    }
    Ok(())
}

/// Next-token cross-entropy of a causal LM: `logits` (B, T, V) at position t predict
/// `tokens` (B, T) at t + 1; positions whose next token is `ignore_index` do not count.
pub fn next_token_cross_entropy(
    logits: &Tensor,
    tokens: &Tensor,
    ignore_index: Option<i64>,
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
