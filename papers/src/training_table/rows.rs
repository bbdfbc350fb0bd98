//! The table's columns and, per run, its row, its comparisons with the paper and its
//! per-epoch details.

use super::epoch_means::epoch_means;
use super::runs::ByRun;
use super::{TrainingContext, METRIC_DIGITS};
use crate::args::Profile;
use crate::config::{RunConfig, TrainingTable};
use crate::report::compare;
use crate::report::{fmt, mean_sd, Comparison, RunHeader, Status, TableReport};
use crate::training::{DpdOutcome, EpochRecord, ExtraColumn, RunResult};

/// A detailed table: heading, columns, rows.
pub type Detail = (String, Vec<String>, Vec<Vec<String>>);

/// The final epoch's value of `f` for each seed that has it.
pub fn finals(results: &[RunResult], f: &dyn Fn(&EpochRecord) -> Option<f64>) -> Vec<f64> {
    results
        .iter()
        .filter_map(|r| r.epochs.last().and_then(f))
        .collect()
}

/// `mean ± sd` at `digits`, the mean alone for one value, "—" for none.
pub fn mean_text(values: &[f64], digits: usize) -> String {
    if values.is_empty() {
        return "—".to_string();
    }
    match mean_sd(values) {
        (m, Some(sd)) => format!("{m:.digits$} ± {sd:.digits$}"),
        (m, None) => format!("{m:.digits$}"),
    }
}

