//! SA-DPSGD registered as a training-table algorithm (`"algorithm": "sa-dpsgd"`).

use dp_models::Classifier;

use super::{annealed, COLUMNS, ITERATIONS_PER_UPDATE};
use crate::config::RunConfig;
use crate::paper_algorithm::PaperAlgorithm;
use crate::training::TableAlgorithm;

/// The paper's one algorithm.
pub const ALGORITHMS: &[PaperAlgorithm] = &[PaperAlgorithm {
    name: "sa-dpsgd",
    iterations_per_update: ITERATIONS_PER_UPDATE,
    columns: &COLUMNS,
}];

/// dp-optim's SA-DPSGD with the run's acceptance settings, for a run of `name`.
pub fn build<M: Classifier>(name: &str, run: &RunConfig) -> Option<Box<dyn TableAlgorithm<M>>> {
    (name == ALGORITHMS[0].name).then(|| Box::new(annealed(run.annealing)) as Box<_>)
}
