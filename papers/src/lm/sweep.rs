//! The learning-rate sweep on a public proxy task, so that choosing the fine-tuning runs'
//! learning rates reads no private data (tuning on the private part would itself need
//! privacy accounting: Papernot & Steinke 2022, "Hyperparameter tuning with Rényi
//! differential privacy").
//!
//! The proxy repeats the table's recipe inside the public part: it pretrains on some
//! public genres (`pretrain_genres`, tokenizer trained there too) and fine-tunes on the
//! others, which play the private part — same model, epochs, clipping norm, and the
//! table's sampling rate, steps and noise per example: with the proxy's N′ rows against
//! the table's N, the expected batch is B′ = B·N′/N and σ′ = σ·B′/B for σ the table's
//! calibrated σ at the candidate's ε, so that σ′/B′ = σ/B (the "total amount of noise"
//! that Sander, Stock & Sablayrolles 2023, "TAN without a burn", find to fix DP-SGD's
//! behaviour at a fixed number of steps; they tune at small batch the same way). Each
//! candidate learning rate is scored by perplexity on the proxy's validation documents.
//! Every document the sweep reads is public, so it costs no ε (its σ′ is a simulation,
//! not a claim); its cost is compute, reported on the page. The proxy inserts no Secret
//! Sharer canaries and only a token audit (neither is reported). One number of the private
//! part enters: its row count N (for B′ and σ′), which every private run already
//! publishes (its δ = 1/N^1.1 and its record count) — treated as public here as there.

use std::path::Path;

use anyhow::Result;
use dp_models::data::BrownText;
use dp_models::TrainingData;
use serde::{Deserialize, Serialize};

use super::audit::AuditConfig;
use super::corpus::LmCorpus;
use super::pretrain::pretrained;
use super::runs::{needs_weights, train_or_load};
use super::train::{calibrated_sigma, delta_for, total_steps, LmResult};
use super::{LmProfile, LmRun, LmTable, PublicPart, Start};
use crate::args::ReproduceArgs;

/// The sweep's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LmSweep {
    /// Public genres the proxy pretrains on; the public part's other genres play the
    /// private part.
    pub pretrain_genres: String,
    /// The candidates: pretrained runs, each a family (non-private, DP, DP LoRA) and a
    /// learning rate.
    pub runs: Vec<LmRun>,
}

/// A run's family: private or not, with which adapters (runs from scratch have none).
pub fn family(run: &LmRun) -> Option<(bool, Option<super::LoraSpec>)> {
    (run.start == Start::Pretrained).then_some((run.epsilon.is_some(), run.lora))
}

/// The sweep's outcome: every candidate's record and the proxy's pretraining wall.
pub struct SweepOutcome {
    /// The candidates as the proxy trains them (with their batch and σ′).
    pub runs: Vec<LmRun>,
    /// The candidates trained or read from the cache, in the config's order (`None`: not
    /// run by this invocation).
    pub results: Vec<Option<LmResult>>,
    /// Seconds the proxy's pretraining took, where it has run.
    pub pretrain_wall_s: Option<f64>,
}

/// The proxy table: the public genres split into `pretrain_genres` and the rest, no
/// Secret Sharer canaries, a token audit, the sweep's candidates as runs.
fn proxy_table(table: &LmTable, sweep: &LmSweep) -> Result<LmTable> {
    let public = table
        .public
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("a sweep needs a table with a public part"))?;
    let (pretrain, genres) = (&sweep.pretrain_genres, &public.genres);
    anyhow::ensure!(
        pretrain.chars().all(|g| genres.contains(g))
            && genres.chars().any(|g| !pretrain.contains(g)),
        "the sweep's pretraining genres {:?} must be a strict subset of the public genres {:?}",
        sweep.pretrain_genres,
        public.genres
    );
    check_candidates(table, sweep)?;
    let proxy_profile = |p: &LmProfile| LmProfile {
        audit: AuditConfig {
            canaries: 20,
            guesses: 4,
            confidence: p.audit.confidence,
        },
        ..*p
    };
    Ok(LmTable {
        full: proxy_profile(&table.full),
        smoke: proxy_profile(&table.smoke),
        canary_copies: Vec::new(),
        runs: sweep.runs.clone(),
        public: Some(PublicPart {
            genres: sweep.pretrain_genres.clone(),
            lr: public.lr,
        }),
        sweep: None,
        ..table.clone()
    })
}

