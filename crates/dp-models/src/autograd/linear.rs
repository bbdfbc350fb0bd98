//! The fully connected layer.

use candle_core::{Tensor, Var};

use super::layer::{materialised_squared_norms, DpLayer};
use super::tape::{tap, Tape, TapeEntry};
use crate::cpu::{self, Matmul};
use crate::error::{Error, Result};

/// Fully connected layer with bias, on (B, in) or on sequences (B, T, in).
pub struct DpLinear {
    weight: Var,
    bias: Var,
}

impl DpLinear {
    /// From a weight (out, in) and a bias (out).
    pub fn new(weight: Tensor, bias: Tensor) -> Result<Self> {
        let (out, _) = weight.dims2()?;
        if bias.dims1()? != out {
            return Err(Error::invalid_model(
                "Linear",
                "linear bias does not match the weight",
            ));
        }
        Ok(DpLinear {
            weight: Var::from_tensor(&weight)?,
            bias: Var::from_tensor(&bias)?,
        })
    }

    /// Treats (B, in) as (B, 1, in) so one code path serves both.
    fn as_sequence(t: &Tensor) -> Result<Tensor> {
        Ok(if t.rank() == 2 {
            t.unsqueeze(1)?
        } else {
            t.clone()
        })
    }
}

impl DpLayer for DpLinear {
    fn forward(&self, x: &Tensor, tape: Option<(&mut Tape, usize)>) -> Result<Tensor> {
        match tape {
            None => Ok(x
                .broadcast_matmul(&self.weight.as_tensor().t()?)?
                .broadcast_add(self.bias.as_tensor())?),
            Some((tape, layer)) => {
                let (w, b) = (
                    self.weight.as_tensor().detach(),
                    self.bias.as_tensor().detach(),
                );
                let z = if x.rank() == 2 && tape.cpu_ops_apply(x) {
                    // Input-gradient-only matmul: no unused weight gradient.
                    x.contiguous()?.apply_op2(
                        &w,
                        Matmul {
                            rhs_transposed: true,
                        },
                    )?
                } else {
                    x.broadcast_matmul(&w.t()?)?
                };
                tap(z.broadcast_add(&b)?, x.detach(), tape, layer)
            }
        }
    }

    fn vars(&self) -> Vec<Var> {
        vec![self.weight.clone(), self.bias.clone()]
    }

    fn squared_norms(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Tensor> {
        if entry.input.rank() == 2 {
            // Ghost norm (Goodfellow 2015): ‖g‖²·(‖a‖² + 1) for a single token.
            let g2 = grad_out.sqr()?.sum(1)?;
            let a2 = (entry.input.sqr()?.sum(1)? + 1.0)?;
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
        let g = Self::as_sequence(grad_out)?;
        let a = Self::as_sequence(&entry.input)?;
        let (b, t, out) = g.dims3()?;
        let gc = g
            .broadcast_mul(&factors.reshape((b, 1, 1))?)?
            .reshape((b * t, out))?;
        let a = a.reshape((b * t, ()))?;
        Ok(vec![gc.t()?.matmul(&a)?, gc.sum(0)?])
    }

    fn per_sample_grads(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Vec<Tensor>> {
        let g = Self::as_sequence(grad_out)?;
        let a = Self::as_sequence(&entry.input)?;
        Ok(vec![
            g.transpose(1, 2)?.contiguous()?.matmul(&a.contiguous()?)?,
            g.sum(1)?,
        ])
    }

    fn has_input_gradient(&self) -> bool {
        true
    }

    fn input_gradient(&self, _entry: &TapeEntry, grad_out: &Tensor) -> Result<Tensor> {
        let w = self.weight.as_tensor().detach();
        if grad_out.rank() == 2 && cpu::applies(grad_out) {
            return Ok(grad_out.contiguous()?.apply_op2_no_bwd(
                &w,
                &Matmul {
                    rhs_transposed: false,
                },
            )?);
        }
        Ok(grad_out.broadcast_matmul(&w)?)
    }
}
