//! DP LoRA: a low-rank adapter on a frozen Linear layer (Hu et al. 2022, "LoRA: Low-Rank
//! Adaptation of Large Language Models", §4.1: `h = W₀x + (α/r)·BAx`, `A` r × in,
//! `B` out × r, `B = 0` at the start) — the way private fine-tuning of large models is
//! done (Yu et al. 2022, "Differentially Private Fine-tuning of Language Models").
//!
//! The two factors are DP Linear layers (`A` on x, `B` on Ax), so their per-sample
//! gradients, norms (ghost or kept, as for any Linear) and clipped sums are the Linear's
//! rule; the base weight and bias are frozen ([`Taps::freeze`](super::Taps::freeze)):
//! constants in the forward, no per-sample work. A Linear carries its adapter itself, so
//! chosen layers of an existing model can be adapted in place ([`add_lora`]).

use candle_nn::Init;

use super::linear::{linear_no_bias, Adapter, Linear};
use super::var_builder::DpVarBuilder;
use crate::error::{Error, Result};

/// The adapter's shape, as PEFT's `LoraConfig`.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraConfig {
    /// The rank r of `BA`.
    pub rank: usize,
    /// α: the update is scaled by α / r.
    pub alpha: f64,
    /// Parameters [`add_lora`] leaves trainable beside the adapters, by name or prefix
    /// (PEFT's `modules_to_save`, e.g. a new classification head).
    pub keep_trainable: Vec<String>,
}

impl Linear {
    /// This layer with a LoRA adapter of `config`'s rank and α, its factors created
    /// under `vb` (`lora_a.weight`, `lora_b.weight` — give the builder at the layer's own
    /// path), and its base weight and bias frozen.
    pub fn with_lora(&self, config: &LoraConfig, vb: DpVarBuilder) -> Result<Linear> {
        if config.rank == 0 || !(config.alpha.is_finite() && config.alpha > 0.0) {
            return Err(Error::invalid_model(
                "LoRA",
                format!(
                    "rank {} and alpha {}: the rank must be ≥ 1 and alpha finite and > 0",
                    config.rank, config.alpha
                ),
            ));
        }
        if self.adapter().is_some() {
            return Err(Error::invalid_model(
                "LoRA",
                "the layer already has an adapter",
            ));
        }
        refuse_sealed(&vb)?;
        let (out, inputs) = self.weight().as_tensor().dims2()?;
        let down = linear_no_bias(inputs, config.rank, vb.pp("lora_a"))?;
        let b = vb
            .pp("lora_b")
            .get_with_hints((out, config.rank), "weight", Init::Const(0.0))?;
        let up = Linear::from_vars(b, None, vb.taps())?;
        let base = [Some(self.weight()), self.bias()];
        vb.taps().freeze_where(|p| {
            let id = p.var.as_tensor().id();
            base.iter().flatten().any(|v| v.as_tensor().id() == id)
        })?;
        let scale = config.alpha / config.rank as f64;
        let owner = vb.prefix();
        vb.taps().note(format!(
            "{owner}: LoRA rank {} scale {scale:e}",
            config.rank
        ));
        let adapter = Adapter::new(down, up, scale);
        Ok(self.clone().adapted(adapter))
    }
}

/// A model whose Linear layers can be reached, for [`add_lora`].
pub trait LinearLayers {
    /// Every Linear layer of the model.
    fn linear_layers_mut(&mut self) -> Vec<&mut Linear>;
}

/// Adds a LoRA adapter to each Linear of `model` whose name (its parameters' prefix,
/// `encoder.blocks.0.attn.q`) `select` accepts (PEFT's `target_modules`; e.g. attention's
/// q and v: `|name| name.ends_with(".q") || name.ends_with(".v")`), its factors under
/// that name in `vb` (the root builder of the model's taps), then freezes every other
/// parameter of the taps except `config.keep_trainable`. Returns the number of adapted
/// layers; none is an error.
pub fn add_lora(
    model: &mut impl LinearLayers,
    vb: &DpVarBuilder,
    config: &LoraConfig,
    select: impl Fn(&str) -> bool,
) -> Result<usize> {
    refuse_sealed(vb)?;
    let params = vb.taps().params();
    let kept =
        |k: &str, name: &str| name == k || name.strip_prefix(k).is_some_and(|r| r.starts_with('.'));
    if let Some(k) = config
        .keep_trainable
        .iter()
        .find(|k| !params.iter().any(|p| kept(k, &p.name)))
    {
        return Err(Error::invalid_model(
            "LoRA",
            format!("keep_trainable {k:?} names no trainable parameter"),
        ));
    }
    let mut adapted = 0;
    for layer in model.linear_layers_mut() {
        let name = vb.taps().owner_of(layer.weight()).ok_or_else(|| {
            Error::invalid_model("LoRA", "a Linear layer of the model is not in these taps")
        })?;
        if select(&name) {
            *layer = layer.with_lora(config, vb.pp(&name))?;
            adapted += 1;
        }
    }
    if adapted == 0 {
        return Err(Error::invalid_model(
            "LoRA",
            "no Linear layer of the model was selected",
        ));
    }
    let keep = |name: &str| {
        name.split('.').any(|s| s == "lora_a" || s == "lora_b")
            || config.keep_trainable.iter().any(|k| kept(k, name))
    };
    vb.taps().freeze_where(|p| !keep(&p.name))?;
    Ok(adapted)
}

/// Adapters are added before the private model is built (its θ is laid out then).
fn refuse_sealed(vb: &DpVarBuilder) -> Result<()> {
    if vb.taps().is_sealed() {
        return Err(Error::invalid_model(
            "LoRA",
            "adapters must be added before the private model is built over the taps",
        ));
    }
    Ok(())
}
