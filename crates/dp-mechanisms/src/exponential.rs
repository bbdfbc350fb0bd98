//! The exponential mechanism, by the Gumbel-max trick.

use dp_accounting::DpEvent;

use crate::error::{require_scores, Result};
use crate::mechanism::Mechanism;
use crate::noise::NoiseSource;
use dp_accounting::validate;

/// Selects index i with probability ∝ `exp(ε·uᵢ/(2Δ))` (`exp(ε·uᵢ/Δ)` for monotone
/// utilities) from a score vector u of sensitivity Δ.
///
/// Implemented as `argmax(uᵢ·scale + Gᵢ)` with independent standard Gumbel Gᵢ, which has
/// exactly that distribution (the Gumbel-max trick; Durfee & Rogers 2019, Lemma 4.2), in
/// one pass and without normalising constants that could overflow.
///
/// # Privacy
/// ε-DP (McSherry & Talwar 2007, Thm 6; the monotone case Dwork & Roth 2014, Thm 3.10
/// remark) and ε-bounded range, hence the tighter RDP curve of Cesar & Rogers 2021
/// (arXiv 2004.07223, §3). The event is `Exponential { epsilon }`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExponentialMechanism {
    sensitivity: f64,
    epsilon: f64,
    monotone: bool,
}

impl ExponentialMechanism {
    /// From the utility's sensitivity Δ, ε, and whether utilities are monotone (all move
    /// in the same direction between neighbours, e.g. counts).
    pub fn new(sensitivity: f64, epsilon: f64, monotone: bool) -> Result<Self> {
        validate::positive("sensitivity", sensitivity)?;
        validate::positive("epsilon", epsilon)?;
        Ok(ExponentialMechanism {
            sensitivity,
            epsilon,
            monotone,
        })
    }

    /// The mechanism's privacy parameter ε: the scores' weights are exp(ε·u/(2Δ))
    /// (exp(ε·u/Δ) when the scores are monotone).
    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    /// The factor multiplying the scores in the exponent.
    pub(crate) fn score_scale(&self) -> f64 {
        if self.monotone {
            self.epsilon / self.sensitivity
        } else {
            self.epsilon / (2.0 * self.sensitivity)
        }
    }

    /// The selected index. Scores must be non-empty and finite.
    pub fn select(&self, scores: &[f64], noise: &mut NoiseSource) -> Result<usize> {
        require_scores(scores)?;
        let keys = gumbel_keys(scores, self.score_scale(), noise);
        let mut best = (0, f64::NEG_INFINITY);
        for (i, &key) in keys.iter().enumerate() {
            if key > best.1 {
                best = (i, key);
            }
        }
        Ok(best.0)
    }
}

impl Mechanism for ExponentialMechanism {
    fn event(&self) -> DpEvent {
        DpEvent::Exponential {
            epsilon: self.epsilon,
        }
    }
}

/// `scale·uᵢ + Gᵢ` for every score, with independent standard Gumbel Gᵢ (parallel chunks).
pub(crate) fn gumbel_keys(scores: &[f64], scale: f64, noise: &mut NoiseSource) -> Vec<f64> {
    let mut keys = vec![0.0; scores.len()];
    noise.for_each_chunk(&mut keys, |source, offset, chunk| {
        for (key, &u) in chunk.iter_mut().zip(&scores[offset..]) {
            *key = scale * u + source.standard_gumbel();
        }
    });
    keys
}
