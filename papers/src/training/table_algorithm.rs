//! What a paper's algorithm adds to a training-table run beside its step: its own stop
//! count and iteration cap, readings per epoch, state for the partial file, and the
//! table columns they fill. The shared harness calls these hooks and names no
//! algorithm; each paper provides its implementation (`crate::paper_algorithm`).

use anyhow::Result;
use dp_models::Classifier;
use dp_optim::dpd::{DpdTraining, GaussianDropout};
use dp_optim::gdp::NoisyTraining;
use dp_optim::{Algorithm, DpSgd, Sampler};

use super::EpochRecord;

/// What an epoch's readings of an algorithm are computed from.
pub struct EpochContext<'a> {
    /// The run's sampler.
    pub sampler: &'a Sampler,
    /// Training-set size.
    pub n: usize,
    /// The run's NoisySGD settings (σ, δ).
    pub training: &'a NoisyTraining,
}

/// An algorithm's readings of an epoch, beside the ledger's.
#[derive(Clone, Copy, Debug, Default)]
pub struct AlgorithmReadings {
    /// The paper's own ε, when it reports one that is not the ledger's.
    pub eps_paper: Option<f64>,
    /// Updates accepted so far, when not every iteration is one.
    pub accepted: Option<u64>,
}

/// A table column an algorithm adds: its heading, the final epoch's reading it shows
/// (mean ± sd over seeds), and the published value's column it is compared with.
#[derive(Clone, Copy, Debug)]
pub struct ExtraColumn {
    /// The heading.
    pub heading: &'static str,
    /// The reading of the final epoch.
    pub reading: fn(&EpochRecord) -> Option<f64>,
    /// Decimals shown.
    pub digits: usize,
    /// The column of the paper's published values compared with (full profile only).
    pub published: Option<&'static str>,
}

/// A training-table algorithm: a dp-optim [`Algorithm`] and the hooks through which the
/// harness runs it. Every hook has the default of an algorithm whose every iteration is
/// one update of the step budget.
pub trait TableAlgorithm<M: Classifier>: Algorithm<M> {
    /// The iterations a run may take for a budget of `budget` updates.
    fn max_iterations(&self, budget: u64) -> u64 {
        budget
    }

    /// Whether the algorithm's own count ends the run (`budget` its updates); `None` (the
    /// default): the run's epochs and the step budget decide.
    fn finished(&self, budget: u64) -> Option<bool> {
        let _ = budget;
        None
    }

    /// Whether every iteration is an update (the posterior predictive averages the last
    /// iterates only then).
    fn iterations_are_updates(&self) -> bool {
        true
    }

    /// The epoch's readings beside the ledger's.
    fn readings(&self, cx: &EpochContext<'_>) -> Result<AlgorithmReadings> {
        let _ = cx;
        Ok(AlgorithmReadings::default())
    }

    /// The algorithm's state beyond the engine's checkpoint, for the partial file.
    fn state(&self) -> Result<Option<serde_json::Value>> {
        Ok(None)
    }

    /// Restores the state a partial file kept (`None`: a fresh start).
    fn restore(&mut self, state: Option<serde_json::Value>) -> Result<()> {
        let _ = state;
        Ok(())
    }
}

// dp-optim's algorithms that the tables run as they are: every iteration an update.
impl<M: Classifier> TableAlgorithm<M> for DpSgd {}
impl<M: Classifier> TableAlgorithm<M> for DpdTraining {}
impl<M: Classifier> TableAlgorithm<M> for GaussianDropout {}
