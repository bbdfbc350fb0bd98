//! The banded Toeplitz strategy of BandMF: a lower-triangular Toeplitz C with b bands
//! (`C[i, j] = c_{i−j}` for `0 ≤ i − j < b`, else 0) factoring the prefix-sum workload
//! A = B·C (B = A·C⁻¹); the mechanism releases `A x + B z = B (C x + z)`, i.e. each step's
//! gradient sum plus the correlated noise `(C⁻¹ z)_t` (Choquette-Choo et al., ICML 2023;
//! banded: NeurIPS 2023; this optimiser: McKenna 2024, arXiv 2405.15913).
//!
//! The error of the prefix workload per unit of noise is
//! `‖c‖² · (1/n) Σ_t Σ_{s≤t} β_s² = ‖c‖² · (1/n) Σ_s (n − s) β_s²` with `β = C⁻¹·1`
//! (the mean squared error of the n prefix sums, the noise scaled to the sensitivity
//! `‖c‖` of one participation); it is invariant to the scale of c.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A banded lower-triangular Toeplitz strategy, by its first column `c_0..c_{b−1}`
/// (serialised as that list, checked as [`BandedToeplitz::new`] checks it when read).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Vec<f64>", into = "Vec<f64>")]
pub struct BandedToeplitz {
    coefs: Vec<f64>,
}

impl TryFrom<Vec<f64>> for BandedToeplitz {
    type Error = Error;

    fn try_from(coefs: Vec<f64>) -> Result<Self> {
        Self::new(coefs)
    }
}

impl From<BandedToeplitz> for Vec<f64> {
    fn from(strategy: BandedToeplitz) -> Self {
        strategy.coefs
    }
}

impl BandedToeplitz {
    /// The strategy with first column `coefs` (`c_0 > 0`, all finite).
    pub fn new(coefs: Vec<f64>) -> Result<Self> {
        match coefs.first() {
            Some(&c0) if c0 > 0.0 && coefs.iter().all(|c| c.is_finite()) => {
                Ok(BandedToeplitz { coefs })
            }
            _ => Err(Error::InvalidParameter {
                name: "coefs",
                value: coefs.first().copied().unwrap_or(f64::NAN),
                reason: "must be finite with a positive first entry",
            }),
        }
    }

    /// The square root of the prefix-sum matrix cut to `bands` bands (Fichtenberger,
    /// Henzinger & Upadhyay 2023): `c_k = Π_{i≤k} (2i − 1)/(2i)`; with n bands, C·C is
    /// the all-ones lower triangle.
    pub fn square_root_of_prefix_sums(bands: usize) -> Result<Self> {
        let mut coefs = Vec::with_capacity(bands);
        let mut c = 1.0;
        for k in 0..bands {
            if k > 0 {
                c *= (2 * k - 1) as f64 / (2 * k) as f64;
            }
            coefs.push(c);
        }
        Self::new(coefs)
    }

    /// `c_0..c_{b−1}`.
    pub fn coefs(&self) -> &[f64] {
        &self.coefs
    }

    /// ‖c‖₂, the norm of the first (the longest) column: the sensitivity of `C·x` to one
    /// participation, and the factor the noise of one participation is scaled by.
    pub fn column_norm(&self) -> f64 {
        self.coefs.iter().map(|c| c * c).sum::<f64>().sqrt()
    }

    /// b, the number of bands (the diagonal included).
    pub fn bands(&self) -> usize {
        self.coefs.len()
    }

    /// `C⁻¹·v` by the banded recursion `x_t = (v_t − Σ_{1≤j<b} c_j x_{t−j}) / c_0`.
    pub fn solve(&self, v: &[f64]) -> Vec<f64> {
        let mut x = Vec::with_capacity(v.len());
        for (t, &vt) in v.iter().enumerate() {
            let carried: f64 = (1..self.coefs.len().min(t + 1))
                .map(|j| self.coefs[j] * x[t - j])
                .sum();
            x.push((vt - carried) / self.coefs[0]);
        }
        x
    }

    /// The prefix-sum workload's mean squared error over n steps per unit of noise at
    /// sensitivity ‖c‖ (module docs).
    pub fn prefix_loss(&self, n: usize) -> f64 {
        self.loss_and_gradient(n).0
    }

