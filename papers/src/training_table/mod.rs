//! The report of a training table: every run × seed trained or read from the cache, then
//! the table's rows, comparisons with the paper, per-epoch details, plots and findings.

mod epoch_means;
mod findings;
mod kind;
mod plots;
mod rows;
mod runs;

use std::time::Instant;

use anyhow::Result;

use super::config::TrainingTable;
use super::report::{RunHeader, TableReport};
use super::training::{load_data, RunResult};
use crate::table_kind::TableContext;

/// Digits of the metric in tables.
const METRIC_DIGITS: usize = 2;

/// A training table's context: where its report is computed and written (it derefs to
/// that), and its training settings.
pub struct TrainingContext<'a> {
    /// Where the report is computed and written.
    pub table: &'a TableContext<'a>,
    /// The table's training settings.
    pub training: &'a TrainingTable,
}

impl<'a> std::ops::Deref for TrainingContext<'a> {
    type Target = TableContext<'a>;

    fn deref(&self) -> &TableContext<'a> {
        self.table
    }
}

/// Trains (or reads from the cache) every run of a training table and assembles its report.
pub fn training_report(
    cx: &TrainingContext<'_>,
    header: impl Fn(f64) -> RunHeader,
    started: Instant,
) -> Result<TableReport> {
    let t = cx.training;
    let extra = crate::paper_algorithm::extra_columns(
        t.runs.iter().map(|r| r.algorithm.unwrap_or(t.algorithm)),
    );
    let columns = rows::columns(t, &extra);
    let data = match load_data(t.dataset)? {
        Ok(d) => d,
        Err(why) => {
            return Ok(rows::not_present_report(
                cx,
                &why,
                header(started.elapsed().as_secs_f64()),
                columns,
            ))
        }
    };
    let by_label = runs::train_or_load(cx, &data)?;
    let (rows, comparisons, mut details) = rows::run_rows(cx, &by_label, &extra, columns.len());
    let plots = plots::plots(cx, &by_label)?;
    let findings = findings::findings(cx, &by_label, &mut details)?;
    let all_runs: Vec<&RunResult> = by_label.values().flatten().collect();
    let mut run_header = header(started.elapsed().as_secs_f64());
    run_header.runs_wall_s = Some(all_runs.iter().map(|r| r.wall_s).sum());
    run_header.run_commits = all_runs.iter().map(|r| r.commit.clone()).collect();
    run_header.run_commits.sort();
    run_header.run_commits.dedup();
    Ok(TableReport {
        comparisons,
        findings,
        plots,
        details,
        data: serde_json::to_value(all_runs)?,
        ..TableReport::for_table(cx.paper, cx.heading, run_header, columns, rows)
    })
}
