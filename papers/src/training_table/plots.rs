//! The table's plots: metric per epoch, metric against ε, metric against the target ε,
//! and the three accountants' ε per epoch.

use std::collections::BTreeMap;

use anyhow::Result;

use super::epoch_means::epoch_means;
use super::rows::finals;
use super::runs::ByRun;
use super::TrainingContext;
use crate::config::{PlotConfig, PlotY, TrainingTable};
use crate::plot::{Plot, Reference, Series};
use crate::report::mean_sd;
use crate::training::EpochRecord;

/// Draws every plot of the table that has data; the files written.
pub fn plots(cx: &TrainingContext<'_>, by_label: &ByRun) -> Result<Vec<String>> {
    let t = cx.training;
    let mut plots = vec![];
    for p in &t.plots {
        let file = format!("{}.svg", p.file);
        let mut series = match p.y {
            PlotY::Metric => metric_series(t, p, by_label)?,
            PlotY::MetricVersusEpsilon => metric_versus_epsilon(t, p, by_label)?,
            PlotY::MetricVersusBudget => metric_versus_budget(t, p, by_label)?,
            PlotY::Epsilon => epsilon_series(t, p, by_label)?,
        };
        let (x_label, y_label) = match p.y {
            PlotY::Metric => ("epoch".to_string(), t.metric.heading().to_string()),
            PlotY::Epsilon => ("epoch".to_string(), format!("ε at δ = {:e}", t.delta)),
            PlotY::MetricVersusEpsilon => (
                format!("ε at δ = {:e} (RDP, classic conversion)", t.delta),
                t.metric.heading().to_string(),
            ),
            PlotY::MetricVersusBudget => (
                format!("target ε at δ = {:e}", t.delta),
                t.metric.heading().to_string(),
            ),
        };
        series.retain(|s| !s.points.is_empty());
        if series.is_empty() {
            continue;
        }
        let references = match p.y {
            PlotY::Metric => paper_values(cx, &series),
            _ => vec![],
        };
        let plot = Plot {
            title: format!("{} ({})", p.title, setting(t)),
            x_label,
            y_label,
            series,
            references,
            // Per-epoch metrics climb from far below where the runs differ.
            focus_tail: (p.y == PlotY::Metric).then_some(0.75),
        };
        plot.write(&cx.out.join(&file))?;
        plots.push(file);
    }
    Ok(plots)
}

/// "dataset, model, δ" for a plot's title.
fn setting(t: &TrainingTable) -> String {
    let name = |v: serde_json::Result<serde_json::Value>| {
        v.ok().and_then(|v| {
            v.as_str()
                .or_else(|| v["kind"].as_str())
                .map(str::to_string)
        })
    };
    let parts: Vec<String> = [
        name(serde_json::to_value(t.dataset)),
        name(serde_json::to_value(t.model)),
    ]
    .into_iter()
    .flatten()
    .chain([format!("δ = {:e}", t.delta)])
    .collect();
    parts.join(", ")
}

/// The paper's final value of each plotted run, as a hollow marker at its last epoch.
fn paper_values(cx: &TrainingContext<'_>, series: &[Series]) -> Vec<Reference> {
    series
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let value = cx.published.find(&cx.heading.id, &s.label, "metric")?;
            let last = s.points.last()?.0;
            Some(Reference {
                label: format!("paper: {}", s.label),
                x: Some(last),
                y: value.value,
                series: Some(i),
            })
        })
        .collect()
}

/// The index of the run labelled `label`, or an error naming the plot.
fn run_index(t: &TrainingTable, p: &PlotConfig, label: &str) -> Result<usize> {
    t.runs
        .iter()
        .position(|r| r.label == label)
        .ok_or_else(|| anyhow::anyhow!("plot {}: no run {label:?}", p.file))
}

/// The metric per epoch of each named run.
fn metric_series(t: &TrainingTable, p: &PlotConfig, by_label: &ByRun) -> Result<Vec<Series>> {
    p.runs
        .iter()
        .map(|label| {
            let i = run_index(t, p, label)?;
            let (points, spread) = epoch_spread(&by_label[&i], |e| Some(e.metric));
            Ok(Series {
                label: label.clone(),
                points,
                dashed: false,
                spread,
            })
        })
        .collect()
}

