//! Each run × seed of a table: read from the run cache (of any table), trained, or left
//! out when this invocation may not train it.

use std::collections::BTreeMap;

use anyhow::Result;

use super::{TrainingContext, METRIC_DIGITS};
use crate::report::fmt;
use crate::training::{self, run_cached, run_key, LoadedData, RunResult};

/// The results of each run (by its index in the table), one per seed that ran.
pub type ByRun = BTreeMap<usize, Vec<RunResult>>;

/// Trains or loads every run × seed of the table, printing one line each.
pub fn train_or_load(cx: &TrainingContext<'_>, data: &LoadedData) -> Result<ByRun> {
    let (t, args) = (cx.training, cx.args);
    let runs_root = cx.out.join("runs");
    let runs_dir = runs_root.join(&cx.heading.id);
    let mut by_label: ByRun = BTreeMap::new();
    for (i, run) in t.runs.iter().enumerate() {
        for seed in 1..=args.seeds {
            let key = run_key(t, run, args.profile, seed)?;
            let entry = by_label.entry(i).or_default();
            let reused = training::cached_in_any_table(&runs_root, &key);
            let (mut result, cached) = if let Some(r) = reused {
                (r, true)
            } else if !args.may_train(&run.label) {
                println!(
                    "  {:<28} seed {seed}: not run ({})",
                    run.label,
                    args.not_trained_reason()
                );
                continue;
            } else {
                run_cached(&runs_dir, &key, t, run, args.profile, seed, data)?
            };
            // A run reused from another table carries that table's label.
            result.label.clone_from(&run.label);
            let last = result.epochs.last();
            println!(
                "  {:<28} seed {seed}: {} {} after {} epochs{}{}",
                run.label,
                t.metric.heading(),
                fmt(last.map(|e| e.metric), METRIC_DIGITS),
                result.epochs.len(),
                last.and_then(|e| e.eps_ma)
                    .map_or(String::new(), |e| format!(", ε_MA {e:.3}")),
                if cached { " (cached)" } else { "" }
            );
            entry.push(result);
        }
    }
    Ok(by_label)
}
