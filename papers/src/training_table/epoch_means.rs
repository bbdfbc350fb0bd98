//! A run label's per-epoch means over its seeds, for the table's rows, plots and findings.

use crate::report::mean_sd;
use crate::training::{EpochRecord, RunResult};

/// Per-epoch means over seeds of one run label.
pub(crate) fn epoch_means(
    results: &[RunResult],
    field: impl Fn(&EpochRecord) -> Option<f64>,
) -> Vec<(f64, f64)> {
    let max_epochs = results.iter().map(|r| r.epochs.len()).max().unwrap_or(0);
    (0..max_epochs)
        .filter_map(|i| {
            let values: Vec<f64> = results
                .iter()
                .filter_map(|r| r.epochs.get(i).and_then(&field))
                .collect();
            (!values.is_empty()).then(|| ((i + 1) as f64, mean_sd(&values).0))
        })
        .collect()
}