/// Refuses what would make the sweep's choice mean something else: a family with
/// candidates at several ε (their best rates would be pooled), a candidate that is not a
/// pretrained run, and a fixed batch or σ where the sweep sets them (on a candidate) or
/// where only the sweep may (on a table run, which would then train at any σ).
fn check_candidates(table: &LmTable, sweep: &LmSweep) -> Result<()> {
    for run in sweep.runs.iter().chain(&table.runs) {
        anyhow::ensure!(
            run.batch_size.is_none() && run.noise_multiplier.is_none(),
            "{:?}: batch_size and noise_multiplier are set by the sweep's proxy, not in a table",
            run.label
        );
    }
    for run in &sweep.runs {
        anyhow::ensure!(
            family(run).is_some(),
            "{:?}: a sweep candidate starts from the pretrained weights",
            run.label
        );
        let clash = sweep
            .runs
            .iter()
            .find(|c| family(c) == family(run) && c.epsilon != run.epsilon);
        if let Some(clash) = clash {
            anyhow::bail!(
                "{:?} and {:?}: one family, two ε (a family's candidates share one ε)",
                run.label,
                clash.label
            );
        }
    }
    Ok(())
}

/// The sweep's candidates as the proxy trains them: the table's sampling rate and steps
/// (B′ = B·N′/N for the proxy's N′ rows against the table's N) and, for a private
/// candidate, the table's noise per example (σ′ = σ·B′/B, σ calibrated as the table's run
/// at that ε would be).
pub fn proxy_runs(
    sweep: &LmSweep,
    profile: &LmProfile,
    table_rows: usize,
    proxy_rows: usize,
) -> Result<Vec<LmRun>> {
    let b = profile.batch_size;
    let b_proxy = ((b * proxy_rows) as f64 / table_rows as f64)
        .round()
        .max(1.0) as usize;
    let delta = delta_for(table_rows);
    let steps = total_steps(table_rows, b, profile.epochs);
    let proxy_steps = total_steps(proxy_rows, b_proxy, profile.epochs);
    // An integer batch matches the table's steps up to the rounding of N′/B′: at most one
    // step per epoch apart (the full profile's proxy: 102 = 102).
    anyhow::ensure!(
        proxy_steps.abs_diff(steps) <= u64::from(profile.epochs),
        "the proxy's {proxy_rows} rows in batches of {b_proxy} give {proxy_steps} steps, the table's {table_rows} in batches of {b} give {steps}: more than one step per epoch apart"
    );
    // One calibration per target ε (a PLD search each; the candidates share a few ε).
    let mut calibrated: Vec<(f64, f64)> = Vec::new();
    sweep
        .runs
        .iter()
        .map(|run| {
            let sigma = match run.epsilon {
                Some(eps) => Some(match calibrated.iter().find(|(e, _)| *e == eps) {
                    Some(&(_, sigma)) => sigma,
                    None => {
                        let sigma = calibrated_sigma(eps, delta, b, table_rows, steps)?;
                        calibrated.push((eps, sigma));
                        sigma
                    }
                }),
                None => None,
            };
            Ok(LmRun {
                batch_size: Some(b_proxy),
                noise_multiplier: sigma.map(|s| s * b_proxy as f64 / b as f64),
                ..run.clone()
            })
        })
        .collect()
}

/// Trains (or reads) the proxy's pretraining and candidates under `runs_dir/sweep`.
pub fn run_sweep(
    table: &LmTable,
    sweep: &LmSweep,
    documents: &[BrownText],
    args: &ReproduceArgs,
    runs_dir: &Path,
    table_rows: usize,
) -> Result<SweepOutcome> {
    let mut proxy = proxy_table(table, sweep)?;
    let public = proxy.public.as_ref().map(|p| p.genres.clone());
    let genres = table.public.as_ref().map_or("", |p| p.genres.as_str());
    let documents: Vec<BrownText> = documents
        .iter()
        .filter(|d| genres.contains(d.category))
        .cloned()
        .collect();
    let profile = *proxy.profile(args.profile);
    let corpus = LmCorpus::build(
        documents,
        &profile.sizes,
        &proxy.canary_copies,
        &profile.audit,
        public.as_deref(),
    )?;
    proxy.runs = proxy_runs(sweep, &profile, table_rows, corpus.train.len())?;
    println!(
        "  sweep proxy: pretraining on {:?}, fine-tuning on the other public genres ({} windows, expected batch {})",
        sweep.pretrain_genres,
        corpus.windows,
        proxy.runs.first().and_then(|r| r.batch_size).unwrap_or(0)
    );
    let dir = runs_dir.join("sweep");
    std::fs::create_dir_all(&dir)?;
    let base = pretrained(
        &proxy,
        &profile,
        &corpus,
        &dir,
        needs_weights(&proxy, &dir, args)?,
    )?;
    let weights = base.as_ref().and_then(|b| b.weights.as_ref());
    let results = proxy
        .runs
        .iter()
        .map(|run| train_or_load(&proxy, run, &corpus, args, &dir, weights))
        .collect::<Result<_>>()?;
    Ok(SweepOutcome {
        runs: proxy.runs,
        results,
        pretrain_wall_s: base.map(|b| b.record.wall_s),
    })
}

/// The proxy's validation perplexity after the last epoch: the sweep's score.
fn score(r: &LmResult) -> f64 {
    r.epochs
        .last()
        .map_or(f64::NAN, |e| e.validation_perplexity)
}

