//! Report-noisy-max.

use dp_accounting::DpEvent;
use serde::{Deserialize, Serialize};

use crate::error::{require_scores, Result};
use crate::mechanism::Mechanism;
use crate::noise::NoiseSource;
use dp_accounting::validate;

/// The noise added to each score before taking the argmax.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoisyMaxNoise {
    /// Laplace with scale 2Δ/ε (Δ/ε for monotone scores): Dwork & Roth 2014, Claim 3.9.
    Laplace,
    /// Exponential (one-sided) with scale 2Δ/ε (Δ/ε monotone): equivalent to
    /// permute-and-flip (Ding, Kifer et al. 2021, "The permute-and-flip mechanism is
    /// identical to report-noisy-max with exponential noise", Thm 1; McKenna & Sheldon 2020).
    Exponential,
    /// Gumbel with scale 2Δ/ε (Δ/ε monotone): identical in distribution to the
    /// exponential mechanism, hence ε-bounded range.
    Gumbel,
}

/// Returns the index of the largest noisy score.
///
/// # Privacy
/// ε-DP for every noise choice (see [`NoisyMaxNoise`]). The event is
/// `Exponential { epsilon }` for Gumbel noise (bounded range) and
/// `EpsilonDelta { epsilon, delta: 0 }` otherwise.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReportNoisyMax {
    sensitivity: f64,
    epsilon: f64,
    monotone: bool,
    noise: NoisyMaxNoise,
}

impl ReportNoisyMax {
    /// From the scores' sensitivity Δ, ε, monotonicity and the noise distribution.
    pub fn new(
        sensitivity: f64,
        epsilon: f64,
        monotone: bool,
        noise: NoisyMaxNoise,
    ) -> Result<Self> {
        validate::positive("sensitivity", sensitivity)?;
        validate::positive("epsilon", epsilon)?;
        Ok(ReportNoisyMax {
            sensitivity,
            epsilon,
            monotone,
            noise,
        })
    }

    /// The noise scale: 2Δ/ε, or Δ/ε for monotone scores.
    pub fn noise_scale(&self) -> f64 {
        let factor = if self.monotone { 1.0 } else { 2.0 };
        factor * self.sensitivity / self.epsilon
    }

    /// The index of the largest noisy score.
    pub fn select(&self, scores: &[f64], noise: &mut NoiseSource) -> Result<usize> {
        require_scores(scores)?;
        let scale = self.noise_scale();
        let mut best = (0, f64::NEG_INFINITY);
        for (i, &u) in scores.iter().enumerate() {
            let z = match self.noise {
                NoisyMaxNoise::Laplace => noise.laplace(scale),
                NoisyMaxNoise::Exponential => scale * noise.standard_exponential(),
                NoisyMaxNoise::Gumbel => scale * noise.standard_gumbel(),
            };
            if u + z > best.1 {
                best = (i, u + z);
            }
        }
        Ok(best.0)
    }
}

impl Mechanism for ReportNoisyMax {
    fn event(&self) -> DpEvent {
        match self.noise {
            NoisyMaxNoise::Gumbel => DpEvent::Exponential {
                epsilon: self.epsilon,
            },
            NoisyMaxNoise::Laplace | NoisyMaxNoise::Exponential => DpEvent::EpsilonDelta {
                epsilon: self.epsilon,
                delta: 0.0,
            },
        }
    }
}
