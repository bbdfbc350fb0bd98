//! The Wide table's report: every method trained (or reused from the cache), ε recomputed
//! with one accountant, rows, the Figure 1 plots, canary rank histograms, per-epoch
//! details and the claims.

use std::path::Path;
use std::time::Instant;

use super::WideMethod;
use crate::run_cache::RunCache;
use crate::wide::word2vec::{
    build_word2vec_data, insert_canaries, random_canaries, Canary, PairSet, Word2VecData,
};
use anyhow::{Context, Result};
use dp_mechanisms::NoiseSource;

use super::claims::claims;
use super::{
    corpus_config, key, method_text, run_epsilon, train_one, CorpusSizes, WideEpoch, WideResult,
    WideTable,
};
use crate::args::{Profile, ReproduceArgs};
use crate::config::TableHeading;
use crate::plot::{line_plot, Series};
use crate::report::{fmt, Comparison, RunHeader, Status, TableReport};
use crate::table_kind::TableContext;

/// A detailed table: heading, columns, rows.
type Detail = (String, Vec<String>, Vec<Vec<String>>);

/// Runs (or reuses) every method and writes the report.
pub fn wide_report(
    cx: &TableContext<'_>,
    table: &WideTable,
    header: impl Fn(f64) -> RunHeader,
) -> Result<TableReport> {
    let (paper, table_config, out, args) = (cx.paper, cx.heading, cx.out, cx.args);
    let profile = args.profile;
    let started = Instant::now();
    let columns = columns(table);
    let (sizes, epochs, per_count) = match profile {
        Profile::Full => (table.corpus, table.epochs, table.canaries.per_count),
        Profile::Smoke => (
            table.smoke.corpus,
            table.smoke.epochs,
            table.smoke.canaries_per_count,
        ),
    };
    let documents = match dp_models::data::brown() {
        Ok(d) => d,
        Err(e @ dp_models::Error::DataNotPresent { .. }) => {
            println!("  {e}");
            let header = header(started.elapsed().as_secs_f64());
            return Ok(not_present(
                paper,
                table_config,
                table,
                &e.portable(),
                header,
                columns,
            ));
        }
        Err(e) => return Err(e).context("loading the Brown corpus"),
    };
    let data = build_word2vec_data(&documents, &corpus_config(sizes))?;
    // The same canaries (and insertion draws) for every method.
    let mut rng = NoiseSource::seeded(3);
    let mut canaries = Vec::new();
    for &copies in &table.canaries.copies {
        canaries.extend(random_canaries(
            sizes.vocabulary,
            per_count,
            copies,
            &mut rng,
        ));
    }
    let mut train = data.train.clone();
    insert_canaries(&mut train, &canaries, sizes.window, &data.noise, &mut rng);
    let runs_dir = out.join("runs").join(&table_config.id);
    std::fs::create_dir_all(&runs_dir)?;
    let trained = Trained {
        data: &data,
        train: &train,
        canaries: &canaries,
        epochs,
    };
    let mut results = train_or_load(table, args, &runs_dir, &trained)?;
    recompute_epsilons(table, sizes, train.len(), &mut results)?;
    let mut rows = Vec::new();
    for (run, result) in table.runs.iter().zip(&results) {
        rows.push(match result {
            Some(r) => row(table, &run.label, run.paper_epsilon, r, train.len())?,
            None => {
                let mut row = vec![run.label.clone(), "not run".into()];
                row.resize(columns.len(), "—".into());
                row
            }
        });
    }
    let plots = figure1(out, &results)?;
    let details = vec![rank_histograms(table, &results), per_epoch(&results)];
    let findings = claims(&table.runs, &results, profile);
    let finished: Vec<&WideResult> = results.iter().flatten().collect();
    let mut run_header = header(started.elapsed().as_secs_f64());
    run_header.runs_wall_s = Some(finished.iter().map(|r| r.wall_s).sum());
    let mut commits: Vec<String> = finished.iter().map(|r| r.commit.clone()).collect();
    commits.sort();
    commits.dedup();
    run_header.run_commits = commits;
    Ok(TableReport {
        comparisons: vec![],
        findings,
        plots,
        details,
        data: serde_json::to_value(&finished)?,
        ..TableReport::for_table(paper, table_config, run_header, columns, rows)
    })
}

