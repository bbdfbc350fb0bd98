//! Batch samplers: how a step draws its batch. What a sampler means for privacy (the
//! neighbouring relation, amplification, the event of a step) is its
//! [`SamplingScheme`]'s, in dp-accounting.

use dp_accounting::SamplingScheme;
use dp_mechanisms::NoiseSource;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The state of a shuffled or cyclic sampler: this epoch's permutation and the next
/// position (shuffled; kept in checkpoints), and the groups (cyclic; drawn once, when the
/// engine is built, and never written: see [`Sampler::CyclicPoisson`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShuffleState {
    /// The permutation of the record indices for the current epoch.
    pub order: Vec<usize>,
    /// The first index of `order` not yet used this epoch.
    pub position: usize,
    /// A cyclic sampler's groups: the record indices of each, in increasing order.
    #[serde(skip)]
    pub groups: Arc<Vec<Vec<usize>>>,
}

impl ShuffleState {
    /// Draws the groups of a cyclic sampler: each of the `n` records joins one of `b`
    /// groups uniformly at random, independently of the others.
    pub fn draw_groups(&mut self, n: usize, b: usize, noise: &mut NoiseSource) {
        let mut groups = vec![Vec::new(); b.max(1)];
        for i in 0..n {
            groups[noise.index_below(b.max(1))].push(i);
        }
        self.groups = Arc::new(groups);
    }
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
    /// Each record joins one of `groups` groups uniformly at random and independently
    /// (jax_privacy's independent partition), drawn once when the engine is built; step
    /// t draws each record of group t mod `groups` independently with probability q. A
    /// cycle of `groups` steps reads each record in one step, and is charged once, at
    /// its first step, as `PoissonSampled(q, Gaussian(σ))` (parallel composition over
    /// the groups) — the participation that amplified BandMF needs for noise correlated
    /// over at most `groups` bands (`SamplingScheme::CyclicPoisson`). The groups are
    /// secret randomness, as the batches are, and attached to records, not positions:
    /// for neighbours differing in one record the others' groups have the same law. A
    /// production checkpoint does not hold them, so its resume draws new groups and
    /// starts a new cycle there (`engine/correlated.rs`); a seeded run draws the same
    /// groups again from its seed.
    CyclicPoisson {
        /// b ≥ 1: the number of groups, and of steps in a cycle.
        groups: usize,
        /// q ∈ (0, 1]: each record's inclusion probability in its group's steps.
        sampling_rate: f64,
    },
    /// Poisson sampling at rate q with each batch cut to at most `max_batch_size`
    /// records (a uniformly random subset of the draw kept): bounded memory per step.
    /// Accounted as `TruncatedPoissonGaussian` under add/remove neighbours
    /// (`SamplingScheme::TruncatedPoisson`).
    TruncatedPoisson {
        /// q ∈ (0, 1]: each record's inclusion probability before the cut.
        sampling_rate: f64,
        /// B ≥ 1: the most records a batch keeps.
        max_batch_size: usize,
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

    /// The expected batch size, which the noisy sum is divided by (a cyclic sampler's
    /// over a cycle, qn/b; a truncated one's before the cut, capped: min(qn, B)).
    pub fn expected_batch_size(&self, n: usize) -> f64 {
        match *self {
            Sampler::Poisson { sampling_rate } => sampling_rate * n as f64,
            Sampler::FixedSize { batch_size } | Sampler::Shuffle { batch_size } => {
                batch_size as f64
            }
            Sampler::CyclicPoisson {
                groups,
                sampling_rate,
            } => sampling_rate * n as f64 / groups.max(1) as f64,
            Sampler::TruncatedPoisson {
                sampling_rate,
                max_batch_size,
            } => (sampling_rate * n as f64).min(max_batch_size as f64),
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
            Sampler::CyclicPoisson {
                groups,
                sampling_rate,
            } => SamplingScheme::CyclicPoisson {
                groups: groups as u64,
                sampling_rate,
            },
            Sampler::TruncatedPoisson {
                sampling_rate,
                max_batch_size,
            } => SamplingScheme::TruncatedPoisson {
                dataset_size: n as u64,
                sampling_rate,
                max_batch_size: max_batch_size as u64,
            },
        }
    }

    /// Draws the batch of step `step` (0-based, counted from the cycle's origin for a
    /// cyclic sampler) into `out` (cleared first). `shuffle` carries the current epoch's
    /// permutation and position for [`Sampler::Shuffle`], and the groups for
    /// [`Sampler::CyclicPoisson`] (drawn here when it has none for `n` records).
    pub fn draw(
        &self,
        n: usize,
        step: u64,
        noise: &mut NoiseSource,
        shuffle: &mut ShuffleState,
        out: &mut Vec<usize>,
    ) {
        out.clear();
        match *self {
            Sampler::Shuffle { batch_size } => draw_shuffled(n, batch_size, noise, shuffle, out),
            Sampler::Poisson { sampling_rate } => {
                draw_poisson(n, sampling_rate, noise, |i| out.push(i))
            }
            Sampler::FixedSize { batch_size } => draw_fixed(n, batch_size, noise, out),
            Sampler::CyclicPoisson {
                groups,
                sampling_rate,
            } => {
                let b = groups.max(1);
                let drawn: usize = shuffle.groups.iter().map(Vec::len).sum();
                if shuffle.groups.len() != b || drawn != n {
                    shuffle.draw_groups(n, b, noise);
                }
                let members = &shuffle.groups[(step % b as u64) as usize];
                draw_poisson(members.len(), sampling_rate, noise, |j| {
                    out.push(members[j])
                });
            }
            Sampler::TruncatedPoisson {
                sampling_rate,
                max_batch_size,
            } => {
                draw_poisson(n, sampling_rate, noise, |i| out.push(i));
                keep_uniform_subset(out, max_batch_size, noise);
            }
        }
    }
}

/// Each of `0..n` independently with probability q, in increasing order: the gap to the
/// next included index is Geometric(q), drawn by inversion.
fn draw_poisson(n: usize, q: f64, noise: &mut NoiseSource, mut push: impl FnMut(usize)) {
    if q >= 1.0 {
        (0..n).for_each(push);
        return;
    }
    let log_keep = (-q).ln_1p();
    let mut i = 0usize;
    while i < n {
        let u = 1.0 - noise.uniform(); // (0, 1]
        let gap = (u.ln() / log_keep).floor();
        if !gap.is_finite() || gap >= (n - i) as f64 {
            break;
        }
        i += gap as usize;
        push(i);
        i += 1;
    }
}

/// The next batch of the current epoch's permutation, starting a new epoch (Fisher–Yates
/// with the secure noise source) when the last one is used up.
fn draw_shuffled(
    n: usize,
    batch_size: usize,
    noise: &mut NoiseSource,
    shuffle: &mut ShuffleState,
    out: &mut Vec<usize>,
) {
    if shuffle.order.len() != n || shuffle.position >= n {
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

/// Floyd's algorithm: a uniform subset of exactly `m` of `0..n`, in increasing order.
fn draw_fixed(n: usize, m: usize, noise: &mut NoiseSource, out: &mut Vec<usize>) {
    let mut chosen = std::collections::BTreeSet::new();
    for j in n - m..n {
        let t = ((noise.uniform() * (j + 1) as f64) as usize).min(j);
        if !chosen.insert(t) {
            chosen.insert(j);
        }
    }
    out.extend(chosen);
}

/// Cuts `drawn` to a uniformly random `cap` of its entries (a partial Fisher–Yates),
/// kept in increasing order; unchanged when it holds at most `cap`.
fn keep_uniform_subset(drawn: &mut Vec<usize>, cap: usize, noise: &mut NoiseSource) {
    if drawn.len() <= cap {
        return;
    }
    for i in 0..cap {
        let rest = drawn.len() - i;
        let j = i + ((noise.uniform() * rest as f64) as usize).min(rest - 1);
        drawn.swap(i, j);
    }
    drawn.truncate(cap);
    drawn.sort_unstable();
}
