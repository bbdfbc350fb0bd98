//! Batch samplers, each paired with the accounting event of one step.

use dp_accounting::{DpEvent, NeighbouringRelation};
use dp_mechanisms::NoiseSource;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The state of a shuffled sampler: this epoch's permutation and the next position.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShuffleState {
    /// The permutation of the record indices for the current epoch.
    pub order: Vec<usize>,
    /// The first index of `order` not yet used this epoch.
    pub position: usize,
}

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
    /// Each epoch, a fresh random permutation cut into consecutive batches of
    /// `batch_size` (the last may be smaller): every record is used once per epoch.
    /// No amplification is claimed: under replace-one neighbours one record touches one
    /// batch per epoch, so an epoch is one Gaussian mechanism on it (parallel composition)
    /// with sensitivity 2C, i.e. `Gaussian(σ/2)`, charged at the first step of the epoch.
    Shuffle {
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
            Sampler::FixedSize { batch_size } | Sampler::Shuffle { batch_size } => {
                batch_size as f64
            }
        }
    }

    /// Steps per epoch: n divided by the expected batch size, rounded.
    pub fn steps_per_epoch(&self, n: usize) -> usize {
        match *self {
            Sampler::Shuffle { batch_size } => n.div_ceil(batch_size.max(1)),
            _ => (n as f64 / self.expected_batch_size(n)).round().max(1.0) as usize,
        }
    }

    /// The neighbouring relation its accounting assumes.
    pub fn relation(&self) -> NeighbouringRelation {
        match self {
            Sampler::Poisson { .. } => NeighbouringRelation::AddOrRemoveOne,
            Sampler::FixedSize { .. } | Sampler::Shuffle { .. } => NeighbouringRelation::ReplaceOne,
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
            // The whole epoch (see the variant's docs).
            Sampler::Shuffle { .. } => DpEvent::gaussian(noise_multiplier / 2.0),
        }
    }

    /// The event charged at step `step` (0-based), if that step costs privacy: every step
    /// for Poisson and fixed-size sampling, the first step of each epoch for shuffling.
    pub fn event_at_step(&self, n: usize, noise_multiplier: f64, step: u64) -> Option<DpEvent> {
        match self {
            Sampler::Shuffle { .. } if !step.is_multiple_of(self.steps_per_epoch(n) as u64) => None,
            _ => Some(self.step_event(n, noise_multiplier)),
        }
    }

    /// The event of the first `steps` steps of a run.
    pub fn run_event(&self, n: usize, noise_multiplier: f64, steps: u64) -> DpEvent {
        let charged = match self {
            Sampler::Shuffle { .. } => steps.div_ceil(self.steps_per_epoch(n) as u64),
            _ => steps,
        };
        DpEvent::self_composed(self.step_event(n, noise_multiplier), charged)
    }

    /// Draws one batch of indices into `out` (cleared first). `shuffle` carries the
    /// current epoch's permutation and position for [`Sampler::Shuffle`].
    pub fn draw(
        &self,
        n: usize,
        noise: &mut NoiseSource,
        shuffle: &mut ShuffleState,
        out: &mut Vec<usize>,
    ) {
        out.clear();
        match *self {
            Sampler::Shuffle { batch_size } => {
                if shuffle.order.len() != n || shuffle.position >= n {
                    // A new epoch: Fisher–Yates with the secure noise source.
                    shuffle.order = (0..n).collect();
                    for i in (1..n).rev() {
                        let j = ((noise.uniform() * (i + 1) as f64) as usize).min(i);
                        shuffle.order.swap(i, j);
                    }
                    shuffle.position = 0;
                }
                let end = (shuffle.position + batch_size).min(n);
                out.extend_from_slice(&shuffle.order[shuffle.position..end]);
                shuffle.position = end;
            }
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