/// The family's best candidate (lowest proxy validation perplexity) with its result,
/// once all of them have run; a candidate whose score is not finite (diverged) is never
/// chosen, and a family with no finite score has no choice.
pub fn chosen<'a>(
    sweep: &'a LmSweep,
    outcome: &'a SweepOutcome,
    run: &LmRun,
) -> Option<(&'a LmRun, &'a LmResult)> {
    let candidates: Vec<(&LmRun, Option<&LmResult>)> = sweep
        .runs
        .iter()
        .zip(&outcome.results)
        .filter(|(candidate, _)| family(candidate).is_some() && family(candidate) == family(run))
        .map(|(c, r)| (c, r.as_ref()))
        .collect();
    // A family whose candidates have not all run has no choice yet.
    let finished: Option<Vec<(&LmRun, &LmResult)>> = candidates
        .into_iter()
        .map(|(c, r)| r.map(|r| (c, r)))
        .collect();
    finished?
        .into_iter()
        .filter(|(_, r)| score(r).is_finite())
        .min_by(|a, b| score(a.1).total_cmp(&score(b.1)))
}

/// Whether `lr` is the smallest or largest rate of `run`'s family in the sweep (the best
/// rate may then lie outside the grid).
fn at_edge(sweep: &LmSweep, run: &LmRun, lr: f64) -> bool {
    let rates: Vec<f64> = sweep
        .runs
        .iter()
        .filter(|c| family(c) == family(run))
        .filter_map(|c| c.lr)
        .collect();
    let (lo, hi) = rates
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &r| {
            (lo.min(r), hi.max(r))
        });
    rates.len() > 1 && (lr == lo || lr == hi)
}

/// The sweep's table: one row per candidate, the chosen ones marked.
pub fn details(sweep: &LmSweep, outcome: &SweepOutcome) -> (String, Vec<String>, Vec<Vec<String>>) {
    let columns = [
        "candidate",
        "η",
        "expected batch",
        "steps",
        "σ",
        "proxy validation perplexity",
        "chosen",
        "wall (s)",
    ]
    .map(String::from)
    .to_vec();
    let rows = outcome
        .runs
        .iter()
        .zip(&outcome.results)
        .map(|(run, r)| {
            let picked = r.as_ref().zip(chosen(sweep, outcome, run).map(|(_, b)| b));
            let lr = run.lr.map_or("—".into(), |lr| format!("{lr:e}"));
            match r {
                None => vec![
                    run.label.clone(),
                    lr,
                    "not run".into(),
                    "—".into(),
                    "—".into(),
                    "—".into(),
                    "—".into(),
                    "—".into(),
                ],
                Some(r) => vec![
                    run.label.clone(),
                    lr,
                    run.batch_size.map_or("—".into(), |b| b.to_string()),
                    r.steps.to_string(),
                    format!("{:.4}", r.noise_multiplier),
                    format!("{:.1}", score(r)),
                    if picked.is_some_and(|(a, b)| a.key == b.key) {
                        "✓"
                    } else {
                        ""
                    }
                    .into(),
                    format!("{:.0}", r.wall_s),
                ],
            }
        })
        .collect();
    (
        format!(
            "The learning-rate sweep on the public proxy (pretrained on {:?}, fine-tuned on the other public genres; no ε spent)",
            sweep.pretrain_genres
        ),
        columns,
        rows,
    )
}

/// Each pretrained run of the table against its family's chosen learning rate, and what
/// the sweep cost.
pub fn findings(table: &LmTable, sweep: &LmSweep, outcome: &SweepOutcome) -> Vec<String> {
    let mut out = Vec::new();
    let finished: Vec<&LmResult> = outcome.results.iter().flatten().collect();
    if finished.len() == sweep.runs.len() {
        let runs_s: f64 = finished.iter().map(|r| r.wall_s).sum();
        out.push(format!(
            "The sweep read only public documents, so it spent no ε; it cost {} candidate runs ({runs_s:.0} s) and one proxy pretraining ({}).",
            finished.len(),
            outcome.pretrain_wall_s.map_or("its wall not recorded".into(), |s| format!("{s:.0} s"))
        ));
    }
    for run in table.runs.iter().filter(|r| family(r).is_some()) {
        let used = run.lr.unwrap_or(table.lr);
        let Some((candidate, best)) = chosen(sweep, outcome, run) else {
            out.push(format!(
                "{}: η = {used:e}; its family's sweep has not finished.",
                run.label
            ));
            continue;
        };
        let agrees = candidate.lr == Some(used);
        let edge = if at_edge(sweep, run, used) {
            " (the edge of its grid: a better rate may lie beyond it)"
        } else {
            ""
        };
        out.push(format!(
            "{}: η = {used:e} is its family's choice in the sweep{edge} (best: {}, proxy validation perplexity {:.1}) — {}.",
            run.label,
            candidate.label,
            score(best),
            if agrees { "holds" } else { "does not hold" }
        ));
    }
    out
}
