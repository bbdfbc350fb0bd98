//! What a kind of table does, whichever paper provides it: the runs it trains (for the
//! scheduler), its report, and its line in the closing summary. The harness (`run`,
//! `jobs`) reads tables only through this trait, so a paper's own kind of table lives in
//! that paper's directory with its configuration type.

use std::any::Any;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Instant;

use anyhow::Result;

use crate::args::ReproduceArgs;
use crate::config::{Published, TableHeading};
use crate::report::{RunHeader, TableReport};

/// Where one table's report is computed and written.
pub struct TableContext<'a> {
    /// The paper's id.
    pub paper: &'a str,
    /// The table's number, id, title and caption.
    pub heading: &'a TableHeading,
    /// The paper's published values.
    pub published: &'a Published,
    /// The output directory of the paper.
    pub out: &'a Path,
    /// The command's options.
    pub args: &'a ReproduceArgs,
}

/// One unit of scheduled work: a run label, all its seeds, with its relative cost (longest
/// first).
pub struct RunUnit {
    /// The run's label in its table.
    pub label: String,
    /// Relative cost; `u64::MAX` for runs scheduled first whatever their settings.
    pub estimate: u64,
}

/// A kind of table (the `kind` of a table's JSON config). The code of the paper that owns
/// a kind reads its configuration back by downcasting (`TableConfig::kind`).
pub trait TableKind: Any + std::fmt::Debug + Send + Sync {
    /// The labels of the runs this table trains, in its order; none for a table that
    /// trains nothing (accounting).
    fn run_labels(&self) -> Vec<&str> {
        Vec::new()
    }

    /// The units `--jobs` spreads over workers for the runs `args` selects. A training run
    /// whose cache keys are all in `scheduled` already (the same training in another
    /// table) is not scheduled twice; its keys are added. By default each run label
    /// `args` allows is one unit, scheduled first whatever its cost.
    fn units(
        &self,
        args: &ReproduceArgs,
        _scheduled: &mut BTreeSet<String>,
    ) -> Result<Vec<RunUnit>> {
        Ok(self
            .run_labels()
            .into_iter()
            .filter(|label| args.may_train(label))
            .map(|label| RunUnit {
                label: label.to_string(),
                estimate: u64::MAX,
            })
            .collect())
    }

    /// Trains (or reads from the run cache) what the table needs and assembles its report;
    /// `header(wall)` is the report's run header, `started` when the table began.
    fn report(
        &self,
        cx: &TableContext<'_>,
        header: &dyn Fn(f64) -> RunHeader,
        started: Instant,
    ) -> Result<TableReport>;

    /// The kind's own line on what the table's runs reached, for the closing summary;
    /// where it has none (the default), the harness shows the best final metric of the
    /// private and non-private runs ([`crate::shows::best_metrics`]).
    fn shows(&self, _report: &TableReport) -> Option<String> {
        None
    }
}
