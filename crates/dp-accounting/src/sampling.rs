//! Sampling schemes and the events of what runs on their batches.
//!
//! A training step runs a mechanism on a batch drawn from the dataset. How the batch is
//! drawn fixes the neighbouring relation the analysis assumes and how much the sampling
//! amplifies the mechanism's privacy; this module holds that mapping, so that every
//! client (an engine, `dp account`, a paper's table) gets the same event for the same
//! scheme.
//!
//! The inner event passed to [`SamplingScheme::amplify`] is the mechanism's event *at the
//! sensitivity of the scheme's relation*. For a sum of per-record contributions bounded
//! by C (clipped gradients) that sensitivity is C under add/remove-one neighbours and 2C
//! under replace-one ([`NeighbouringRelation::sum_sensitivity`]): Gaussian noise of
//! standard deviation σC is `Gaussian(σ)` for Poisson sampling and `Gaussian(σ/2)` for
//! fixed-size batches.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::event::{DpEvent, NeighbouringRelation};

/// How each batch is drawn from a dataset, with what the analysis needs to know of it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum SamplingScheme {
    /// Each record joins each batch independently with probability q (batches may be
    /// empty). Add/remove-one neighbours; each step is `PoissonSampled(q, inner)`
    /// (amplification by Poisson subsampling: Mironov, Talwar & Zhang 2019 for RDP,
    /// Zhu, Dong & Wang 2022 for PLDs).
    Poisson {
        /// q, the inclusion probability of each record.
        sampling_rate: f64,
    },
    /// Each batch is a uniformly random subset of exactly `batch_size` of the
    /// `dataset_size` records, drawn afresh every step. Replace-one neighbours; each step
    /// is `SampledWithoutReplacement(n, m, inner)` (Wang, Balle & Kasiviswanathan 2019).
    FixedSize {
        /// n, the number of records sampled from.
        dataset_size: u64,
        /// m, the records in each batch.
        batch_size: u64,
    },
    /// Each epoch, a fresh random permutation cut into consecutive batches of
    /// `batch_size` (the last may be smaller): every record is used once per epoch.
    /// Replace-one neighbours and no amplification: one record touches one batch per
    /// epoch, so an epoch is one run of the inner mechanism on it (parallel
    /// composition), charged once, at the epoch's first step.
    Shuffle {
        /// n, the number of records permuted.
        dataset_size: u64,
        /// m, the records in each batch.
        batch_size: u64,
    },
}

impl NeighbouringRelation {
    /// The L2 (or L1) sensitivity of a sum of per-record contributions each bounded by
    /// `contribution_bound` in norm: the bound itself when one record is added or
    /// removed, twice it when one record is replaced by another (triangle inequality).
    pub fn sum_sensitivity(self, contribution_bound: f64) -> f64 {
        match self {
            NeighbouringRelation::AddOrRemoveOne => contribution_bound,
            NeighbouringRelation::ReplaceOne => 2.0 * contribution_bound,
        }
    }
}

impl SamplingScheme {
    /// Checks the scheme's parameters: q ∈ (0, 1], 1 ≤ m ≤ n for fixed-size batches,
    /// m ≥ 1 and n ≥ 1 for shuffling.
    pub fn validate(&self) -> Result<()> {
        let invalid = |name, value: u64, reason| {
            Err(Error::InvalidParameter {
                name,
                value: value as f64,
                reason,
            })
        };
        match *self {
            SamplingScheme::Poisson { sampling_rate }
                if !(sampling_rate > 0.0 && sampling_rate <= 1.0) =>
            {
                Err(Error::InvalidParameter {
                    name: "sampling_rate",
                    value: sampling_rate,
                    reason: "must be in (0, 1]",
                })
            }
            SamplingScheme::FixedSize {
                dataset_size: 0, ..
            }
            | SamplingScheme::Shuffle {
                dataset_size: 0, ..
            } => invalid("dataset_size", 0, "must be >= 1"),
            SamplingScheme::FixedSize {
                dataset_size,
                batch_size,
            } if batch_size == 0 || batch_size > dataset_size => invalid(
                "batch_size",
                batch_size,
                "must be in 1..=dataset_size for batches without replacement",
            ),
            SamplingScheme::Shuffle { batch_size: 0, .. } => {
                invalid("batch_size", 0, "must be >= 1")
            }
            _ => Ok(()),
        }
    }

    /// The neighbouring relation the scheme's analysis assumes.
    pub fn relation(&self) -> NeighbouringRelation {
        match self {
            SamplingScheme::Poisson { .. } => NeighbouringRelation::AddOrRemoveOne,
            SamplingScheme::FixedSize { .. } | SamplingScheme::Shuffle { .. } => {
                NeighbouringRelation::ReplaceOne
            }
        }
    }

    /// The event of one charge: `inner` (the mechanism's event at the relation's
    /// sensitivity) run on one sampled batch, or, for shuffling, on one whole epoch.
    pub fn amplify(&self, inner: DpEvent) -> DpEvent {
        match *self {
            SamplingScheme::Poisson { sampling_rate } => {
                DpEvent::poisson_sampled(sampling_rate, inner)
            }
            SamplingScheme::FixedSize {
                dataset_size,
                batch_size,
            } => DpEvent::sampled_without_replacement(dataset_size, batch_size, inner),
            SamplingScheme::Shuffle { .. } => inner,
        }
    }

    /// The steps of one epoch of a shuffled run, ⌈n/m⌉ (`None` for the other schemes,
    /// whose charges do not depend on epochs).
    pub fn shuffled_epoch_steps(&self) -> Option<u64> {
        match *self {
            SamplingScheme::Shuffle {
                dataset_size,
                batch_size,
            } => Some(dataset_size.div_ceil(batch_size.max(1))),
            _ => None,
        }
    }

    /// The event charged at step `step` (0-based), if that step costs privacy: every step
    /// for Poisson and fixed-size batches, the first step of each epoch for shuffling.
    pub fn event_at_step(&self, inner: DpEvent, step: u64) -> Option<DpEvent> {
        match self.shuffled_epoch_steps() {
            Some(epoch) if !step.is_multiple_of(epoch) => None,
            _ => Some(self.amplify(inner)),
        }
    }

    /// The event of the first `steps` steps of a run.
    pub fn run_event(&self, inner: DpEvent, steps: u64) -> DpEvent {
        let charged = match self.shuffled_epoch_steps() {
            Some(epoch) => steps.div_ceil(epoch),
            None => steps,
        };
        DpEvent::self_composed(self.amplify(inner), charged)
    }

    /// The event of `steps` steps of the Gaussian mechanism on a clipped sum, where
    /// `noise_multiplier` is the noise standard deviation divided by the clipping bound
    /// C: the mechanism's event at the relation's sensitivity is
    /// `Gaussian(σ · C / sum_sensitivity(C))` (σ/2 under replace-one), amplified.
    pub fn gaussian_run_event(&self, noise_multiplier: f64, steps: u64) -> DpEvent {
        self.run_event(self.gaussian_on_sum(noise_multiplier), steps)
    }

    /// The Gaussian mechanism's event on a clipped sum under this scheme's relation, for
    /// noise `noise_multiplier` times the clipping bound (σ/2 under replace-one).
    pub fn gaussian_on_sum(&self, noise_multiplier: f64) -> DpEvent {
        DpEvent::gaussian(noise_multiplier / self.relation().sum_sensitivity(1.0))
    }
}
