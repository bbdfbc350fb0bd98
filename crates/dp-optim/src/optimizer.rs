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
    /// Lazy (sparse) Adam, as `torch.optim.SparseAdam`: Adam's arithmetic on the
    /// coordinates a step released (its support, for sparse DP-SGD), moments and weights
    /// elsewhere untouched. Without a support (dense steps) it is [`Adam`](Self::Adam).
    /// Under plain Adam an unselected coordinate still moves (its first moment decays
    /// but stays non-zero) and a coordinate selected after many unselected steps takes
    /// a step scaled by a decayed second moment; the lazy rule does neither.
    LazyAdam {
        /// The learning rate η.
        lr: f64,
        /// β₁, the decay of the first-moment average (Adam's default 0.9).
        beta1: f64,
        /// β₂, the decay of the second-moment average (Adam's default 0.999).
        beta2: f64,
        /// The constant added to √v̂.
        eps: f64,
    },
}

/// Adam's constants and the step's bias corrections 1 − βᵗ.
#[derive(Clone, Copy)]
struct AdamStep {
    lr: f64,
    beta1: f32,
    beta2: f32,
    eps: f64,
    c1: f64,
    c2: f64,
}

impl AdamStep {
    fn new(lr: f64, beta1: f64, beta2: f64, eps: f64, step: u64) -> Self {
        let step = step as i32;
        AdamStep {
            lr,
            beta1: beta1 as f32,
            beta2: beta2 as f32,
            eps,
            c1: 1.0 - beta1.powi(step),
            c2: 1.0 - beta2.powi(step),
        }
    }

    /// One coordinate's update.
    fn apply(&self, t: &mut f32, m: &mut f32, v: &mut f32, g: f32) {
        *m = self.beta1 * *m + (1.0 - self.beta1) * g;
        *v = self.beta2 * *v + (1.0 - self.beta2) * g * g;
        let m_hat = f64::from(*m) / self.c1;
        let v_hat = f64::from(*v) / self.c2;
        *t -= (self.lr * m_hat / (v_hat.sqrt() + self.eps)) as f32;
    }
}

impl Optimizer {
    /// The learning rate.
    pub fn learning_rate(&self) -> f64 {
        match *self {
            Optimizer::Sgd { lr, .. }
            | Optimizer::Adam { lr, .. }
            | Optimizer::LazyAdam { lr, .. } => lr,
        }
    }

    /// Sets the learning rate (finite and ≥ 0).
    pub fn set_learning_rate(&mut self, lr: f64) -> Result<()> {
        validate::non_negative("lr", lr)?;
        match self {
            Optimizer::Sgd { lr: current, .. }
            | Optimizer::Adam { lr: current, .. }
            | Optimizer::LazyAdam { lr: current, .. } => {
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
            Optimizer::Adam { .. } | Optimizer::LazyAdam { .. } => 2,
        }
    }

    /// Applies the `step`-th update (1-based: Adam's bias correction uses it) of
    /// `gradient` to `theta`, updating `moments` (from [`initial_moments`](Self::initial_moments)).
    pub fn update(&self, theta: &mut [f32], moments: &mut [Vec<f32>], gradient: &[f32], step: u64) {
        self.update_on(theta, moments, gradient, step, None);
    }

    /// [`update`](Self::update) for a gradient released on `support` only (zero
    /// elsewhere): the lazy rule touches those coordinates alone; the others treat the
    /// zeros as gradient, as a dense step would.
    pub fn update_on(
        &self,
        theta: &mut [f32],
        moments: &mut [Vec<f32>],
        gradient: &[f32],
        step: u64,
        support: Option<&[usize]>,
    ) {
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
            } => adam(
                AdamStep::new(lr, beta1, beta2, eps, step),
                theta,
                moments,
                gradient,
            ),
            Optimizer::LazyAdam {
                lr,
                beta1,
                beta2,
                eps,
            } => {
                let adam_step = AdamStep::new(lr, beta1, beta2, eps, step);
                let Some(support) = support else {
                    return adam(adam_step, theta, moments, gradient);
                };
                let (m, rest) = moments.split_at_mut(1);
                for &j in support {
                    adam_step.apply(&mut theta[j], &mut m[0][j], &mut rest[0][j], gradient[j]);
                }
            }
        }
    }

    /// [`update`](Self::update) on tensors on the parameters' device: `theta` updated in
    /// place from `scale · gradient`, one tensor per parameter, `moments[k][i]` the k-th
    /// moment of parameter i. The same arithmetic in f32 (Adam's bias corrections are
    /// folded into two scalars; the host path evaluates them per coordinate in f64).
    /// Device steps are dense, so [`LazyAdam`](Self::LazyAdam) is Adam here.
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
                }
                | Optimizer::LazyAdam {
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

/// Adam on every coordinate.
fn adam(step: AdamStep, theta: &mut [f32], moments: &mut [Vec<f32>], gradient: &[f32]) {
    let (m, rest) = moments.split_at_mut(1);
    for (((t, mi), vi), &g) in theta
        .iter_mut()
        .zip(m[0].iter_mut())
        .zip(rest[0].iter_mut())
        .zip(gradient)
    {
        step.apply(t, mi, vi, g);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(lr: f64) -> (Optimizer, Optimizer) {
        let (beta1, beta2, eps) = (0.9, 0.999, 1e-8);
        (
            Optimizer::Adam {
                lr,
                beta1,
                beta2,
                eps,
            },
            Optimizer::LazyAdam {
                lr,
                beta1,
                beta2,
                eps,
            },
        )
    }

    /// Without a support the lazy rule is Adam, bit for bit.
    #[test]
    fn lazy_adam_without_a_support_is_adam() {
        let (adam, lazy) = rules(0.01);
        let (mut a, mut b) = (vec![0.5f32, -1.0, 2.0], vec![0.5f32, -1.0, 2.0]);
        let (mut ma, mut mb) = (adam.initial_moments(3), lazy.initial_moments(3));
        for step in 1..=5 {
            let g = [0.3 * step as f32, -0.2, 0.0];
            adam.update(&mut a, &mut ma, &g, step);
            lazy.update_on(&mut b, &mut mb, &g, step, None);
        }
        assert_eq!(a, b);
        assert_eq!(ma, mb);
    }

    /// With a support, coordinates off it keep their weights and moments under the lazy
    /// rule, while Adam still moves a coordinate whose first moment is non-zero; on the
    /// support both take the same step.
    #[test]
    fn lazy_adam_leaves_unselected_coordinates_alone() {
        let (adam, lazy) = rules(0.01);
        let (mut a, mut b) = (vec![1.0f32, 1.0], vec![1.0f32, 1.0]);
        let (mut ma, mut mb) = (adam.initial_moments(2), lazy.initial_moments(2));
        adam.update(&mut a, &mut ma, &[1.0, 1.0], 1);
        lazy.update_on(&mut b, &mut mb, &[1.0, 1.0], 1, Some(&[0, 1]));
        assert_eq!(a, b);
        let (frozen, moments) = (b[1], mb.clone());
        adam.update_on(&mut a, &mut ma, &[0.5, 0.0], 2, Some(&[0]));
        lazy.update_on(&mut b, &mut mb, &[0.5, 0.0], 2, Some(&[0]));
        assert_eq!(a[0], b[0]);
        assert_eq!(b[1], frozen);
        assert_eq!((mb[0][1], mb[1][1]), (moments[0][1], moments[1][1]));
        assert!(a[1] < frozen, "Adam moves a coordinate with no gradient");
    }
}
