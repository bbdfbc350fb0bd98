//! Batch samplers, each paired with the accounting event of one step.

use dp_accounting::{DpEvent, NeighbouringRelation};
use dp_mechanisms::NoiseSource;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How batches are drawn from a dataset of n records.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sampler {
    /// Each record joins each batch independently with probability q (batches may be
    /// empty). Accounted as `PoissonSampled(q, Gaussian(σ))` under add/remove neighbours
    /// (Mironov, Talwar, Zhang 2019).
    Poisson {
        /// q.
        sampling_rate: f64,
    },
    /// Each batch is a uniformly random subset of exactly `batch_size` records, drawn
    /// afresh every step. Accounted as `SampledWithoutReplacement(n, m, Gaussian(σ))`
    /// under replace-one neighbours (Wang, Balle, Kasiviswanathan 2019).
    FixedSize {
        /// m.
        batch_size: usize,
    },
}

impl Sampler {
    /// Checks the sampler against a dataset of `n` records.
    pub fn validate(&self, n: usize) -> Result<()> {
        match *self {
            Sampler::Poisson { sampling_rate }
                if !(sampling_rate > 0.0 && sampling_rate <= 1.0) =>
            {
                Err(Error::InvalidConfig(format!(
                    "sampling rate {sampling_rate} must be in (0, 1]"
                )))
            }
            Sampler::FixedSize { batch_size } if batch_size == 0 || batch_size > n => Err(
                Error::InvalidConfig(format!("batch size {batch_size} must be in 1..={n}")),
            ),
            _ if n == 0 => Err(Error::InvalidConfig("the dataset is empty".into())),
            _ => Ok(()),
        }
    }

    /// The expected batch size, which the noisy sum is divided by.
    pub fn expected_batch_size(&self, n: usize) -> f64 {
        match *self {
            Sampler::Poisson { sampling_rate } => sampling_rate * n as f64,
            Sampler::FixedSize { batch_size } => batch_size as f64,
        }
    }

    /// Steps per epoch: n divided by the expected batch size, rounded.
    pub fn steps_per_epoch(&self, n: usize) -> usize {
        (n as f64 / self.expected_batch_size(n)).round().max(1.0) as usize
    }

    /// The neighbouring relation its accounting assumes.
    pub fn relation(&self) -> NeighbouringRelation {
        match self {
            Sampler::Poisson { .. } => NeighbouringRelation::AddOrRemoveOne,
            Sampler::FixedSize { .. } => NeighbouringRelation::ReplaceOne,
        }
    }

    /// The event of one step on a dataset of `n` records, where σ = `noise_multiplier` is
    /// the noise standard deviation divided by the clipping bound C.
    ///
    /// Under add/remove neighbours (Poisson) the clipped sum has sensitivity C, so the
    /// event's multiplier is σ. Under replace-one neighbours (fixed-size batches) one
    /// replaced record moves the sum by up to 2C, so the event's multiplier — noise over
    /// *sensitivity* — is σ/2.
    pub fn step_event(&self, n: usize, noise_multiplier: f64) -> DpEvent {
        match *self {
            Sampler::Poisson { sampling_rate } => {
                DpEvent::poisson_sampled(sampling_rate, DpEvent::gaussian(noise_multiplier))
            }
            Sampler::FixedSize { batch_size } => DpEvent::sampled_without_replacement(
                n as u64,
                batch_size as u64,
                DpEvent::gaussian(noise_multiplier / 2.0),
            ),
        }
    }

    /// Draws one batch of indices into `out` (cleared first).
    pub fn draw(&self, n: usize, noise: &mut NoiseSource, out: &mut Vec<usize>) {
        out.clear();
        match *self {
            Sampler::Poisson { sampling_rate } if sampling_rate >= 1.0 => out.extend(0..n),
            Sampler::Poisson { sampling_rate } => {
                // Geometric skips: the gap to the next included record is Geometric(q).
                let log_keep = (-sampling_rate).ln_1p();
                let mut i = 0usize;
                loop {
                    let u = 1.0 - noise.uniform(); // (0, 1]
                    let gap = (u.ln() / log_keep).floor();
                    if !gap.is_finite() || gap >= (n - i) as f64 {
                        break;
                    }
                    i += gap as usize;
                    out.push(i);
                    i += 1;
                    if i >= n {
                        break;
                    }
                }
            }
            Sampler::FixedSize { batch_size } => {
                // Floyd's algorithm: a uniform subset of exactly m indices.
                let mut chosen = std::collections::BTreeSet::new();
                for j in n - batch_size..n {
                    let t = (noise.uniform() * (j + 1) as f64) as usize;
                    let t = t.min(j);
                    if !chosen.insert(t) {
                        chosen.insert(j);
                    }
                }
                out.extend(chosen);
            }
        }
    }
}
