//! The language-model table's report: every run trained (or read from the cache), one row
//! per run, the plots (perplexity against ε, exposure against insertions, audited lower
//! bound against claimed ε, test perplexity per epoch) and the checked findings.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};

use super::canaries::mean_exposure;
use super::corpus::LmCorpus;
use super::pretrain::{pretrained, Pretraining};
use super::runs::{needs_weights, train_or_load};
use super::sweep::{self, run_sweep};
use super::train::LmResult;
use super::{LmTable, Start};
use crate::plot::{line_plot, Series};
use crate::report::{fmt, RunHeader, TableReport};
use crate::table_kind::TableContext;

mod findings;

/// Runs (or reuses) every run of the table and writes its report.
pub fn lm_report(
    cx: &TableContext<'_>,
    table: &LmTable,
    header: impl Fn(f64) -> RunHeader,
) -> Result<TableReport> {
    let (paper, heading, out, args) = (cx.paper, cx.heading, cx.out, cx.args);
    let started = Instant::now();
    let profile = table.profile(args.profile);
    let columns = columns(table);
    let documents = match dp_models::data::brown_texts() {
        Ok(d) => d,
        Err(e @ dp_models::Error::DataNotPresent { .. }) => {
            println!("  {e}");
            let rows = not_run_rows(table, &columns, "data not present");
            return Ok(TableReport {
                findings: vec![format!("Nothing was trained: {}", e.portable())],
                ..TableReport::for_table(paper, heading, header(0.0), columns, rows)
            });
        }
        Err(e) => return Err(e).context("loading the Brown corpus"),
    };
    let runs_dir = out.join("runs").join(&heading.id);
    std::fs::create_dir_all(&runs_dir)?;
    let corpus = LmCorpus::build(
        documents.clone(),
        &profile.sizes,
        &table.canary_copies,
        &profile.audit,
        table.public.as_ref().map(|p| p.genres.as_str()),
    )?;
    println!(
        "  vocabulary {}, {} training windows of {} tokens (at most {} per document) and {} canary rows, {} test windows",
        corpus.vocab,
        corpus.windows,
        profile.sizes.context + 1,
        corpus.max_per_document,
        dp_models::TrainingData::len(&corpus.train) - corpus.windows,
        dp_models::TrainingData::len(&corpus.test),
    );
    let rows = dp_models::TrainingData::len(&corpus.train);
    let sweep = match &table.sweep {
        Some(sweep) => Some((
            sweep,
            run_sweep(table, sweep, &documents, args, &runs_dir, rows)?,
        )),
        None => None,
    };
    let needs_weights = needs_weights(table, &runs_dir, args)?;
    let base = pretrained(table, profile, &corpus, &runs_dir, needs_weights)?;
    let mut results = Vec::new();
    for run in &table.runs {
        let weights = base.as_ref().and_then(|b| b.weights.as_ref());
        results.push(train_or_load(
            table, run, &corpus, args, &runs_dir, weights,
        )?);
    }
    let rows = table
        .runs
        .iter()
        .zip(&results)
        .map(|(run, r)| match r {
            Some(r) => row(table, r),
            None => not_run_rows(table, &columns, "not run")
                .remove(0)
                .into_iter()
                .enumerate()
                .map(|(i, c)| if i == 0 { run.label.clone() } else { c })
                .collect(),
        })
        .collect();
    let finished: Vec<&LmResult> = results.iter().flatten().collect();
    let plots = plots(out, &heading.id, &finished, &table.canary_copies)?;
    let mut run_header = header(started.elapsed().as_secs_f64());
    run_header.runs_wall_s =
        (!finished.is_empty()).then(|| finished.iter().map(|r| r.wall_s).sum());
    let mut commits: Vec<String> = finished.iter().map(|r| r.commit.clone()).collect();
    commits.sort();
    commits.dedup();
    run_header.run_commits = commits;
    let mut findings = findings::findings(&finished, &table.canary_copies, corpus.max_per_document);
    if let (Some(public), Some(Pretraining { record, .. })) = (&table.public, &base) {
        findings.insert(
            0,
            format!(
                "Pretrained non-privately on the public genres {:?} ({} windows, tokenizer trained there too): {} steps, public validation perplexity {:.1}, {:.0} s at commit {}.",
                public.genres, record.windows, record.steps, record.public_validation_perplexity, record.wall_s, record.commit
            ),
        );
    }
    let mut details = vec![per_epoch(&finished)];
    if let Some((sweep, outcome)) = &sweep {
        findings.extend(sweep::findings(table, sweep, outcome));
        details.insert(0, sweep::details(sweep, outcome));
    }
    Ok(TableReport {
        findings,
        plots,
        details,
        data: serde_json::to_value(&finished)?,
        ..TableReport::for_table(paper, heading, run_header, columns, rows)
    })
}

