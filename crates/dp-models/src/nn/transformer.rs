//! A transformer from the DP layers: token and learned position embeddings, pre-LN
//! blocks (attention and a GELU MLP, each in a residual branch), a final LayerNorm.
//! Bidirectional (an encoder) or causal (a GPT-style decoder, whose LM head can share
//! the token embedding).

use candle_core::{DType, Module, Tensor};

use super::attention::MultiHeadAttention;
use super::embedding::{embedding, Embedding};
use super::layer_norm::{layer_norm, LayerNorm};
use super::linear::{linear, Linear};
use super::var_builder::DpVarBuilder;
use super::LinearLayers;
use crate::error::Result;

/// The shape of a [`Transformer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransformerConfig {
    /// Vocabulary size.
    pub vocab: usize,
    /// Longest sequence (positions).
    pub context: usize,
    /// Model width d.
    pub width: usize,
    /// Attention heads (d must be a multiple).
    pub heads: usize,
    /// Transformer blocks (attention and MLP, each with its layer norm) stacked.
    pub layers: usize,
    /// MLP hidden width as a multiple of d (GPT: 4).
    pub mlp_ratio: usize,
    /// Causal attention (a decoder) or not (an encoder).
    pub causal: bool,
}

/// One pre-LN block: `x + attn(ln₁(x))`, then `x + mlp(ln₂(x))`.
#[derive(Clone, Debug)]
struct Block {
    ln1: LayerNorm,
    attn: MultiHeadAttention,
    ln2: LayerNorm,
    up: Linear,
    down: Linear,
}

impl Block {
    fn new(c: &TransformerConfig, vb: DpVarBuilder) -> Result<Self> {
        let hidden = c.width * c.mlp_ratio;
        Ok(Block {
            ln1: layer_norm(c.width, 1e-5, vb.pp("ln1"))?,
            attn: MultiHeadAttention::new(c.width, c.heads, c.causal, vb.pp("attn"))?,
            ln2: layer_norm(c.width, 1e-5, vb.pp("ln2"))?,
            up: linear(c.width, hidden, vb.pp("mlp.up"))?,
            down: linear(hidden, c.width, vb.pp("mlp.down"))?,
        })
    }
}

impl Module for Block {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let x = self.attn.forward_residual(&self.ln1.forward(x)?, x)?;
        let hidden = self.up.forward_gelu(&self.ln2.forward(&x)?)?;
        self.down.forward_residual(&hidden, &x)
    }
}

/// Token ids (B, T) → hidden states (B, T, d).
#[derive(Clone, Debug)]
pub struct Transformer {
    tokens: Embedding,
    positions: Embedding,
    blocks: Vec<Block>,
    ln_f: LayerNorm,
}

impl Transformer {
    /// A transformer of shape `config`, parameters under `vb` (`tok`, `pos`,
    /// `blocks.{i}.…`, `ln_f`).
    pub fn new(config: &TransformerConfig, vb: DpVarBuilder) -> Result<Self> {
        Ok(Transformer {
            tokens: embedding(config.vocab, config.width, vb.pp("tok"))?,
            positions: embedding(config.context, config.width, vb.pp("pos"))?,
            blocks: (0..config.layers)
                .map(|i| Block::new(config, vb.pp("blocks").pp(i)))
                .collect::<Result<_>>()?,
            ln_f: layer_norm(config.width, 1e-5, vb.pp("ln_f"))?,
        })
    }

    /// The token embedding (to tie an LM head to it with
    /// [`Linear::from_vars`](super::Linear::from_vars)).
    pub fn token_embedding(&self) -> &Embedding {
        &self.tokens
    }
}

impl LinearLayers for Transformer {
    fn linear_layers_mut(&mut self) -> Vec<&mut Linear> {
        let mut layers = Vec::new();
        for block in &mut self.blocks {
            layers.extend(block.attn.linear_layers_mut());
            layers.extend([&mut block.up, &mut block.down]);
        }
        layers
    }
}

impl Module for Transformer {
    fn forward(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let positions = Tensor::arange(0u32, t as u32, ids.device())?
            .unsqueeze(0)?
            .repeat((b, 1))?;
        let ids = ids.to_dtype(DType::U32)?;
        let mut x = (self.tokens.forward(&ids)? + self.positions.forward(&positions)?)?;
        for block in &self.blocks {
            x = block.forward(&x)?;
        }
        self.ln_f.forward(&x)
    }
}