/// What every method trains on.
struct Trained<'a> {
    data: &'a Word2VecData,
    train: &'a PairSet,
    canaries: &'a [Canary],
    epochs: u32,
}

/// The table's columns (one exposure column per insertion count).
fn columns(table: &WideTable) -> Vec<String> {
    let mut columns: Vec<String> = [
        "method",
        "σ",
        "selection",
        "epochs",
        "final train loss (not covered by ε)",
        "final test loss",
        "test − train",
        "ε RDP (noise and selection jointly)",
        "ε PLD (the noise alone)",
        "ε the paper states",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for c in &table.canaries.copies {
        columns.push(format!("mean exposure, n_c = {c}"));
    }
    columns.push("wall (s)".into());
    columns
}

/// The report when the Brown corpus is not on this machine.
fn not_present(
    paper: &str,
    table_config: &TableHeading,
    table: &WideTable,
    why: &str,
    header: RunHeader,
    columns: Vec<String>,
) -> TableReport {
    let rows = table
        .runs
        .iter()
        .map(|r| {
            let mut row = vec![r.label.clone(), "data not present".into()];
            row.resize(columns.len(), "—".into());
            row
        })
        .collect();
    TableReport {
        comparisons: table
            .runs
            .iter()
            .map(|r| Comparison {
                row: r.label.clone(),
                column: "test_loss".into(),
                paper: None,
                source: None,
                ours: None,
                ours_sd: None,
                difference: None,
                status: Status::DataNotPresent,
            })
            .collect(),
        findings: vec![format!("Nothing was trained: {why}")],
        ..TableReport::for_table(paper, table_config, header, columns, rows)
    }
}

/// Each method's result: from the run cache, trained, or `None` when this invocation
/// may not train it.
fn train_or_load(
    table: &WideTable,
    args: &ReproduceArgs,
    runs_dir: &Path,
    trained: &Trained<'_>,
) -> Result<Vec<Option<WideResult>>> {
    let mut results: Vec<Option<WideResult>> = Vec::new();
    for run in &table.runs {
        let key = key(table, run, args.profile)?;
        let cache = RunCache::new(runs_dir);
        let result = match cache.get::<WideResult>(&key) {
            Some(r) => {
                println!("  {:<34} (cached)", run.label);
                Some(r)
            }
            None if !args.may_train(&run.label) => {
                println!(
                    "  {:<34} not run ({})",
                    run.label,
                    args.not_trained_reason()
                );
                None
            }
            None => {
                let r = train_one(
                    table,
                    run,
                    trained.data,
                    trained.train,
                    trained.canaries,
                    trained.epochs,
                    &key,
                )?;
                cache.put(&key, &r)?;
                Some(r)
            }
        };
        if let Some(r) = &result {
            let last = r.epochs.last();
            println!(
                "  {:<34} train {} test {} ε {} ({:.0} s)",
                run.label,
                fmt(last.map(|e| e.train_loss), 4),
                fmt(last.map(|e| e.test_loss), 4),
                fmt(last.and_then(|e| e.epsilon), 2),
                r.wall_s
            );
        }
        results.push(result);
    }
    Ok(results)
}

/// ε recomputed from each run's method and steps, so that every row uses the same
/// accountant whatever binary trained it.
fn recompute_epsilons(
    table: &WideTable,
    sizes: CorpusSizes,
    n: usize,
    results: &mut [Option<WideResult>],
) -> Result<()> {
    for r in results.iter_mut().flatten() {
        let p = sizes.vocabulary * table.dim;
        let event = r.method.step_event(super::settings(table, n), p)?;
        for e in &mut r.epochs {
            e.epsilon = match &event {
                Some(event) => Some(run_epsilon(event, e.steps, table.delta)?),
                None => None,
            };
        }
    }
    Ok(())
}

/// One method's row: losses, ε jointly and of the noise alone, exposures, wall.
fn row(
    table: &WideTable,
    label: &str,
    paper_epsilon: Option<f64>,
    r: &WideResult,
    n: usize,
) -> Result<Vec<String>> {
    let last = r.epochs.last();
    let (sigma, selection) = method_text(&r.method);
    // The tight PLD of the Gaussian part (for sparse methods a lower bound on the whole
    // step, whose selection PLD does not cover).
    let noise_pld = match (r.method, last) {
        (
            WideMethod::DpSgd { noise_multiplier }
            | WideMethod::Sparse {
                noise_multiplier, ..
            },
            Some(e),
        ) => Some(crate::accounting::pld_epsilon(
            table.batch_size as f64 / n as f64,
            noise_multiplier,
            e.steps,
            table.delta,
        )?),
        _ => None,
    };
    let mut row = vec![
        label.to_string(),
        sigma,
        selection,
        r.epochs.len().to_string(),
        fmt(last.map(|e| e.train_loss), 4),
        fmt(last.map(|e| e.test_loss), 4),
        fmt(last.map(|e| e.test_loss - e.train_loss), 4),
        fmt(last.and_then(|e| e.epsilon), 2),
        fmt(noise_pld, 2),
        fmt(paper_epsilon, 1),
    ];
    for &c in &table.canaries.copies {
        let values: Vec<f64> = r
            .exposures
            .iter()
            .filter(|(n, _)| *n == c)
            .map(|(_, e)| *e)
            .collect();
        row.push(fmt(
            (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64),
            2,
        ));
    }
    row.push(format!("{:.0}", r.wall_s));
    Ok(row)
}

/// Figure 1: training and test loss per epoch, one series per method.
fn figure1(out: &Path, results: &[Option<WideResult>]) -> Result<Vec<String>> {
    let mut plots = Vec::new();
    for (file, title, pick) in [
        (
            "figure1-train-loss",
            "Figure 1: word2vec on Brown, training loss per epoch (δ = 1e-5)",
            (|e: &WideEpoch| e.train_loss) as fn(&WideEpoch) -> f64,
        ),
        (
            "figure1-test-loss",
            "Figure 1: word2vec on Brown, test loss per epoch (δ = 1e-5)",
            |e: &WideEpoch| e.test_loss,
        ),
    ] {
        let series: Vec<Series> = results
            .iter()
            .flatten()
            .map(|r| Series {
                label: r.label.clone(),
                points: r
                    .epochs
                    .iter()
                    .map(|e| (f64::from(e.epoch), pick(e)))
                    .collect(),
                dashed: r.label.ends_with("tuned"),
                spread: Vec::new(),
            })
            .collect();
        if series.is_empty() {
            continue;
        }
        let name = format!("{file}.svg");
        line_plot(&out.join(&name), title, "epoch", "mean loss", &series)?;
        plots.push(name);
    }
    Ok(plots)
}

/// Canaries per decile of rank/|R|, per method and insertion count.
fn rank_histograms(table: &WideTable, results: &[Option<WideResult>]) -> Detail {
    let mut histogram_rows = Vec::new();
    for r in results.iter().flatten() {
        for &c in &table.canaries.copies {
            let mut bins = [0usize; 10];
            let mut total = 0;
            for (n, f) in &r.rank_fractions {
                if *n == c {
                    bins[((f * 10.0) as usize).min(9)] += 1;
                    total += 1;
                }
            }
            let mut row = vec![r.label.clone(), c.to_string(), total.to_string()];
            row.extend(bins.iter().map(|b| b.to_string()));
            histogram_rows.push(row);
        }
    }
    let mut histogram_columns = vec!["method".to_string(), "n_c".into(), "canaries".into()];
    histogram_columns.extend((0..10).map(|i| format!("rank in [{}%, {}%)", i * 10, (i + 1) * 10)));
    (
        "Canary rank histograms (rank / |R| in deciles; uniform = nothing memorised)".to_string(),
        histogram_columns,
        histogram_rows,
    )
}

/// Every method's losses and ε per epoch.
fn per_epoch(results: &[Option<WideResult>]) -> Detail {
    let mut epoch_rows = Vec::new();
    for r in results.iter().flatten() {
        for e in &r.epochs {
            epoch_rows.push(vec![
                r.label.clone(),
                e.epoch.to_string(),
                fmt(Some(e.train_loss), 4),
                fmt(Some(e.test_loss), 4),
                fmt(e.epsilon, 2),
            ]);
        }
    }
    (
        "Per epoch".into(),
        [
            "method",
            "epoch",
            "train loss (not covered by ε)",
            "test loss",
            "ε",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        epoch_rows,
    )
}
