//! Batch samplers: how a step draws its batch. What a sampler means for privacy (the
//! neighbouring relation, amplification, the event of a step) is its
//! [`SamplingScheme`]'s, in dp-accounting.

use dp_accounting::SamplingScheme;
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
        /// q ∈ (0, 1]: each record's inclusion probability (expected batch size qn).
        sampling_rate: f64,
    },
    /// Each batch is a uniformly random subset of exactly `batch_size` records, drawn
    /// afresh every step. Accounted as `SampledWithoutReplacement(n, m, Gaussian(σ))`
    /// under replace-one neighbours (Wang, Balle, Kasiviswanathan 2019).
    FixedSize {
        /// m ∈ 1..=n: the records in each batch.
        batch_size: usize,
    },
    /// Each epoch, a fresh random permutation cut into consecutive batches of
    /// `batch_size` (the last may be smaller): every record is used once per epoch.
    /// No amplification is claimed: under replace-one neighbours one record touches one
    /// batch per epoch, so an epoch is one Gaussian mechanism on it (parallel composition)
    /// with sensitivity 2C, i.e. `Gaussian(σ/2)`, charged at the first step of the epoch.
    Shuffle {
        /// m ≥ 1: the records in each batch (the epoch's last may be smaller).
        batch_size: usize,
    },
}

impl Sampler {
    /// Checks the sampler against a dataset of `n` records: its scheme's parameters
    /// ([`SamplingScheme::validate`]), and a dataset that is not empty.
    pub fn validate(&self, n: usize) -> Result<()> {
        if n == 0 {
            return Err(Error::InvalidParameter {
                name: "dataset_size",
                value: 0.0,
                reason: "must be >= 1 (the dataset is empty)",
            });
        }
        match self.scheme(n).validate() {
            Err(dp_accounting::Error::InvalidParameter {
                name,
                value,
                reason,
            }) => Err(Error::InvalidParameter {
                name,
                value,
                reason,
            }),
            other => Ok(other?),
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

    /// The sampling scheme this sampler draws from on a dataset of `n` records: its
    /// neighbouring relation and how it amplifies a mechanism are dp-accounting's
    /// ([`SamplingScheme`]).
    pub fn scheme(&self, n: usize) -> SamplingScheme {
        match *self {
            Sampler::Poisson { sampling_rate } => SamplingScheme::Poisson { sampling_rate },
            Sampler::FixedSize { batch_size } => SamplingScheme::FixedSize {
                dataset_size: n as u64,
                batch_size: batch_size as u64,
            },
            Sampler::Shuffle { batch_size } => SamplingScheme::Shuffle {
                dataset_size: n as u64,
                batch_size: batch_size as u64,
            },
        }
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
