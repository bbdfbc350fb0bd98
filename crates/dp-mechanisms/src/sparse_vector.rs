//! The sparse vector technique: AboveThreshold, Sparse and NumericSparse
//! (Dwork & Roth 2014, Algorithms 1–3).

use dp_accounting::DpEvent;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::mechanism::Mechanism;
use crate::noise::NoiseSource;
use dp_accounting::validate;

/// Which algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SparseVariant {
    /// Dwork & Roth Algorithm 2 ("Sparse"): reports *which* queries are above the
    /// threshold (⊤/⊥), at most `cutoff` of them. `cutoff = 1`, δ = 0 is Algorithm 1
    /// (AboveThreshold).
    Sparse,
    /// Dwork & Roth Algorithm 3 ("NumericSparse"): also releases a noisy value for each
    /// query above the threshold.
    Numeric,
}

/// One answered (above-threshold) query.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SparseAnswer {
    /// The query's position in the stream.
    pub index: usize,
    /// Its noisy value (NumericSparse only).
    pub value: Option<f64>,
}

/// The result of a sparse-vector run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SparseOutcome {
    /// The above-threshold queries, in stream order (all others are ⊥).
    pub answers: Vec<SparseAnswer>,
    /// How many queries were examined before halting (or the stream ended).
    pub examined: usize,
    /// Whether the run halted on reaching the cutoff.
    pub halted: bool,
}

/// The sparse vector technique over a stream of queries of sensitivity Δ.
///
/// With σ(ε) = 2cΔ/ε if δ = 0, else √(32c·ln(k/δ))·Δ/ε (k = 1 for Sparse, 2 for
/// NumericSparse): the threshold is perturbed as T̂ = T + Lap(σ(ε₁)), each query as
/// fᵢ + Lap(2σ(ε₁)); a query with fᵢ + νᵢ ≥ T̂ is answered (NumericSparse adds
/// Lap(σ(ε₂)) to its value) and T̂ is redrawn; the run halts after c answers. Sparse
/// uses ε₁ = ε; NumericSparse splits ε₁ = 8ε/9, ε₂ = 2ε/9 (δ = 0) or
/// ε₁ = √512/(√512+1)·ε, ε₂ = 2/(√512+1)·ε (δ > 0).
///
/// # Privacy
/// (ε, δ)-DP: Dwork & Roth 2014, Thm 3.25 (Sparse, δ = 0), Thm 3.26 (δ > 0) and
/// Thm 3.28 (NumericSparse); AboveThreshold is Thm 3.23. No RDP curve is used: the event
/// is `EpsilonDelta { epsilon, delta }`.
///
/// The Wide paper's Algorithm 1 (`docs/mechanisms.md`, "Sparse vector constants") runs NumericSparse on
/// fᵢ = |uᵢ| of a gradient to release its largest coordinates: see
/// [`release_largest_magnitudes`](Self::release_largest_magnitudes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SparseVector {
    variant: SparseVariant,
    sensitivity: f64,
    threshold: f64,
    cutoff: usize,
    epsilon: f64,
    delta: f64,
}

impl SparseVector {
    /// AboveThreshold (Dwork & Roth Alg. 1): the first query above the threshold, ε-DP.
    pub fn above_threshold(sensitivity: f64, threshold: f64, epsilon: f64) -> Result<Self> {
        Self::new(
            SparseVariant::Sparse,
            sensitivity,
            threshold,
            1,
            epsilon,
            0.0,
        )
    }

