//! The DP fully connected layer ([`nn::Linear`]) as a stage of the staged executor.

use candle_core::{Tensor, Var};

use super::layer::DpLayer;
use super::tape::{tap, Tape, TapeEntry};
use crate::cpu::{self, Matmul};
use crate::error::{Error, Result};
use crate::fused::LayerSpec;
use crate::nn;

/// The layer's contributions for one recorded use: nn::Linear's own per-sample rule.
fn contributions(
    layer: &nn::Linear,
    entry: &TapeEntry,
    grad_out: &Tensor,
) -> Result<Vec<(Var, nn::Contribution)>> {
    nn::linear_contributions(layer.weight(), layer.bias(), &entry.input, grad_out)
}

impl DpLayer for nn::Linear {
    fn forward(&self, x: &Tensor, tape: Option<(&mut Tape, usize)>) -> Result<Tensor> {
        match tape {
            None => Ok(candle_core::Module::forward(self, x)?),
            Some((tape, layer)) => {
                let w = self.weight().as_tensor().detach();
                let z = if x.rank() == 2 && tape.cpu_ops_apply(x) {
                    // Input-gradient-only matmul: no unused weight gradient.
                    x.contiguous()?.apply_op2(&w, Matmul::linear(false))?
                } else {
                    x.broadcast_matmul(&w.t()?)?
                };
                let z = match self.bias() {
                    Some(b) => z.broadcast_add(&b.as_tensor().detach())?,
                    None => z,
                };
                tap(z, x.detach(), tape, layer)
            }
        }
    }

    fn vars(&self) -> Vec<Var> {
        std::iter::once(self.weight())
            .chain(self.bias())
            .cloned()
            .collect()
    }

    // The per-sample rule is nn::Linear's own (`nn::linear_contributions`); norms and
    // clipped sums are the DP layers' (`nn::squared_norms`, `nn::clipped_sum`).
    fn squared_norms(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Tensor> {
        let mut total: Option<Tensor> = None;
        for (var, c) in contributions(self, entry, grad_out)? {
            let shape = var.as_tensor().shape();
            let sq = nn::squared_norms(&[c], shape, nn::NormMethod::Auto, 0)?.squared;
            total = Some(match total {
                None => sq,
                Some(t) => (t + sq)?,
            });
        }
        total.ok_or_else(|| Error::invalid_model("Linear", "a layer without parameters"))
    }

    fn clipped_sum(
        &self,
        entry: &TapeEntry,
        grad_out: &Tensor,
        factors: &Tensor,
    ) -> Result<Vec<Tensor>> {
        contributions(self, entry, grad_out)?
            .into_iter()
            .map(|(var, c)| nn::clipped_sum(&[c], None, factors, None, var.as_tensor().shape()))
            .collect()
    }

    fn per_sample_grads(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Vec<Tensor>> {
        contributions(self, entry, grad_out)?
            .into_iter()
            .map(|(var, c)| nn::per_sample(&[c], var.as_tensor().shape()))
            .collect()
    }

    fn fused_layer(&self) -> Option<LayerSpec> {
        self.bias()?;
        Some(LayerSpec::Linear {
            out_features: self.weight().as_tensor().dim(0).ok()?,
        })
    }

    fn has_input_gradient(&self) -> bool {
        true
    }

    fn input_gradient(&self, _entry: &TapeEntry, grad_out: &Tensor) -> Result<Tensor> {
        let w = self.weight().as_tensor().detach();
        if grad_out.rank() == 2 && cpu::applies(grad_out) {
            return Ok(grad_out
                .contiguous()?
                .apply_op2_no_bwd(&w, &Matmul::input_gradient())?);
        }
        Ok(grad_out.broadcast_matmul(&w)?)
    }
}