fn columns(table: &LmTable) -> Vec<String> {
    let mut c: Vec<String> = vec!["run".into()];
    if table.public.is_some() {
        c.push("trainable parameters".into());
    }
    c.extend(
        [
            "σ",
            "steps",
            "ε PLD",
            "ε RDP",
            "δ",
            "test perplexity",
            "validation perplexity",
            "train perplexity (not covered by ε)",
            "test − train perplexity",
        ]
        .map(String::from),
    );
    for n in &table.canary_copies {
        c.push(format!("mean exposure, n_c = {n} (bits)"));
    }
    c.extend(
        [
            "audit correct / guesses",
            "audited ε lower bound (95%)",
            "f-DP audited ε lower bound (95%)",
            "f-DP audited μ-GDP lower bound (95%)",
            "wall (s)",
            "samples/s",
        ]
        .map(String::from),
    );
    c
}

fn not_run_rows(table: &LmTable, columns: &[String], why: &str) -> Vec<Vec<String>> {
    table
        .runs
        .iter()
        .map(|r| {
            let mut row = vec![r.label.clone(), why.to_string()];
            row.resize(columns.len(), "—".into());
            row
        })
        .collect()
}

fn row(table: &LmTable, r: &LmResult) -> Vec<String> {
    let last = r.epochs.last();
    let pick = |f: fn(&super::train::LmEpoch) -> f64| last.map(f);
    let (test, train) = (pick(|e| e.test_perplexity), pick(|e| e.train_perplexity));
    let mut row = vec![r.label.clone()];
    if table.public.is_some() {
        row.push(r.parameters.to_string());
    }
    row.extend([
        if r.target_epsilon.is_some() {
            format!("{:.4}", r.noise_multiplier)
        } else {
            "—".into()
        },
        r.steps.to_string(),
        fmt(r.epsilon_pld, 2),
        fmt(r.epsilon_rdp, 2),
        format!("{:.2e}", r.delta),
        fmt(test, 1),
        fmt(pick(|e| e.validation_perplexity), 1),
        fmt(train, 1),
        fmt(test.zip(train).map(|(a, b)| a - b), 1),
    ]);
    for &n in &table.canary_copies {
        row.push(fmt(Some(mean_exposure(&r.exposures, n)), 2));
    }
    let o = &r.audit.outcome;
    row.push(format!("{} / {}", o.correct, o.guesses));
    row.push(format!("{:.3}", r.audit.lower_bound));
    row.push(match r.audit.fdp_lower_bound(r.delta) {
        Ok(bound) => format!("{bound:.3}"),
        Err(e) => format!("— ({e})"),
    });
    row.push(match r.audit.fdp_mu_lower_bound() {
        Ok(mu) => format!("{mu:.3}"),
        Err(e) => format!("— ({e})"),
    });
    row.push(format!("{:.0}", r.wall_s));
    row.push(format!("{:.1}", r.samples_per_s));
    row
}

/// Test, validation and train perplexity and ε after every epoch of every run.
fn per_epoch(results: &[&LmResult]) -> (String, Vec<String>, Vec<Vec<String>>) {
    let columns = [
        "run",
        "epoch",
        "steps",
        "train perplexity (not covered by ε)",
        "validation perplexity",
        "test perplexity",
        "ε PLD",
        "wall (s)",
    ]
    .map(String::from)
    .to_vec();
    let rows = results
        .iter()
        .flat_map(|r| {
            r.epochs.iter().map(|e| {
                vec![
                    r.label.clone(),
                    e.epoch.to_string(),
                    e.steps.to_string(),
                    format!("{:.1}", e.train_perplexity),
                    format!("{:.1}", e.validation_perplexity),
                    format!("{:.1}", e.test_perplexity),
                    fmt(e.epsilon, 2),
                    format!("{:.0}", e.wall_s),
                ]
            })
        })
        .collect();
    ("Per epoch".into(), columns, rows)
}

fn last_test(r: &LmResult) -> f64 {
    r.epochs.last().map_or(f64::NAN, |e| e.test_perplexity)
}

fn eps(r: &LmResult) -> f64 {
    r.epsilon_pld.unwrap_or(f64::NAN)
}

/// A run's family in the plots: where it starts and what it trains.
fn family(r: &LmResult) -> &'static str {
    match (r.start, r.lora.is_some(), r.epsilon_pld.is_some()) {
        (Start::Scratch, _, true) => "DP-Adam",
        (Start::Scratch, _, false) => "non-private",
        (Start::Pretrained, false, true) => "DP fine-tuning",
        (Start::Pretrained, true, true) => "DP LoRA",
        (Start::Pretrained, _, false) => "non-private fine-tuning",
    }
}

