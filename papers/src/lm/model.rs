//! The table's model: a GPT-style causal transformer ([`dp_models::nn::Transformer`]) with
//! an LM head tied to the token embedding, and its per-example next-token loss.

use anyhow::Result;
use candle_core::{Module, Tensor};
use dp_models::nn::{loss, DpVarBuilder, Linear, LinearLayers, Transformer, TransformerConfig};
use serde::{Deserialize, Serialize};

use super::rows::{TokenRows, IGNORE};
use dp_models::TrainingData;

/// The model's shape (the vocabulary is the tokenizer's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LmShape {
    /// Context: tokens a training sequence predicts from (sequences are `context + 1`).
    pub context: usize,
    /// Model width d.
    pub width: usize,
    /// Attention heads.
    pub heads: usize,
    /// Blocks.
    pub layers: usize,
}

/// A causal transformer LM; cloning shares its parameters.
#[derive(Clone, Debug)]
pub struct LmModel {
    transformer: Transformer,
    head: Linear,
}

impl LmModel {
    /// Parameters under `vb` (`lm.…`), vocabulary `vocab`.
    pub fn new(shape: LmShape, vocab: usize, vb: &DpVarBuilder) -> Result<Self> {
        let config = TransformerConfig {
            vocab,
            context: shape.context,
            width: shape.width,
            heads: shape.heads,
            layers: shape.layers,
            mlp_ratio: 4,
            causal: true,
        };
        let transformer = Transformer::new(&config, vb.pp("lm"))?;
        let tied = transformer.token_embedding().embeddings().clone();
        let head = Linear::from_vars(tied, None, vb.taps())?;
        Ok(LmModel { transformer, head })
    }

    /// Logits (B, T, V) of token ids (B, T).
    pub fn logits(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        self.head.forward(&self.transformer.forward(ids)?)
    }

    /// Per-example mean next-token loss (B,) of rows (inputs, targets) (B, W): position t
    /// predicts target t + 1; ignored targets do not count.
    pub fn losses(&self, inputs: &Tensor, targets: &Tensor) -> candle_core::Result<Tensor> {
        let w = inputs.dim(1)?;
        let logits = self.logits(&inputs.narrow(1, 0, w - 1)?)?;
        loss::cross_entropy(
            &logits,
            &targets.narrow(1, 1, w - 1)?,
            Some(i64::from(IGNORE)),
        )
    }

    /// Every row's loss, in batches of `batch` (evaluation: outside any private forward).
    pub fn row_losses(&self, rows: &TokenRows, batch: usize) -> Result<Vec<f64>> {
        let mut out = Vec::with_capacity(rows.len());
        let all: Vec<usize> = (0..rows.len()).collect();
        for chunk in all.chunks(batch.max(1)) {
            let (x, y) = rows.batch(chunk)?;
            let losses = self.losses(&x, &y)?.detach().to_vec1::<f32>()?;
            out.extend(losses.into_iter().map(f64::from));
        }
        Ok(out)
    }

    /// exp(mean loss) of rows that all count the same number of targets (whole training
    /// or test windows): the per-token perplexity.
    pub fn perplexity(&self, rows: &TokenRows, batch: usize) -> Result<f64> {
        let losses = self.row_losses(rows, batch)?;
        Ok((losses.iter().sum::<f64>() / losses.len().max(1) as f64).exp())
    }
}

/// The transformer's Linear layers (the head is the token embedding's, tied).
impl LinearLayers for LmModel {
    fn linear_layers_mut(&mut self) -> Vec<&mut Linear> {
        self.transformer.linear_layers_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use candle_nn::VarMap;
    use dp_models::nn::{NormMethod, Taps};
    use dp_models::ClipRule;

    /// The tied model is fully covered by DP layers (a private backward succeeds and every
    /// parameter gets a clipped sum) and padding changes no loss.
    #[test]
    fn tied_lm_is_private_and_padding_is_inert() -> Result<()> {
        let (varmap, taps, device) = (VarMap::new(), Taps::new(), Device::Cpu);
        let vb = DpVarBuilder::from_varmap(&varmap, &taps, &device);
        let shape = LmShape {
            context: 8,
            width: 16,
            heads: 2,
            layers: 1,
        };
        let model = LmModel::new(shape, 11, &vb)?;
        let short = TokenRows::whole(&[&[1, 2, 3, 4]], 4, 11)?;
        let padded = TokenRows::whole(&[&[1, 2, 3, 4]], 9, 11)?;
        let (a, b) = (model.row_losses(&short, 4)?, model.row_losses(&padded, 4)?);
        assert!((a[0] - b[0]).abs() < 1e-5, "{a:?} vs {b:?}");
        let rows = TokenRows::whole(&[&[1, 2, 3, 4, 5], &[6, 7, 8, 9, 10], &[3, 3, 3]], 5, 11)?;
        let grads = taps.clipped_gradients(
            || {
                let (x, y) = rows.batch(&[0, 1, 2])?;
                Ok(model.losses(&x, &y)?)
            },
            ClipRule::Flat { max_grad_norm: 1.0 },
            NormMethod::Auto,
        )?;
        assert_eq!(
            grads.sum.tensors().map(<[_]>::len),
            Some(taps.params().len())
        );
        let norms = grads.squared_norms;
        assert!(norms.iter().all(|n| n.is_finite() && *n > 0.0), "{norms:?}");
        Ok(())
    }
}
