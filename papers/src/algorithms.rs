//! The training tables' algorithms that a paper provides, by paper: the one place where
//! the harness learns what a run's algorithm adds beside dp-optim's own (DP-SGD, DPD's
//! SGLD steps, the dropout baseline, which need no hooks).

use dp_models::Classifier;

use crate::config::Algorithm;
use crate::sa_dpsgd;
use crate::training::{ExtraColumn, TableAlgorithm};

/// The table algorithm a paper provides for a private run of `algorithm`, with the run's
/// settings; `None` for dp-optim's own.
pub fn paper_algorithm<M: Classifier>(
    algorithm: Algorithm,
    run: &crate::config::RunConfig,
) -> Option<Box<dyn TableAlgorithm<M>>> {
    match algorithm {
        Algorithm::SaDpsgd => Some(Box::new(sa_dpsgd::annealed(run.annealing))),
        _ => None,
    }
}

/// The scheduler's cost factor of a run of `algorithm`: iterations per update of its
/// budget.
pub fn cost_factor(algorithm: Algorithm) -> u64 {
    match algorithm {
        Algorithm::SaDpsgd => sa_dpsgd::ITERATIONS_PER_UPDATE,
        _ => 1,
    }
}

/// The columns a table's algorithms add, in order, each once.
pub fn extra_columns(algorithms: impl IntoIterator<Item = Algorithm>) -> Vec<ExtraColumn> {
    let mut columns = Vec::new();
    if algorithms.into_iter().any(|a| a == Algorithm::SaDpsgd) {
        columns.extend(sa_dpsgd::COLUMNS);
    }
    columns
}