    /// Sparse or NumericSparse with cutoff c; δ = 0 or δ ∈ (0, 1).
    pub fn new(
        variant: SparseVariant,
        sensitivity: f64,
        threshold: f64,
        cutoff: usize,
        epsilon: f64,
        delta: f64,
    ) -> Result<Self> {
        validate::positive("sensitivity", sensitivity)?;
        validate::positive("epsilon", epsilon)?;
        if !threshold.is_finite() {
            return Err(Error::InvalidParameter {
                name: "threshold",
                value: threshold,
                reason: "must be finite",
            });
        }
        if cutoff == 0 {
            return Err(Error::InvalidParameter {
                name: "cutoff",
                value: 0.0,
                reason: "must be >= 1",
            });
        }
        if delta != 0.0 {
            validate::open_unit("delta", delta)?;
        }
        Ok(SparseVector {
            variant,
            sensitivity,
            threshold,
            cutoff,
            epsilon,
            delta,
        })
    }

    /// (ε₁, ε₂): the budget for threshold/queries and for the released values.
    pub fn budget_split(&self) -> (f64, f64) {
        match self.variant {
            SparseVariant::Sparse => (self.epsilon, 0.0),
            SparseVariant::Numeric if self.delta == 0.0 => {
                (8.0 * self.epsilon / 9.0, 2.0 * self.epsilon / 9.0)
            }
            SparseVariant::Numeric => {
                let r = 512f64.sqrt();
                (r / (r + 1.0) * self.epsilon, 2.0 / (r + 1.0) * self.epsilon)
            }
        }
    }

    /// σ(ε) of Dwork & Roth Alg. 2/3.
    pub fn sigma(&self, epsilon: f64) -> f64 {
        let c = self.cutoff as f64;
        if self.delta == 0.0 {
            2.0 * c * self.sensitivity / epsilon
        } else {
            let log_term = match self.variant {
                SparseVariant::Sparse => (1.0 / self.delta).ln(),
                SparseVariant::Numeric => (2.0 / self.delta).ln(),
            };
            (32.0 * c * log_term).sqrt() * self.sensitivity / epsilon
        }
    }

    /// Runs over `queries` in order. Queries must be finite.
    pub fn release(&self, queries: &[f64], noise: &mut NoiseSource) -> Result<SparseOutcome> {
        if let Some(i) = queries.iter().position(|q| !q.is_finite()) {
            return Err(Error::InvalidInput(format!("query {i} is {}", queries[i])));
        }
        let (eps1, eps2) = self.budget_split();
        let threshold_scale = self.sigma(eps1);
        let value_scale = if eps2 > 0.0 { self.sigma(eps2) } else { 0.0 };
        let mut noisy_threshold = self.threshold + noise.laplace(threshold_scale);
        let mut answers = Vec::new();
        for (index, &f) in queries.iter().enumerate() {
            if f + noise.laplace(2.0 * threshold_scale) >= noisy_threshold {
                let value = match self.variant {
                    SparseVariant::Numeric => Some(f + noise.laplace(value_scale)),
                    SparseVariant::Sparse => None,
                };
                answers.push(SparseAnswer { index, value });
                if answers.len() == self.cutoff {
                    return Ok(SparseOutcome {
                        answers,
                        examined: index + 1,
                        halted: true,
                    });
                }
                noisy_threshold = self.threshold + noise.laplace(threshold_scale);
            }
        }
        Ok(SparseOutcome {
            answers,
            examined: queries.len(),
            halted: false,
        })
    }

    /// The Wide paper's use: runs on |uᵢ| of a vector and returns the answered
    /// coordinates (the support of the sparse update), in order. Noisy magnitudes, if
    /// wanted, come from [`release`](Self::release) on the same magnitudes.
    pub fn release_largest_magnitudes(
        &self,
        values: &[f64],
        noise: &mut NoiseSource,
    ) -> Result<Vec<usize>> {
        let magnitudes: Vec<f64> = values.iter().map(|v| v.abs()).collect();
        Ok(self
            .release(&magnitudes, noise)?
            .answers
            .into_iter()
            .map(|a| a.index)
            .collect())
    }
}

impl Mechanism for SparseVector {
    fn event(&self) -> DpEvent {
        DpEvent::EpsilonDelta {
            epsilon: self.epsilon,
            delta: self.delta,
        }
    }
}
