//! The DP fully connected layer ([`nn::Linear`]) as a stage of the sequential tier.

use candle_core::{Tensor, Var};

use super::layer::{materialised_squared_norms, DpLayer};
use super::tape::{tap, Tape, TapeEntry};
use crate::cpu::{self, Matmul};
use crate::error::Result;
use crate::fused::LayerSpec;
use crate::nn;

/// Treats (B, in) as (B, 1, in) so one code path serves both.
fn as_sequence(t: &Tensor) -> Result<Tensor> {
    Ok(if t.rank() == 2 {
        t.unsqueeze(1)?
    } else {
        t.clone()
    })
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

    fn squared_norms(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Tensor> {
        if entry.input.rank() == 2 {
            // Ghost norm (Goodfellow 2015): ‖g‖²·(‖a‖² + 1) for a single token (+ 1: the
            // bias).
            let g2 = grad_out.sqr()?.sum(1)?;
            let bias = if self.bias().is_some() { 1.0 } else { 0.0 };
            let a2 = (entry.input.sqr()?.sum(1)? + bias)?;
            return Ok((g2 * a2)?);
        }
        materialised_squared_norms(&self.per_sample_grads(entry, grad_out)?)
    }

    fn clipped_sum(
        &self,
        entry: &TapeEntry,
        grad_out: &Tensor,
        factors: &Tensor,
    ) -> Result<Vec<Tensor>> {
        let g = as_sequence(grad_out)?;
        let a = as_sequence(&entry.input)?;
        let (b, t, out) = g.dims3()?;
        let gc = g
            .broadcast_mul(&factors.reshape((b, 1, 1))?)?
            .reshape((b * t, out))?;
        let a = a.reshape((b * t, ()))?;
        let weight = gc.t()?.matmul(&a)?;
        Ok(match self.bias() {
            Some(_) => vec![weight, gc.sum(0)?],
            None => vec![weight],
        })
    }

    fn per_sample_grads(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Vec<Tensor>> {
        let g = as_sequence(grad_out)?;
        let a = as_sequence(&entry.input)?;
        let weight = g.transpose(1, 2)?.contiguous()?.matmul(&a.contiguous()?)?;
        Ok(match self.bias() {
            Some(_) => vec![weight, g.sum(1)?],
            None => vec![weight],
        })
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