    /// The loss and its gradient in the coefficients: with `β = C⁻¹·1`,
    /// `g_s = 2(n − s)β_s / n`, `Cᵀλ = g` (a backward recursion) and
    /// `∂err/∂c_j = −Σ_t λ_t β_{t−j}`; the loss is `‖c‖²·err`.
    fn loss_and_gradient(&self, n: usize) -> (f64, Vec<f64>) {
        let beta = self.solve(&vec![1.0; n]);
        let nf = n as f64;
        let err: f64 = beta
            .iter()
            .enumerate()
            .map(|(s, b)| (nf - s as f64) * b * b)
            .sum::<f64>()
            / nf;
        let g: Vec<f64> = beta
            .iter()
            .enumerate()
            .map(|(s, b)| 2.0 * (nf - s as f64) * b / nf)
            .collect();
        // Cᵀλ = g: λ_t = (g_t − Σ_{1≤j<b} c_j λ_{t+j}) / c_0, from the end.
        let b = self.coefs.len();
        let mut lambda = vec![0.0; n];
        for t in (0..n).rev() {
            let carried: f64 = (1..b)
                .filter(|j| t + j < n)
                .map(|j| self.coefs[j] * lambda[t + j])
                .sum();
            lambda[t] = (g[t] - carried) / self.coefs[0];
        }
        let norm2: f64 = self.coefs.iter().map(|c| c * c).sum();
        let gradient = (0..b)
            .map(|j| {
                let d_err: f64 = -(j..n).map(|t| lambda[t] * beta[t - j]).sum::<f64>();
                norm2 * d_err + 2.0 * self.coefs[j] * err
            })
            .collect();
        (norm2 * err, gradient)
    }

    /// [`Self::loss_and_gradient`] for the tests.
    #[cfg(test)]
    pub(crate) fn loss_and_gradient_for_tests(&self, n: usize) -> (f64, Vec<f64>) {
        self.loss_and_gradient(n)
    }

    /// The b-band strategy minimising the prefix loss over n steps: gradient descent with
    /// a backtracking (Armijo) line search from the square root of the prefix sums,
    /// `iterations` steps at most, scaled to ‖c‖ = 1.
    pub fn optimize(n: usize, bands: usize, iterations: usize) -> Result<Self> {
        if n == 0 || bands == 0 || bands > n {
            return Err(Error::InvalidParameter {
                name: "bands",
                value: bands as f64,
                reason: "must be in 1..=n, with n > 0 steps",
            });
        }
        let mut current = Self::square_root_of_prefix_sums(bands)?;
        let (mut loss, mut grad) = current.loss_and_gradient(n);
        let mut step = 1.0;
        for _ in 0..iterations {
            let g2: f64 = grad.iter().map(|g| g * g).sum();
            if g2 <= 1e-30 {
                break;
            }
            let mut accepted = None;
            while step > 1e-16 {
                let coefs: Vec<f64> = current
                    .coefs
                    .iter()
                    .zip(&grad)
                    .map(|(c, g)| c - step * g)
                    .collect();
                if let Ok(candidate) = Self::new(coefs) {
                    let (l, g) = candidate.loss_and_gradient(n);
                    if l <= loss - 1e-4 * step * g2 {
                        accepted = Some((candidate, l, g));
                        break;
                    }
                }
                step *= 0.5;
            }
            let Some((candidate, l, g)) = accepted else {
                break;
            };
            (current, loss, grad) = (candidate, l, g);
            step *= 2.0;
        }
        let norm = current.coefs.iter().map(|c| c * c).sum::<f64>().sqrt();
        Self::new(current.coefs.iter().map(|c| c / norm).collect())
    }

    /// The squared L2 sensitivity of C·x over n steps when each example takes part at
    /// most `max_participations` times, at least `min_sep` steps apart: the norm² of
    /// the sum of the columns `0, s, 2s, …` (k = min(max_participations, ⌈n/s⌉) of
    /// them). Exact for coefficients that are non-negative and non-increasing (Kalinin &
    /// Lampert 2024, arXiv 2405.13763, Thm 2) and, when `min_sep ≥ b`, for any
    /// coefficients (the columns are then orthogonal and their norms fall with the
    /// index); otherwise computed on the reverse running maximum of |c|, an upper bound.
    pub fn sensitivity_squared(&self, n: usize, min_sep: usize, max_participations: usize) -> f64 {
        let s = min_sep.max(1);
        let k = max_participations.min(n.div_ceil(s));
        let b = self.coefs.len();
        if s >= b {
            return (0..k)
                .map(|m| {
                    self.coefs
                        .iter()
                        .take(n - m * s)
                        .map(|c| c * c)
                        .sum::<f64>()
                })
                .sum();
        }
        // Reverse running maximum of |c|: non-negative, non-increasing, ≥ |c|.
        let mut coefs: Vec<f64> = self.coefs.iter().map(|c| c.abs()).collect();
        for j in (0..b - 1).rev() {
            coefs[j] = coefs[j].max(coefs[j + 1]);
        }
        let mut column_sum = vec![0.0; n];
        for m in 0..k {
            for (j, c) in coefs.iter().enumerate() {
                if let Some(slot) = column_sum.get_mut(m * s + j) {
                    *slot += c;
                }
            }
        }
        column_sum.iter().map(|v| v * v).sum()
    }
}
