//! `cargo xtask wide-study`: why the Wide reproduction's private word2vec losses rise.
//! Three parts, each a set of runs cached under `<out>/runs/`:
//!
//! - **opacus**: non-private and DP-SGD (σ = 0.32, 0.5) with Adam, on our engine and on
//!   Opacus, from the same initial weights, seeds 1…`seeds`;
//! - **optimizers**: DP-SGD σ = 0.32 with plain SGD at three learning rates (the best on
//!   the validation split is kept), and the noise-only controls (the DP noise fed to
//!   Adam and to that SGD with no data at all);
//! - **tuning**: sparse DP-SGD (EM and SVT selection) over a grid of σ (which sets the
//!   selection's share of ε = 30), γ, S₂ and the update rule (Adam, lazy Adam, SGD),
//!   each run's selection budget calibrated for the full 20-epoch run, ranked on the
//!   validation split (public in the paper).

use std::path::PathBuf;

use anyhow::{Context, Result};
use dp_optim::Optimizer;

mod export;
mod plan;
mod probe;
mod report;
mod runs;

pub use plan::{Part, StudyPlan};
pub use probe::{EvalSets, Point};
pub use runs::{Curve, Implementation, StudyContext, StudyRun};

use super::word2vec::build_word2vec_data;
use super::{corpus_config, WideSettings, WideTable};

/// The command line of `cargo xtask wide-study`.
#[derive(Clone, Debug, clap::Args)]
pub struct StudyArgs {
    /// Where the runs, plots and README go.
    #[arg(long, default_value = "docs/reproduction/wide/study")]
    pub out: PathBuf,
    /// Steps of each comparison and update-rule run (10,000 = one epoch of the 200K
    /// samples at b = 20).
    #[arg(long, default_value_t = 30_000)]
    pub steps: u64,
    /// Steps of each tuning run.
    #[arg(long, default_value_t = 10_000)]
    pub tuning_steps: u64,
    /// Steps between evaluation points.
    #[arg(long, default_value_t = 1000)]
    pub eval_every: u64,
    /// Samples of each split the points are measured on.
    #[arg(long, default_value_t = 20_000)]
    pub eval_samples: usize,
    /// Seeds of the Opacus comparison.
    #[arg(long, default_value_t = 2)]
    pub seeds: u64,
    /// Parts to run (all by default).
    #[arg(long, value_enum)]
    pub part: Vec<Part>,
    /// Runs at once.
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// The Python with torch and opacus (default: `$DP_BENCH_PYTHON`, else `python3`).
    #[arg(long)]
    pub python: Option<String>,
}

/// The Wide table the study varies (`figure1.json`).
pub fn figure1() -> Result<WideTable> {
    let (tables, _) = crate::table::load_paper("wide")?;
    tables
        .into_iter()
        .find(|t| t.heading.id == "figure1")
        .and_then(|t| t.kind::<WideTable>().cloned())
        .context("the wide paper has no figure1 table")
}

/// Runs the study and writes its report.
pub fn run(args: StudyArgs) -> Result<()> {
    let table = figure1()?;
    let documents = dp_models::data::brown().context("loading the Brown corpus")?;
    let data = build_word2vec_data(&documents, &corpus_config(table.corpus))?;
    let eval = EvalSets::first(&data.train, &data.validation, &data.test, args.eval_samples);
    let export_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/wide-study");
    std::fs::create_dir_all(&export_dir)?;
    let n = data.train.len();
    let context = StudyContext {
        train: &data.train,
        eval: &eval,
        settings: WideSettings {
            sampling_rate: table.batch_size as f64 / n as f64,
            clip: table.clip,
            optimizer: WideSettings::adam(table.lr),
            delta: table.delta,
        },
        vocabulary: table.corpus.vocabulary,
        dim: table.dim,
        init_std: table.init_std,
        full_steps: (n / table.batch_size) as u64 * u64::from(table.epochs),
        eval_every: args.eval_every,
        export_dir,
        python: args
            .python
            .clone()
            .or_else(|| std::env::var("DP_BENCH_PYTHON").ok())
            .unwrap_or_else(|| "python3".into()),
    };
    export_data(&context, &data, &table, args.seeds)?;
    let plan = StudyPlan {
        steps: args.steps,
        tuning_steps: args.tuning_steps,
        seeds: args.seeds,
        adam_lr: table.lr,
        parts: if args.part.is_empty() {
            vec![Part::Opacus, Part::Optimizers, Part::Tuning]
        } else {
            args.part.clone()
        },
    };
    let runs_dir = args.out.join("runs");
    std::fs::create_dir_all(&runs_dir)?;
    let curves = plan.execute(&context, &runs_dir, args.jobs.max(1))?;
    report::write(&args.out, &plan, &curves, &args)
}

fn export_data(
    context: &StudyContext,
    data: &super::word2vec::Word2VecData,
    table: &WideTable,
    seeds: u64,
) -> Result<()> {
    let dir = &context.export_dir;
    export::write_split(dir, "train", &data.train)?;
    export::write_split(dir, "validation", &data.validation)?;
    export::write_split(dir, "test", &data.test)?;
    for seed in 1..=seeds.max(1) {
        export::write_weights(dir, seed, context.initial_model(seed).weights())?;
    }
    let meta = serde_json::json!({
        "vocabulary": table.corpus.vocabulary, "dim": table.dim,
        "negatives": data.train.negatives_per_sample, "batch_size": table.batch_size,
        "train": data.train.len(), "validation": data.validation.len(), "test": data.test.len(),
    });
    std::fs::write(dir.join("meta.json"), serde_json::to_vec_pretty(&meta)?)?;
    Ok(())
}

/// Plain SGD (momentum 0) at `lr`.
pub fn sgd(lr: f64) -> Optimizer {
    Optimizer::Sgd { lr, momentum: 0.0 }
}

/// Lazy Adam with the paper's constants at `lr`.
pub fn lazy_adam(lr: f64) -> Optimizer {
    Optimizer::LazyAdam {
        lr,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wide::WideMethod;

    /// The figure's tuned runs are the settings the committed grid chose (the selection
    /// ε is calibrated by both, so only its kind is compared).
    #[test]
    fn figure1_runs_the_settings_the_grid_chose() -> Result<()> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/reproduction/wide/study/summary.json"
        );
        let summary: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
        let table = figure1()?;
        for kind in ["EM", "SVT"] {
            let chosen: StudyRun = serde_json::from_value(summary["tuned"][kind]["run"].clone())?;
            let label = format!("sparse DP-SGD, {kind} selection, tuned");
            let run = table
                .runs
                .iter()
                .find(|r| r.label == label)
                .context(label)?;
            assert_eq!(run.optimizer, Some(chosen.optimizer), "{kind}");
            assert_eq!(run.calibrate_total_epsilon, chosen.calibrate_total_epsilon);
            let shape = |m: WideMethod| match m {
                WideMethod::Sparse {
                    noise_multiplier,
                    fraction,
                    second_clip,
                    selection,
                } => {
                    let selection = serde_json::to_value(selection).map(|v| v["kind"].clone());
                    Some((noise_multiplier, fraction, second_clip, selection.ok()))
                }
                _ => None,
            };
            assert_eq!(shape(run.method), shape(chosen.method), "{kind}");
        }
        Ok(())
    }
}
