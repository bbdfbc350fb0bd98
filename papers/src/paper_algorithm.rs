//! The training tables' algorithms that papers provide. A paper directory with a
//! `table_algorithms.rs` registers its own there (its `ALGORITHMS` and `build`, gathered
//! by build.rs), so the harness names none; a table config names one by its `name` in
//! `algorithm`, beside dp-optim's own ([`crate::config::Algorithm`]).

use dp_models::Classifier;

use crate::by_name::{self, ByName};
use crate::config::{Algorithm, RunConfig};
use crate::training::{ExtraColumn, TableAlgorithm};

/// An algorithm a paper provides to the training tables.
#[derive(Debug)]
pub struct PaperAlgorithm {
    /// Its name in a table config's `algorithm` (kebab-case, unique among all).
    pub name: &'static str,
    /// Iterations a run may take per update of its budget: the scheduler's cost factor.
    pub iterations_per_update: u64,
    /// The columns it adds to a table that runs it, in order.
    pub columns: &'static [ExtraColumn],
}

// `paper_algorithms()` and `paper_table_algorithm::<M>()`, written by build.rs.
include!(concat!(env!("OUT_DIR"), "/paper_algorithms.rs"));

impl ByName for Algorithm {
    const WHAT: &'static str = "algorithm";
    /// dp-optim's algorithms.
    const OWN: &'static [Self] = &[
        Algorithm::NoisySgd,
        Algorithm::NoisyAdam,
        Algorithm::DpSgd,
        Algorithm::Dpd,
        Algorithm::GaussianDropout,
    ];

    fn name(self) -> &'static str {
        match self {
            Algorithm::NoisySgd => "noisy-sgd",
            Algorithm::NoisyAdam => "noisy-adam",
            Algorithm::DpSgd => "dp-sgd",
            Algorithm::Dpd => "dpd",
            Algorithm::GaussianDropout => "gaussian-dropout",
            Algorithm::Paper(name) => name,
        }
    }

    fn registered(name: &str) -> Option<Self> {
        find(name).map(|a| Algorithm::Paper(a.name))
    }

    fn registered_names() -> Vec<&'static str> {
        paper_algorithms().iter().map(|a| a.name).collect()
    }
}

by_name::serde_by_name!(Algorithm);

/// The registered algorithm named `name`.
pub fn find(name: &str) -> Option<&'static PaperAlgorithm> {
    paper_algorithms().into_iter().find(|a| a.name == name)
}

/// The table algorithm a paper provides for a private run of `algorithm` with the run's
/// settings; `None` for dp-optim's own.
pub fn table_algorithm<M: Classifier>(
    algorithm: Algorithm,
    run: &RunConfig,
) -> Option<Box<dyn TableAlgorithm<M>>> {
    match algorithm {
        Algorithm::Paper(name) => paper_table_algorithm::<M>(name, run),
        _ => None,
    }
}

/// The scheduler's cost factor of a run of `algorithm`: iterations per update of its
/// budget (1 for dp-optim's own).
pub fn cost_factor(algorithm: Algorithm) -> u64 {
    match algorithm {
        Algorithm::Paper(name) => find(name).map_or(1, |a| a.iterations_per_update),
        _ => 1,
    }
}

/// The columns a table's algorithms add: each paper algorithm's, in order of first
/// appearance, each once.
pub fn extra_columns(algorithms: impl IntoIterator<Item = Algorithm>) -> Vec<ExtraColumn> {
    let mut seen = Vec::new();
    for algorithm in algorithms {
        if let Algorithm::Paper(name) = algorithm {
            if !seen.contains(&name) {
                seen.push(name);
            }
        }
    }
    seen.into_iter()
        .filter_map(find)
        .flat_map(|a| a.columns.iter().copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithms_are_named_once_and_read_back() {
        by_name::check_names::<Algorithm>();
        let refused = serde_json::from_str::<Algorithm>("\"dp-sgdd\"").err();
        let message = refused.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            message.contains("unknown algorithm `dp-sgdd`: known are noisy-sgd"),
            "{message}"
        );
    }
}