/// Per-epoch means and sds over seeds (no spread with one seed).
fn epoch_spread(
    results: &[crate::training::RunResult],
    field: impl Fn(&EpochRecord) -> Option<f64>,
) -> (Vec<(f64, f64)>, Vec<f64>) {
    let epochs = results.iter().map(|r| r.epochs.len()).max().unwrap_or(0);
    let mut points = Vec::new();
    let mut spread = Vec::new();
    for i in 0..epochs {
        let values: Vec<f64> = results
            .iter()
            .filter_map(|r| r.epochs.get(i).and_then(&field))
            .collect();
        if values.is_empty() {
            continue;
        }
        let (mean, sd) = mean_sd(&values);
        points.push(((i + 1) as f64, mean));
        spread.push(sd.unwrap_or(0.0));
    }
    if spread.iter().all(|&s| s == 0.0) {
        spread.clear();
    }
    (points, spread)
}

/// The metric against ε of all steps (and, for SA-DPSGD, against the paper's ε).
fn metric_versus_epsilon(
    t: &TrainingTable,
    p: &PlotConfig,
    by_label: &ByRun,
) -> Result<Vec<Series>> {
    let mut series = vec![];
    for label in &p.runs {
        let i = run_index(t, p, label)?;
        let pairs = |eps: fn(&EpochRecord) -> Option<f64>| {
            let x = epoch_means(&by_label[&i], eps);
            let (y, sd) = epoch_spread(&by_label[&i], |e| Some(e.metric));
            let mut points = Vec::new();
            let mut spread = Vec::new();
            for &(epoch, e) in &x {
                if let Some(k) = y.iter().position(|p| p.0 == epoch) {
                    points.push((e, y[k].1));
                    spread.extend(sd.get(k));
                }
            }
            (points, spread)
        };
        let (points, spread) = pairs(|e| e.eps_ma);
        series.push(Series {
            label: format!("{label} (ε of all steps)"),
            points,
            dashed: false,
            spread,
        });
        let (paper, spread) = pairs(|e| e.eps_paper);
        if !paper.is_empty() {
            series.push(Series {
                label: format!("{label} (paper's ε of accepted steps)"),
                points: paper,
                dashed: true,
                spread,
            });
        }
    }
    Ok(series)
}

/// The final metric against each run's target ε, one line per series; runs without a
/// target are flat dashed lines across the range.
fn metric_versus_budget(
    t: &TrainingTable,
    p: &PlotConfig,
    by_label: &ByRun,
) -> Result<Vec<Series>> {
    let mut order: Vec<String> = vec![];
    let mut points: BTreeMap<String, Vec<(f64, f64, f64)>> = BTreeMap::new();
    let mut flat = vec![];
    for label in &p.runs {
        let i = run_index(t, p, label)?;
        let results = &by_label[&i];
        if results.is_empty() {
            continue;
        }
        let (metric, sd) = mean_sd(&finals(results, &|e| Some(e.metric)));
        match t.runs[i].target_epsilon() {
            Some(eps) => {
                let name = t.runs[i].series.clone().unwrap_or(label.clone());
                if !order.contains(&name) {
                    order.push(name.clone());
                }
                points
                    .entry(name)
                    .or_default()
                    .push((eps, metric, sd.unwrap_or(0.0)));
            }
            None => flat.push((label.clone(), metric)),
        }
    }
    let xs: Vec<f64> = points.values().flatten().map(|p| p.0).collect();
    let (x0, x1) = xs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    let mut series = vec![];
    for name in order {
        let mut line = points.remove(&name).unwrap_or_default();
        line.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut spread: Vec<f64> = line.iter().map(|p| p.2).collect();
        if spread.iter().all(|&s| s == 0.0) {
            spread.clear();
        }
        series.push(Series {
            label: name,
            points: line.iter().map(|p| (p.0, p.1)).collect(),
            dashed: false,
            spread,
        });
    }
    if x0.is_finite() {
        for (label, metric) in flat {
            series.push(Series {
                label,
                points: vec![(x0, metric), (x1, metric)],
                dashed: true,
                spread: Vec::new(),
            });
        }
    }
    Ok(series)
}

/// The three accountants' ε per epoch of the first named run.
fn epsilon_series(t: &TrainingTable, p: &PlotConfig, by_label: &ByRun) -> Result<Vec<Series>> {
    let label = p.runs.first().map(String::as_str).unwrap_or_default();
    let r = &by_label[&run_index(t, p, label)?];
    Ok(vec![
        Series {
            label: "moments accountant (RDP, classic)".into(),
            points: epoch_means(r, |e| e.eps_ma),
            dashed: false,
            spread: Vec::new(),
        },
        Series {
            label: "CLT, Poisson (asymptotic)".into(),
            points: epoch_means(r, |e| e.eps_clt),
            dashed: true,
            spread: Vec::new(),
        },
        Series {
            label: "PLD (tight)".into(),
            points: epoch_means(r, |e| e.eps_pld),
            dashed: false,
            spread: Vec::new(),
        },
    ])
}
