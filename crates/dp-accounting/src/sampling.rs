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
    /// Each record in one of `groups` groups (uniformly at random and independently of
    /// the others, so that neighbours' common records have groups of the same law), and
    /// step t Poisson-samples group t mod `groups` at rate q. Add/remove-one
    /// neighbours; a record lies in one group, so each cycle of `groups` steps reads it in
    /// one step only and is charged once, at its first step, as `PoissonSampled(q,
    /// inner)`: parallel composition over the groups for independent noise, and the
    /// amplified banded matrix factorization for noise correlated by a strategy of at
    /// most `groups` bands (Choquette-Choo et al., NeurIPS 2023, arXiv 2306.08153,
    /// Thm 4; `dp_mechanisms::band_mf`).
    CyclicPoisson {
        /// b, the number of groups (and the steps of one cycle).
        groups: u64,
        /// q, each record's inclusion probability in the steps of its group.
        sampling_rate: f64,
    },
    /// Poisson sampling at rate q with each batch cut to at most `max_batch_size`
    /// records (a uniformly random subset kept when more are drawn). Add/remove-one
    /// neighbours; a step of the Gaussian mechanism is
    /// [`DpEvent::TruncatedPoissonGaussian`] (arXiv 2508.15089; the bound derived in
    /// `truncated.rs`) on `dataset_size + 1` records, the dataset with a record added
    /// (the event's bound is stated for the larger neighbour). Only the Gaussian has
    /// this analysis: any other inner event is refused.
    TruncatedPoisson {
        /// n, the number of records the run samples from.
        dataset_size: u64,
        /// q, each record's inclusion probability before the cut.
        sampling_rate: f64,
        /// B, the most records a batch keeps.
        max_batch_size: u64,
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
            | SamplingScheme::CyclicPoisson { sampling_rate, .. }
            | SamplingScheme::TruncatedPoisson { sampling_rate, .. }
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
            SamplingScheme::CyclicPoisson { groups: 0, .. } => invalid("groups", 0, "must be >= 1"),
            SamplingScheme::TruncatedPoisson {
                dataset_size: 0, ..
            } => invalid("dataset_size", 0, "must be >= 1"),
            SamplingScheme::TruncatedPoisson {
                max_batch_size: 0, ..
            } => invalid("max_batch_size", 0, "must be >= 1"),
            _ => Ok(()),
        }
    }

    /// The neighbouring relation the scheme's analysis assumes.
    pub fn relation(&self) -> NeighbouringRelation {
        match self {
            SamplingScheme::Poisson { .. }
            | SamplingScheme::CyclicPoisson { .. }
            | SamplingScheme::TruncatedPoisson { .. } => NeighbouringRelation::AddOrRemoveOne,
            SamplingScheme::FixedSize { .. } | SamplingScheme::Shuffle { .. } => {
                NeighbouringRelation::ReplaceOne
            }
        }
    }

    /// The event of one charge: `inner` (the mechanism's event at the relation's
    /// sensitivity) run on one sampled batch, on one shuffled epoch, or on one cycle of
    /// the groups. Refused ([`Error::Unsupported`]) where the scheme has no analysis for
    /// `inner`: truncated Poisson sampling takes the Gaussian mechanism only.
    pub fn amplify(&self, inner: DpEvent) -> Result<DpEvent> {
        match (self, &inner) {
            (SamplingScheme::TruncatedPoisson { .. }, &DpEvent::Gaussian { noise_multiplier }) => {
                Ok(self.gaussian_step(noise_multiplier))
            }
            (SamplingScheme::TruncatedPoisson { .. }, _) => Err(Error::Unsupported {
                accountant: "truncated Poisson sampling",
                event: inner.to_string(),
                reason: "only the Gaussian mechanism is analysed on a truncated Poisson sample"
                    .into(),
            }),
            _ => Ok(self.wrap(inner)),
        }
    }

    /// The event of one charge of the Gaussian mechanism on a clipped sum, with noise
    /// `noise_multiplier` times the clipping bound (every scheme has this analysis).
    pub fn gaussian_step(&self, noise_multiplier: f64) -> DpEvent {
        match *self {
            SamplingScheme::TruncatedPoisson {
                dataset_size,
                sampling_rate,
                max_batch_size,
            } => DpEvent::TruncatedPoissonGaussian {
                dataset_size: dataset_size.saturating_add(1),
                sampling_rate,
                max_batch_size,
                noise_multiplier,
            },
            _ => self.wrap(self.gaussian_on_sum(noise_multiplier)),
        }
    }

    /// `inner` under the schemes whose amplification takes any event (all but truncated
    /// Poisson sampling, which [`amplify`](Self::amplify) handles before this).
    fn wrap(&self, inner: DpEvent) -> DpEvent {
        match *self {
            SamplingScheme::Poisson { sampling_rate }
            | SamplingScheme::CyclicPoisson { sampling_rate, .. } => {
                DpEvent::poisson_sampled(sampling_rate, inner)
            }
            SamplingScheme::FixedSize {
                dataset_size,
                batch_size,
            } => DpEvent::sampled_without_replacement(dataset_size, batch_size, inner),
            SamplingScheme::Shuffle { .. } | SamplingScheme::TruncatedPoisson { .. } => inner,
        }
    }

    /// For truncated Poisson sampling, how often a batch holding a given record is cut:
    /// [`truncation_probability`](crate::truncation_probability) on the records the charge
    /// is stated for (the dataset with a record added); `None` for the other schemes.
    pub fn truncation_probability(&self) -> Option<f64> {
        match self.gaussian_step(1.0) {
            DpEvent::TruncatedPoissonGaussian {
                dataset_size,
                sampling_rate,
                max_batch_size,
                ..
            } => Some(crate::truncation_probability(
                dataset_size,
                sampling_rate,
                max_batch_size,
            )),
            _ => None,
        }
    }

    /// The steps one charge covers: an epoch ⌈n/m⌉ of a shuffled run, a cycle of the
    /// groups of a cyclic one (`None` for the other schemes, which charge every step).
    pub fn charge_period(&self) -> Option<u64> {
        match *self {
            SamplingScheme::Shuffle {
                dataset_size,
                batch_size,
            } => Some(dataset_size.div_ceil(batch_size.max(1))),
            SamplingScheme::CyclicPoisson { groups, .. } => Some(groups.max(1)),
            _ => None,
        }
    }

    /// The event charged at step `step` (0-based), if that step costs privacy: the first
    /// step of each period ([`charge_period`](Self::charge_period)), every step otherwise.
    pub fn event_at_step(&self, inner: DpEvent, step: u64) -> Result<Option<DpEvent>> {
        match self.charge_period() {
            Some(period) if !step.is_multiple_of(period) => Ok(None),
            _ => self.amplify(inner).map(Some),
        }
    }

    /// The charges the first `steps` steps of a run make.
    pub fn charges(&self, steps: u64) -> u64 {
        match self.charge_period() {
            Some(period) => steps.div_ceil(period),
            None => steps,
        }
    }

    /// The event of the first `steps` steps of a run.
    pub fn run_event(&self, inner: DpEvent, steps: u64) -> Result<DpEvent> {
        Ok(DpEvent::self_composed(
            self.amplify(inner)?,
            self.charges(steps),
        ))
    }

    /// The event of `steps` steps of the Gaussian mechanism on a clipped sum, where
    /// `noise_multiplier` is the noise standard deviation divided by the clipping bound
    /// C ([`gaussian_step`](Self::gaussian_step) once per charge).
    pub fn gaussian_run_event(&self, noise_multiplier: f64, steps: u64) -> DpEvent {
        DpEvent::self_composed(self.gaussian_step(noise_multiplier), self.charges(steps))
    }

    /// The Gaussian mechanism's event on a clipped sum under this scheme's relation, for
    /// noise `noise_multiplier` times the clipping bound (σ/2 under replace-one).
    pub fn gaussian_on_sum(&self, noise_multiplier: f64) -> DpEvent {
        DpEvent::gaussian(noise_multiplier / self.relation().sum_sensitivity(1.0))
    }
}
