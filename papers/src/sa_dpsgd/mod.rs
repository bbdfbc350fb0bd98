//! SA-DPSGD (Fu, Chen, Ling et al. 2022) in the training tables: dp-optim's
//! [`SaDpsgd`] with the paper's budget of accepted steps, the iteration cap, the paper's
//! ε of accepted steps as a reading, and its counters kept in the partial file.

use anyhow::Result;
use dp_models::Classifier;
use dp_optim::annealing::{annealed_accounting, AnnealingConfig, SaDpsgd};

use crate::training::{AlgorithmReadings, EpochContext, EpochRecord, ExtraColumn, TableAlgorithm};

pub mod table_algorithms;

/// Iterations allowed per accepted step of the budget: a run that rarely accepts still
/// ends (also the scheduler's cost factor).
pub const ITERATIONS_PER_UPDATE: u64 = 3;

/// SA-DPSGD's kinds of table: none beyond the harness's training tables.
pub const TABLE_KINDS: &[(&str, crate::registry::ParseKind)] = &[];

/// The columns SA-DPSGD adds to a table: the paper's ε of accepted steps (compared with
/// the published `eps_paper`) and the acceptance rate τ/t.
pub const COLUMNS: [ExtraColumn; 2] = [
    ExtraColumn {
        heading: "ε paper (accepted steps only)",
        reading: |e| e.eps_paper,
        digits: 3,
        published: Some("eps_paper"),
    },
    ExtraColumn {
        heading: "accepted τ/t",
        reading: acceptance_rate,
        digits: 3,
        published: None,
    },
];

/// τ/t of an epoch record.
fn acceptance_rate(e: &EpochRecord) -> Option<f64> {
    e.accepted.map(|a| a as f64 / e.steps.max(1) as f64)
}

/// dp-optim's SA-DPSGD with the run's acceptance settings (the defaults where it names
/// none).
pub fn annealed(config: Option<AnnealingConfig>) -> SaDpsgd<'static> {
    SaDpsgd::new(config.unwrap_or_default(), None)
}

/// SA-DPSGD in a table: the budget counts accepted steps.
impl<M: Classifier> TableAlgorithm<M> for SaDpsgd<'static> {
    fn max_iterations(&self, budget: u64) -> u64 {
        ITERATIONS_PER_UPDATE * budget
    }

    /// The paper's budget counts accepted steps.
    fn finished(&self, budget: u64) -> Option<bool> {
        Some(self.state.accepted >= budget)
    }

    fn iterations_are_updates(&self) -> bool {
        false
    }

    fn readings(&self, cx: &EpochContext<'_>) -> Result<AlgorithmReadings> {
        let t = cx.training;
        let a = annealed_accounting(
            cx.sampler,
            cx.n,
            t.noise_multiplier,
            t.delta,
            &self.config,
            &self.state,
        )?;
        Ok(AlgorithmReadings {
            eps_paper: Some(a.paper_epsilon),
            accepted: Some(self.state.accepted),
        })
    }

    fn state(&self) -> Result<Option<serde_json::Value>> {
        Ok(Some(serde_json::to_value(&self.state)?))
    }

    fn restore(&mut self, state: Option<serde_json::Value>) -> Result<()> {
        self.state = match state {
            Some(value) => serde_json::from_value(value)?,
            None => Default::default(),
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use dp_models::nn::ModuleClassifier;
    use dp_models::nn::Sequential;

    use super::*;

    type Model = ModuleClassifier<Sequential>;

    /// The counters survive the partial file's round trip (as JSON, the form the file
    /// keeps), and a partial file without them starts afresh.
    #[test]
    fn the_counters_round_trip_through_the_partial_state() -> Result<()> {
        let mut sa = annealed(None);
        sa.state.iterations = 17;
        sa.state.accepted = 11;
        sa.state.rejections = 2;
        sa.state.accepted_energy = Some(0.25);
        let saved = TableAlgorithm::<Model>::state(&sa)?;
        let text = serde_json::to_string(&saved)?;
        let mut resumed = annealed(None);
        TableAlgorithm::<Model>::restore(&mut resumed, serde_json::from_str(&text)?)?;
        assert_eq!(resumed.state, sa.state);
        TableAlgorithm::<Model>::restore(&mut resumed, None)?;
        assert_eq!(resumed.state, Default::default());
        // The budget counts accepted steps; the cap is three iterations per update.
        assert_eq!(TableAlgorithm::<Model>::finished(&sa, 11), Some(true));
        assert_eq!(TableAlgorithm::<Model>::finished(&sa, 12), Some(false));
        assert_eq!(TableAlgorithm::<Model>::max_iterations(&sa, 12), 36);
        assert!(!TableAlgorithm::<Model>::iterations_are_updates(&sa));
        Ok(())
    }
}
