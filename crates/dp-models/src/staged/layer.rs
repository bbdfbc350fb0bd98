//! The per-sample-gradient protocol every DP layer implements.

use candle_core::{Tensor, Var};

use super::tape::{Tape, TapeEntry};
use crate::error::{Error, Result};
use crate::fused::LayerSpec;

/// The per-sample-gradient protocol every DP layer implements.
pub trait DpLayer: Send + Sync {
    /// Forward; in DP mode (`tape` given) weights are constants and a probe is recorded.
    fn forward(&self, x: &Tensor, tape: Option<(&mut Tape, usize)>) -> Result<Tensor>;
    /// The trainable parameters, in a fixed order.
    fn vars(&self) -> Vec<Var>;
    /// `‖∇θ ℓᵢ‖²` of this layer's parameters, per example (B,).
    fn squared_norms(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Tensor>;
    /// `Σᵢ cᵢ ∇θ ℓᵢ` for each of `vars()`, in order.
    fn clipped_sum(
        &self,
        entry: &TapeEntry,
        grad_out: &Tensor,
        factors: &Tensor,
    ) -> Result<Vec<Tensor>>;
    /// Materialised per-sample gradients, one (B, …) tensor per var (tests, audits).
    fn per_sample_grads(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Vec<Tensor>>;
    /// Whether [`DpLayer::input_gradient`] is implemented on the CPU ops, so that a model of
    /// such layers can run the direct backward (no Candle graph).
    fn has_input_gradient(&self) -> bool {
        false
    }
    /// `dL/dx` from `dL/dz` (weights constant), for the direct backward.
    fn input_gradient(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Tensor> {
        let _ = (entry, grad_out);
        Err(Error::invalid_model(
            "layer",
            "this layer has no direct input gradient",
        ))
    }
    /// The layer in the fused tier's vocabulary, where it has a fused equivalent (a
    /// Linear or Conv2d with bias): a model of such layers then runs fused on the CPU.
    fn fused_layer(&self) -> Option<LayerSpec> {
        None
    }
}

/// `Σ ‖∇θ‖²` per example over a layer's materialised (B, …) per-sample gradients.
pub(super) fn materialised_squared_norms(per_sample: &[Tensor]) -> Result<Tensor> {
    let mut total: Option<Tensor> = None;
    for g in per_sample {
        let sq = g.sqr()?.flatten_from(1)?.sum(1)?;
        total = Some(match total {
            None => sq,
            Some(t) => (t + sq)?,
        });
    }
    total.ok_or_else(|| Error::invalid_model("layer", "a layer without parameters"))
}