/// Test perplexity against ε, one line per private family, a dashed level per
/// non-private run over the private runs' range `(lo, hi)`.
fn perplexity_series(
    results: &[&LmResult],
    private: &[&LmResult],
    (lo, hi): (f64, f64),
) -> Vec<Series> {
    let mut families: Vec<&str> = Vec::new();
    for r in private {
        if !families.contains(&family(r)) {
            families.push(family(r));
        }
    }
    let mut series: Vec<Series> = families
        .iter()
        .map(|f| Series {
            label: f.to_string(),
            points: private
                .iter()
                .filter(|r| family(r) == *f)
                .map(|r| (eps(r), last_test(r)))
                .collect(),
            dashed: false,
            spread: Vec::new(),
        })
        .collect();
    for np in results.iter().filter(|r| r.epsilon_pld.is_none()) {
        series.push(Series {
            label: family(np).into(),
            points: vec![(lo, last_test(np)), (hi, last_test(np))],
            dashed: true,
            spread: Vec::new(),
        });
    }
    series
}

/// Both audits' lower bounds against the claimed ε, and the diagonal.
fn audit_series(private: &[&LmResult], (lo, hi): (f64, f64)) -> Result<Vec<Series>> {
    let line = |label: &str, points, dashed| Series {
        label: label.into(),
        points,
        dashed,
        spread: Vec::new(),
    };
    let claimed = private
        .iter()
        .map(|r| (eps(r), r.audit.lower_bound))
        .collect();
    let fdp = private
        .iter()
        .map(|r| Ok((eps(r), r.audit.fdp_lower_bound(r.delta)?)))
        .collect::<Result<_>>()?;
    Ok(vec![
        line("audited lower bound (Steinke et al.)", claimed, false),
        line("f-DP audited lower bound", fdp, false),
        line("claimed ε", vec![(lo, lo), (hi, hi)], true),
    ])
}

/// The four plots, written next to the table.
fn plots(out: &Path, id: &str, results: &[&LmResult], copies: &[usize]) -> Result<Vec<String>> {
    if results.is_empty() {
        return Ok(vec![]);
    }
    let mut written = Vec::new();
    let mut plot = |name: &str, title: &str, x: &str, y: &str, series: Vec<Series>| -> Result<()> {
        let file = format!("{id}-{name}.svg");
        line_plot(&out.join(&file), title, x, y, &series)?;
        written.push(file);
        Ok(())
    };
    let private: Vec<&LmResult> = results
        .iter()
        .copied()
        .filter(|r| r.epsilon_pld.is_some())
        .collect();
    if !private.is_empty() {
        let (lo, hi) = private.iter().fold((f64::MAX, f64::MIN), |(a, b), r| {
            (a.min(eps(r)), b.max(eps(r)))
        });
        plot(
            "perplexity-vs-epsilon",
            "Brown, causal transformer: test perplexity against ε (PLD)",
            "ε (PLD, δ = 1/N^1.1)",
            "test perplexity",
            perplexity_series(results, &private, (lo, hi)),
        )?;
        plot(
            "audit",
            "One-run audit: empirical ε lower bound (95%) against the claimed ε",
            "claimed ε (PLD)",
            "ε",
            audit_series(&private, (lo, hi))?,
        )?;
    }
    let x = |n: usize| ((1 + n) as f64).log10();
    let mut series: Vec<Series> = results
        .iter()
        .map(|r| Series {
            label: r.label.clone(),
            points: copies
                .iter()
                .map(|&n| (x(n), mean_exposure(&r.exposures, n)))
                .collect(),
            dashed: false,
            spread: Vec::new(),
        })
        .collect();
    let (x0, x1) = (
        x(copies.iter().copied().min().unwrap_or(0)),
        x(copies.iter().copied().max().unwrap_or(1)),
    );
    series.push(Series {
        label: "never seen (1/ln 2 bits)".into(),
        points: vec![
            (x0, std::f64::consts::LOG2_E),
            (x1, std::f64::consts::LOG2_E),
        ],
        dashed: true,
        spread: Vec::new(),
    });
    plot(
        "exposure",
        "Secret Sharer exposure against insertions",
        "log₁₀(1 + insertions n_c)",
        "mean exposure (bits)",
        series,
    )?;
    let series = results
        .iter()
        .map(|r| Series {
            label: r.label.clone(),
            points: r
                .epochs
                .iter()
                .map(|e| (f64::from(e.epoch), e.test_perplexity))
                .collect(),
            dashed: false,
            spread: Vec::new(),
        })
        .collect();
    plot(
        "test-perplexity",
        "Test perplexity per epoch",
        "epoch",
        "test perplexity",
        series,
    )?;
    Ok(written)
}