/// The main table's columns (DPD tables have more, and `extra`: those of the table's
/// algorithms).
pub fn columns(t: &TrainingTable, extra: &[ExtraColumn]) -> Vec<String> {
    let mut columns: Vec<String> = [
        "run",
        "σ",
        "seeds",
        "epochs",
        "steps",
        t.metric.heading(),
        "ε RDP ledger (all steps)",
        "μ CLT",
        "ε CLT",
        "ε PLD",
        "stopped by μ",
        "wall (s)",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if t.dpd.is_some() {
        for c in [
            "ε target (DPD's accounting, or RDP for DP-SGD)",
            "DPD ε_iter",
            "DPD σ",
            "median α, first layer (final θ)",
            "posterior predictive (%)",
        ] {
            columns.push(c.into());
        }
    }
    columns.extend(extra.iter().map(|c| c.heading.to_string()));
    columns
}

/// The report of a table whose data is not on this machine: every row says so.
pub fn not_present_report(
    cx: &TrainingContext<'_>,
    why: &str,
    header: RunHeader,
    columns: Vec<String>,
) -> TableReport {
    println!("  {why}");
    let (t, published, id) = (cx.training, cx.published, &cx.heading.id);
    let rows = t
        .runs
        .iter()
        .map(|r| {
            let mut row = vec![r.label.clone(), fmt(r.sigma, 3), "data not present".into()];
            row.resize(columns.len(), "—".into());
            row
        })
        .collect();
    let comparisons = t
        .runs
        .iter()
        .map(|r| Comparison {
            row: r.label.clone(),
            column: "metric".into(),
            paper: published.find(id, &r.label, "metric").map(|p| p.value),
            source: published
                .find(id, &r.label, "metric")
                .map(|p| p.source.clone()),
            ours: None,
            ours_sd: None,
            difference: None,
            status: Status::DataNotPresent,
        })
        .collect();
    TableReport {
        comparisons,
        findings: vec![format!("Nothing was trained: {why}")],
        plots: vec![],
        details: vec![],
        data: serde_json::Value::Null,
        ..TableReport::for_table(cx.paper, cx.heading, header, columns, rows)
    }
}

/// Every run's row, comparisons and per-epoch details.
pub fn run_rows(
    cx: &TrainingContext<'_>,
    by_label: &ByRun,
    extra: &[ExtraColumn],
    width: usize,
) -> (Vec<Vec<String>>, Vec<Comparison>, Vec<Detail>) {
    let (mut rows, mut comparisons, mut details) = (vec![], vec![], vec![]);
    for (i, run) in cx.training.runs.iter().enumerate() {
        let results = &by_label[&i];
        if results.is_empty() {
            let mut row = vec![run.label.clone(), fmt(run.sigma, 3), "not run".into()];
            row.resize(width, "—".into());
            rows.push(row);
            continue;
        }
        let mut row = base_row(run, results);
        if cx.training.dpd.is_some() {
            row.extend(dpd_cells(run, results));
        }
        for column in extra {
            let values = finals(results, &column.reading);
            row.push(mean_text(&values, column.digits));
            match column.published {
                Some(key) if !values.is_empty() && cx.args.profile == Profile::Full => {
                    comparisons.extend(compare(
                        cx.published,
                        &cx.heading.id,
                        &run.label,
                        key,
                        &values,
                    ));
                }
                _ => {}
            }
        }
        rows.push(row);
        comparisons.extend(run_comparisons(cx, run, results));
        details.push(epoch_details(cx.training, run, results));
    }
    (rows, comparisons, details)
}

/// The cells every run has: σ, seeds, epochs, steps, metric, the ε readings, μ stops, wall.
fn base_row(run: &RunConfig, results: &[RunResult]) -> Vec<String> {
    let metric = finals(results, &|e| Some(e.metric));
    let noise: Vec<f64> = results.iter().filter_map(|r| r.noise_multiplier).collect();
    let sigma_text = if noise.is_empty() {
        fmt(run.sigma, 3)
    } else {
        mean_text(&noise, 3)
    };
    let epochs: Vec<f64> = results.iter().map(|r| r.epochs.len() as f64).collect();
    let steps = finals(results, &|e| Some(e.steps as f64));
    vec![
        run.label.clone(),
        sigma_text,
        results.len().to_string(),
        mean_text(&epochs, 0),
        mean_text(&steps, 0),
        mean_text(&metric, METRIC_DIGITS),
        mean_text(&finals(results, &|e| e.eps_ma), 3),
        mean_text(&finals(results, &|e| e.mu_clt), 3),
        mean_text(&finals(results, &|e| e.eps_clt), 3),
        mean_text(&finals(results, &|e| e.eps_pld), 3),
        results
            .iter()
            .filter(|r| r.stopped_by_mu)
            .count()
            .to_string(),
        mean_text(&results.iter().map(|r| r.wall_s).collect::<Vec<_>>(), 0),
    ]
}

/// A DPD table's extra cells: target ε, ε_iter, σ, the implied dropout rate, the
/// posterior predictive.
fn dpd_cells(run: &RunConfig, results: &[RunResult]) -> Vec<String> {
    let of_dpd = |f: &dyn Fn(&DpdOutcome) -> f64| -> Vec<f64> {
        results
            .iter()
            .filter_map(|r| r.dpd.as_ref().map(f))
            .collect()
    };
    let eps_iter = of_dpd(&|d| d.calibration.epsilon_iter);
    let sigma = of_dpd(&|d| d.calibration.paper_sigma);
    let alpha = of_dpd(&|d| d.dropout_rates.first().map_or(f64::NAN, |r| r.median));
    let predictive: Vec<f64> = results.iter().filter_map(|r| r.predictive_metric).collect();
    vec![
        fmt(run.target_epsilon(), 2),
        mean_text(&eps_iter, 4),
        mean_text(&sigma, 3),
        if alpha.is_empty() {
            "—".into()
        } else {
            format!("{:.3e}", mean_sd(&alpha).0)
        },
        mean_text(&predictive, METRIC_DIGITS),
    ]
}

/// The run's metric and ε readings against the paper's (full profile only: smoke runs
/// are subsets and a few epochs, so nothing of theirs is compared).
fn run_comparisons(
    cx: &TrainingContext<'_>,
    run: &RunConfig,
    results: &[RunResult],
) -> Vec<Comparison> {
    if cx.args.profile != Profile::Full {
        return vec![];
    }
    let (published, id) = (cx.published, &cx.heading.id);
    let metric = finals(results, &|e| Some(e.metric));
    let mut out = vec![
        compare(published, id, &run.label, "metric", &metric).unwrap_or(Comparison {
            row: run.label.clone(),
            column: "metric".into(),
            paper: None,
            source: None,
            ours: Some(mean_sd(&metric).0),
            ours_sd: mean_sd(&metric).1,
            difference: None,
            status: Status::NotPublished,
        }),
    ];
    for (key, f) in [
        (
            "eps_ma",
            (|e: &EpochRecord| e.eps_ma) as fn(&EpochRecord) -> Option<f64>,
        ),
        ("mu_clt", |e: &EpochRecord| e.mu_clt),
        ("eps_clt", |e: &EpochRecord| e.eps_clt),
    ] {
        let values = finals(results, &f);
        if !values.is_empty() {
            out.extend(compare(published, id, &run.label, key, &values));
        }
    }
    out
}

/// The run's per-epoch table (means over seeds).
fn epoch_details(t: &TrainingTable, run: &RunConfig, results: &[RunResult]) -> Detail {
    let per_epoch = |f: fn(&EpochRecord) -> Option<f64>| epoch_means(results, f);
    let (m, l, e1, e2, e3, mu_e) = (
        per_epoch(|e| Some(e.metric)),
        per_epoch(|e| Some(e.train_loss)),
        per_epoch(|e| e.eps_ma),
        per_epoch(|e| e.eps_clt),
        per_epoch(|e| e.eps_pld),
        per_epoch(|e| e.mu_clt),
    );
    let lookup = |series: &[(f64, f64)], x: f64| series.iter().find(|p| p.0 == x).map(|p| p.1);
    let detail_rows = m
        .iter()
        .map(|&(x, v)| {
            vec![
                format!("{x}"),
                fmt(lookup(&l, x), 4),
                fmt(Some(v), METRIC_DIGITS),
                fmt(lookup(&e1, x), 3),
                fmt(lookup(&mu_e, x), 3),
                fmt(lookup(&e2, x), 3),
                fmt(lookup(&e3, x), 3),
            ]
        })
        .collect();
    (
        format!("Per epoch: {} (mean over seeds)", run.label),
        [
            "epoch",
            "train loss (not covered by ε)",
            t.metric.heading(),
            "ε MA",
            "μ CLT",
            "ε CLT",
            "ε PLD",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        detail_rows,
    )
}
