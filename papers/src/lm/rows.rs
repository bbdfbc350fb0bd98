//! Token sequences as training data for the DP engine: one row per example, padded to a
//! common width. A padded position's input is token 0 and its target is [`IGNORE`], so
//! it adds nothing to the example's loss (the attention is causal: padding after the last
//! real token changes no earlier prediction).

use anyhow::{ensure, Result};
use candle_core::{Device, Tensor};
use dp_models::TrainingData;
use sha2::{Digest, Sha256};

/// The target of a padded position.
pub const IGNORE: u32 = u32::MAX;

/// Rows of token ids, as (N, W) tensors of inputs and next-token targets.
pub struct TokenRows {
    inputs: Tensor,
    targets: Tensor,
    digest: String,
}

impl TokenRows {
    /// `rows` padded to `width` tokens; the first `ignored_prefix[i]` predictions of row `i`
    /// (its tokens 1..=k, predicted from the ones before) do not count. Every id must be
    /// below `vocab`, and every row at most `width` and at least 2 tokens long.
    pub fn new(
        rows: &[&[u32]],
        ignored_prefix: &[usize],
        width: usize,
        vocab: usize,
    ) -> Result<Self> {
        ensure!(
            rows.len() == ignored_prefix.len(),
            "one ignored prefix per row"
        );
        let mut inputs = Vec::with_capacity(rows.len() * width);
        let mut targets = Vec::with_capacity(rows.len() * width);
        let mut hash = Sha256::new();
        for (row, &skip) in rows.iter().zip(ignored_prefix) {
            ensure!(
                (2..=width).contains(&row.len()),
                "a row of {} tokens does not fit rows of {width}",
                row.len()
            );
            ensure!(
                row.iter().all(|&t| (t as usize) < vocab),
                "a token id is not below {vocab}"
            );
            for (t, &token) in row.iter().enumerate() {
                inputs.push(token);
                targets.push(if t <= skip { IGNORE } else { token });
                hash.update(token.to_le_bytes());
            }
            inputs.resize(inputs.len() + width - row.len(), 0);
            targets.resize(targets.len() + width - row.len(), IGNORE);
            hash.update([0xff; 4]);
        }
        let n = rows.len();
        Ok(TokenRows {
            inputs: Tensor::from_vec(inputs, (n, width), &Device::Cpu)?,
            targets: Tensor::from_vec(targets, (n, width), &Device::Cpu)?,
            digest: hash.finalize()[..8]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        })
    }

    /// Rows counted from their first prediction on.
    pub fn whole(rows: &[&[u32]], width: usize, vocab: usize) -> Result<Self> {
        Self::new(rows, &vec![0; rows.len()], width, vocab)
    }

    /// The inputs and targets of the rows `batch`, each (B, W).
    pub fn batch(&self, batch: &[usize]) -> candle_core::Result<(Tensor, Tensor)> {
        let idx: Vec<u32> = batch.iter().map(|&i| i as u32).collect();
        let idx = Tensor::from_vec(idx, batch.len(), self.inputs.device())?;
        Ok((
            self.inputs.index_select(&idx, 0)?,
            self.targets.index_select(&idx, 0)?,
        ))
    }

    /// Row width W.
    pub fn width(&self) -> usize {
        self.inputs.dims()[1]
    }
}

impl TrainingData for TokenRows {
    fn len(&self) -> usize {
        self.inputs.dims()[0]
    }

    /// Ids were checked against the vocabulary when the rows were built.
    fn validate(&self) -> dp_models::Result<()> {
        Ok(())
    }

    fn digest(&self) -> String {
        self.digest.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_pad_and_ignore() -> Result<()> {
        let rows = TokenRows::new(&[&[5, 6, 7], &[1, 2, 3, 4]], &[0, 2], 4, 8)?;
        let (x, y) = rows.batch(&[0, 1])?;
        assert_eq!(x.to_vec2::<u32>()?, [[5, 6, 7, 0], [1, 2, 3, 4]]);
        assert_eq!(
            y.to_vec2::<u32>()?,
            [[IGNORE, 6, 7, IGNORE], [IGNORE, IGNORE, IGNORE, 4]]
        );
        assert_eq!(rows.len(), 2);
        assert!(
            TokenRows::whole(&[&[9, 1]], 4, 8).is_err(),
            "id 9 ≥ vocabulary 8"
        );
        assert!(
            TokenRows::whole(&[&[1]], 4, 8).is_err(),
            "one token predicts nothing"
        );
        assert_ne!(
            rows.digest(),
            TokenRows::whole(&[&[5, 6, 7]], 4, 8)?.digest()
        );
        Ok(())
    }
}
