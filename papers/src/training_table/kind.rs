//! Training tables as a kind of table (`"kind": "training"`): each run label (all its
//! seeds) is one scheduling unit, costed by its epochs times its algorithm's iterations
//! per update; its closing line is the default, the best private and non-private metric.

use std::collections::BTreeSet;
use std::time::Instant;

use anyhow::Result;

use super::{training_report, TrainingContext};
use crate::args::{Profile, ReproduceArgs};
use crate::config::{RunConfig, TrainingTable};
use crate::report::{RunHeader, TableReport};
use crate::table_kind::{RunUnit, TableContext, TableKind};
use crate::training::run_key;

impl TableKind for TrainingTable {
    fn run_labels(&self) -> Vec<&str> {
        self.runs.iter().map(|r| r.label.as_str()).collect()
    }

    fn units(
        &self,
        args: &ReproduceArgs,
        scheduled: &mut BTreeSet<String>,
    ) -> Result<Vec<RunUnit>> {
        let mut units = Vec::new();
        for run in self.runs.iter().filter(|r| args.may_train(&r.label)) {
            let keys = (1..=args.seeds)
                .map(|seed| run_key(self, run, args.profile, seed))
                .collect::<Result<Vec<_>>>()?;
            let new = keys.iter().any(|k| !scheduled.contains(k));
            scheduled.extend(keys);
            if new {
                units.push(RunUnit {
                    label: run.label.clone(),
                    estimate: estimate(self, run, args.profile),
                });
            }
        }
        Ok(units)
    }

    fn report(
        &self,
        cx: &TableContext<'_>,
        header: &dyn Fn(f64) -> RunHeader,
        started: Instant,
    ) -> Result<TableReport> {
        let cx = TrainingContext {
            table: cx,
            training: self,
        };
        training_report(&cx, header, started)
    }
}

/// The relative cost of a training run: epochs, times its algorithm's iterations per
/// update (SA-DPSGD's iteration cap counts rejected steps too).
fn estimate(table: &TrainingTable, run: &RunConfig, profile: Profile) -> u64 {
    let epochs = match profile {
        Profile::Smoke => table.smoke.epochs,
        Profile::Full => run.epochs,
    };
    u64::from(epochs)
        * crate::paper_algorithm::cost_factor(run.algorithm.unwrap_or(table.algorithm))
}
