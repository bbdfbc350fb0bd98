//! The update rules every algorithm applies to its (noisy) gradient: SGD with momentum
//! and Adam. One kernel, so that an algorithm's update is the same arithmetic whichever
//! algorithm produced the gradient.

use candle_core::{Tensor, Var};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use dp_accounting::validate;

/// The update rule applied to the noisy average gradient.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Optimizer {
    /// SGD with (PyTorch-style) momentum: v ← μv + g, θ ← θ − ηv.
    Sgd {
        /// The learning rate η (step length per unit of gradient).
        lr: f64,
        /// The momentum μ ∈ [0, 1) (0: plain SGD).
        momentum: f64,
    },
    /// Adam with bias correction (Kingma & Ba 2015, Algorithm 1): NoisyAdam when fed
    /// noisy gradients.
    Adam {
        /// The learning rate η.
        lr: f64,
        /// The first moment's decay β₁ (commonly 0.9).
        beta1: f64,
        /// The second moment's decay β₂ (commonly 0.999).
        beta2: f64,
        /// The constant added to the denominator's √v̂ (commonly 1e-8).
        eps: f64,
    },
}

impl Optimizer {
    /// The learning rate.
    pub fn learning_rate(&self) -> f64 {
        match *self {
            Optimizer::Sgd { lr, .. } | Optimizer::Adam { lr, .. } => lr,
        }
    }

    /// Sets the learning rate (finite and ≥ 0).
    pub fn set_learning_rate(&mut self, lr: f64) -> Result<()> {
        validate::non_negative("lr", lr)?;
        match self {
            Optimizer::Sgd { lr: current, .. } | Optimizer::Adam { lr: current, .. } => {
                *current = lr;
            }
        }
        Ok(())
    }

    /// Zeroed moments for `params` parameters: one vector for SGD (the velocity), two for
    /// Adam (first and second moments).
    pub fn initial_moments(&self, params: usize) -> Vec<Vec<f32>> {
        vec![vec![0.0; params]; self.moment_count()]
    }

    /// How many moment vectors the rule keeps: 1 for SGD (the velocity), 2 for Adam.
    pub fn moment_count(&self) -> usize {
        match self {
            Optimizer::Sgd { .. } => 1,
            Optimizer::Adam { .. } => 2,
        }
    }

    /// Applies the `step`-th update (1-based: Adam's bias correction uses it) of
    /// `gradient` to `theta`, updating `moments` (from [`initial_moments`](Self::initial_moments)).
    pub fn update(&self, theta: &mut [f32], moments: &mut [Vec<f32>], gradient: &[f32], step: u64) {
        match *self {
            Optimizer::Sgd { lr, momentum } => {
                let v = &mut moments[0];
                for ((t, vi), &g) in theta.iter_mut().zip(v.iter_mut()).zip(gradient) {
                    *vi = momentum as f32 * *vi + g;
                    *t -= lr as f32 * *vi;
                }
            }
            Optimizer::Adam {
                lr,
                beta1,
                beta2,
                eps,
            } => {
                let step = step as i32;
                let (c1, c2) = (1.0 - beta1.powi(step), 1.0 - beta2.powi(step));
                let (m, rest) = moments.split_at_mut(1);
                for (((t, mi), vi), &g) in theta
                    .iter_mut()
                    .zip(m[0].iter_mut())
                    .zip(rest[0].iter_mut())
                    .zip(gradient)
                {
                    *mi = beta1 as f32 * *mi + (1.0 - beta1 as f32) * g;
                    *vi = beta2 as f32 * *vi + (1.0 - beta2 as f32) * g * g;
                    let m_hat = f64::from(*mi) / c1;
                    let v_hat = f64::from(*vi) / c2;
                    *t -= (lr * m_hat / (v_hat.sqrt() + eps)) as f32;
                }
            }
        }
    }

    /// [`update`](Self::update) on tensors on the parameters' device: `theta` updated in
    /// place from `scale · gradient`, one tensor per parameter, `moments[k][i]` the k-th
    /// moment of parameter i. The same arithmetic in f32 (Adam's bias corrections are
    /// folded into two scalars; the host path evaluates them per coordinate in f64).
    pub fn update_tensors(
        &self,
        theta: &[Var],
        moments: &mut [Vec<Tensor>],
        gradient: &[Tensor],
        scale: f64,
        step: u64,
    ) -> Result<()> {
        for (i, (var, g)) in theta.iter().zip(gradient).enumerate() {
            let g = g.affine(scale, 0.0)?;
            let t = var.as_tensor();
            let next = match *self {
                Optimizer::Sgd { lr, momentum } => {
                    let v = (moments[0][i].affine(momentum, 0.0)? + g)?;
                    let next = (t - v.affine(lr, 0.0)?)?;
                    moments[0][i] = v;
                    next
                }
                Optimizer::Adam {
                    lr,
                    beta1,
                    beta2,
                    eps,
                } => {
                    let step = step as i32;
                    let (c1, c2) = (1.0 - beta1.powi(step), 1.0 - beta2.powi(step));
                    let m = (moments[0][i].affine(beta1, 0.0)? + g.affine(1.0 - beta1, 0.0)?)?;
                    let v =
                        (moments[1][i].affine(beta2, 0.0)? + g.sqr()?.affine(1.0 - beta2, 0.0)?)?;
                    let denominator = v.affine(1.0 / c2, 0.0)?.sqrt()?.affine(1.0, eps)?;
                    let next = (t - (m.affine(lr / c1, 0.0)? / denominator)?)?;
                    moments[0][i] = m;
                    moments[1][i] = v;
                    next
                }
            };
            var.set(&next)?;
        }
        Ok(())
    }
}
