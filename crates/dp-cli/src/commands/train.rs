//! `dp train`.
//!
//! What it prints is what ε covers (test-set accuracy, ε, steps); statistics of the
//! private training data computed without noise (the training loss, the count of
//! non-finite per-sample gradients) only with `--show-non-private-stats`, labelled as
//! not covered by ε. Outputs are checked before the first step, the checkpoint
//! directory is locked for the run, and each epoch's checkpoint is written *before* the
//! epoch's line is printed, so nothing is released from steps a resume would redo.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use dp_mechanisms::NoiseSource;
use dp_models::data::Dataset;
use dp_models::models::{mnist_cnn, Activation, Network};
use dp_optim::collective::{Collective, Metered, Traffic};
use dp_optim::{
    CheckpointDir, Control, DistributedDpSgd, DpSgd, EpochSummary, GradientNormalisation, Observer,
    PrivacyEngine, StepReport, TrainConfig, Trainer,
};
use serde_json::json;

use super::distributed::seam;
use super::train_config::{self, MAX_BATCH};
use super::{check_delta, check_noise_multiplier, check_positive};
use crate::args::{AccountantChoice, DatasetChoice, MechanismChoice, ModelChoice, TrainArgs};
use crate::interrupt::{Interrupt, Interrupted};
use crate::output::{diag, epsilon_json, epsilon_text, short};

/// The longest run `dp train` accepts, in steps.
const MAX_STEPS: f64 = 1e7;

pub fn run(args: &TrainArgs) -> Result<String> {
    check_args(args)?;
    let (train, test) = match args.dataset {
        DatasetChoice::Mnist => dp_models::data::mnist(),
        DatasetChoice::FashionMnist => dp_models::data::fashion_mnist(),
    }
    .context("loading the dataset")?;
    let train = match args.limit {
        Some(n) => train.truncated(n),
        None => train,
    };
    let n = train.len();
    if args.batch_size == 0 || args.batch_size > n {
        bail!("--batch-size ({}) must be in 1..={n}", args.batch_size);
    }
    let sampler = train_config::sampler(args, n)?;
    let steps_per_epoch = sampler.steps_per_epoch(n) as u64;
    let exact_steps = args.epochs * steps_per_epoch as f64;
    if exact_steps > MAX_STEPS {
        bail!(
            "--epochs ({}) gives {} steps; at most {} are allowed (split a longer run into resumed runs with --checkpoint-dir)",
            short(args.epochs),
            short(exact_steps),
            short(MAX_STEPS)
        );
    }
    let total_steps = exact_steps.round().max(1.0) as u64;
    if let Some(path) = &args.save_weights {
        check_writable(path, "--save-weights")?;
    }
    let mut noise = match args.seed {
        Some(seed) => {
            diag("warning: --seed makes the noise reproducible and predictable; never use it in production");
            NoiseSource::seeded(seed)
        }
        None => NoiseSource::os_seeded()?,
    };
    let activation = match args.model {
        ModelChoice::MnistCnn => Activation::Tanh,
        ModelChoice::MnistCnnRelu => Activation::Relu,
    };
    let config = TrainConfig {
        sampler,
        privacy: train_config::privacy(args, sampler, n, total_steps)?,
        optimizer: train_config::optimizer(args),
        normalisation: GradientNormalisation::ExpectedBatchSize,
    };
    let model = mnist_cnn(activation, &mut noise)?;
    let mut engine = PrivacyEngine::new(model, config, n, noise)?;
    if let Some(size) = args.physical_batch_size {
        engine.set_physical_batch_size(size)?;
    }
    let mut group = super::distributed::group(args)?;
    let rank = group.as_ref().map_or(0, |g| g.rank());
    let trained = super::resume::resume(args, &mut engine, &mut group).and_then(|checkpoints| {
        let data = (&train, &test);
        train_loop(
            args,
            &mut engine,
            data,
            total_steps,
            checkpoints.as_ref(),
            seam(&mut group),
        )
    });
    let mut trained = super::distributed::end_on_error(trained, seam(&mut group))?;
    trained.traffic = group.as_ref().map(Metered::traffic);
    // Every rank holds the same θ and ledger; rank 0 speaks for the run.
    if rank != 0 {
        return Ok(String::new());
    }
    if let Some(path) = &args.save_weights {
        engine
            .model()
            .taps()
            .state_dict()
            .write(path)
            .map_err(|e| {
                anyhow::anyhow!(
                    "--save-weights ({}) could not be written: {}",
                    path.display(),
                    root_cause(&e)
                )
            })?;
    }
    trained.render(args, &engine, &test)
}

/// The innermost cause of an error, once (an I/O error wrapped twice is not repeated).
fn root_cause(e: &dyn std::error::Error) -> String {
    let mut inner = e;
    while let Some(next) = inner.source() {
        inner = next;
    }
    inner.to_string()
}

/// Flag checks that need no data, each naming its flag.
fn check_args(args: &TrainArgs) -> Result<()> {
    check_positive("--epochs", args.epochs)?;
    check_positive("--max-grad-norm", args.max_grad_norm)?;
    check_positive("--lr", args.lr)?;
    check_delta(args.delta)?;
    if let Some(s) = args.noise_multiplier {
        check_noise_multiplier(s)?;
    }
    if let Some(e) = args.target_epsilon {
        check_positive("--target-epsilon", e)?;
    }
    if !(0.0..1.0).contains(&args.momentum) {
        bail!("--momentum ({}) must be in [0, 1)", short(args.momentum));
    }
    if args.no_dp {
        for (given, flag) in [
            (args.noise_multiplier.is_some(), "--noise-multiplier"),
            (args.target_epsilon.is_some(), "--target-epsilon"),
            (
                args.mechanism == MechanismChoice::BandMf,
                "--mechanism band-mf",
            ),
        ] {
            if given {
                bail!("{flag} has no effect with --no-dp (a non-private run adds no noise and has no budget); drop one of them");
            }
        }
    }
    if let Some(size) = args.physical_batch_size {
        if size == 0 || size > MAX_BATCH {
            bail!("--physical-batch-size ({size}) must be in 1..={MAX_BATCH}");
        }
    }
    if let Some(limit) = args.limit {
        if limit == 0 {
            bail!("--limit must be >= 1");
        }
    }
    if args.batch_size == 0 || args.batch_size > MAX_BATCH {
        bail!(
            "--batch-size ({}) must be in 1..={MAX_BATCH}",
            args.batch_size
        );
    }
    match args.accountant {
        AccountantChoice::All => bail!(
            "--accountant all is not available for train: a run enforces and reports one accountant (rdp, rdp-classic or pld; `dp account --accountant all` compares them)"
        ),
        AccountantChoice::Gdp if args.target_epsilon.is_some() => bail!(
            "--accountant gdp cannot enforce --target-epsilon: its CLT epsilon is asymptotic and may be below the true value; enforce with rdp or pld"
        ),
        _ => Ok(()),
    }
}

/// Fails unless `path` can be written: not a directory, in an existing directory that
/// accepts a new file.
/// The file is written beside `path` and renamed over it (a crash never leaves half a
/// file), so `path` must be a regular file or not exist yet: renaming over `/dev/full`
/// or `/dev/stdout` would replace the device (as root) instead of writing to it.
fn check_writable(path: &Path, flag: &str) -> Result<()> {
    if path.is_dir() {
        bail!("{flag} ({}) is a directory", path.display());
    }
    if path.exists() && !path.is_file() {
        bail!(
            "{flag} ({}) is not a regular file (the weights are written beside it and renamed over it)",
            path.display()
        );
    }
    let probe = path.with_extension(format!("probe.{}", std::process::id()));
    std::fs::File::create(&probe)
        .with_context(|| format!("{flag} ({}) cannot be written", path.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// What the loop produced: the epoch lines and how it ended.
struct Trained {
    lines: String,
    stopped_by_budget: bool,
    /// The signal that stopped the run (its checkpoint written at the step it stopped).
    interrupted_by: Option<i32>,
    resumed_at: u64,
    started: Instant,
    /// What a distributed run's rank 0 exchanged with the other ranks.
    traffic: Option<Traffic>,
}

/// `dp train`'s observer: the progress bar and one line per epoch (printed after the
/// trainer has written the epoch's checkpoint).
struct EpochLines<'a> {
    args: &'a TrainArgs,
    test: &'a Dataset,
    steps_per_epoch: u64,
    trained: Trained,
    progress: indicatif::ProgressBar,
    interrupt: Interrupt,
    /// A rank other than 0 of a distributed run: rank 0 prints.
    quiet: bool,
}

impl<A> Observer<Network, A> for EpochLines<'_> {
    fn step_done(&mut self, _: &PrivacyEngine, _: &A, _: &StepReport) -> dp_optim::Result<Control> {
        self.progress.inc(1);
        self.trained.interrupted_by = self.interrupt.signal();
        Ok(match self.trained.interrupted_by {
            Some(_) => Control::Stop,
            None => Control::Continue,
        })
    }

    fn epoch_done(
        &mut self,
        engine: &PrivacyEngine,
        _: &A,
        epoch: &EpochSummary,
    ) -> dp_optim::Result<Control> {
        if self.quiet {
            return Ok(Control::Continue); // rank 0 evaluates and prints
        }
        let loss = epoch.mean_train_loss_not_covered_by_epsilon();
        let line = epoch_line(
            self.args,
            engine,
            self.test,
            self.steps_per_epoch,
            loss,
            &self.trained,
        )?;
        self.progress.suspend(|| diag(&line));
        self.trained.lines.push_str(&line);
        self.trained.lines.push('\n');
        Ok(Control::Continue)
    }
}

fn train_loop(
    args: &TrainArgs,
    engine: &mut PrivacyEngine,
    (train, test): (&Dataset, &Dataset),
    total_steps: u64,
    checkpoints: Option<&CheckpointDir>,
    group: Option<&mut (dyn Collective + 'static)>,
) -> Result<Trained> {
    let quiet = group.as_ref().is_some_and(|g| g.rank() != 0);
    let steps_per_epoch = engine.config().sampler.steps_per_epoch(train.len()) as u64;
    // Drawn only when stderr is a terminal (indicatif hides itself otherwise).
    let progress = match quiet {
        true => indicatif::ProgressBar::hidden(),
        false => indicatif::ProgressBar::new(total_steps),
    };
    progress.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} steps  {elapsed_precise} < {eta}  {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    progress.set_position(engine.steps());
    let mut observer = EpochLines {
        args,
        test,
        steps_per_epoch,
        trained: Trained {
            lines: String::new(),
            stopped_by_budget: false,
            interrupted_by: None,
            resumed_at: engine.steps(),
            started: Instant::now(),
            traffic: None,
        },
        progress,
        interrupt: Interrupt::install()?,
        quiet,
    };
    let trainer = Trainer {
        total_steps,
        steps_per_epoch,
        checkpoints,
        schedule: None,
    };
    let outcome = match group {
        Some(group) => trainer.fit(
            engine,
            &mut DistributedDpSgd { group },
            train,
            &mut observer,
        )?,
        None => trainer.fit(engine, &mut DpSgd, train, &mut observer)?,
    };
    observer.progress.finish_and_clear();
    let mut trained = observer.trained;
    trained.stopped_by_budget = outcome.stopped_by_budget;
    if let Some(signal) = trained.interrupted_by {
        return Err(Interrupted {
            signal,
            step: engine.steps(),
            checkpoint: checkpoints.map(CheckpointDir::path),
        }
        .into());
    }
    if trained.stopped_by_budget {
        diag("stopped: the next step would exceed the privacy budget");
    }
    Ok(trained)
}

fn epoch_line(
    args: &TrainArgs,
    engine: &PrivacyEngine,
    test: &Dataset,
    steps_per_epoch: u64,
    train_loss: Option<f64>,
    trained: &Trained,
) -> dp_optim::Result<String> {
    let accuracy = engine.accuracy(test)?;
    let epsilon = engine.epsilon()?;
    let epoch = engine.steps() as f64 / steps_per_epoch as f64;
    let seconds = trained.started.elapsed().as_secs_f64();
    if args.json {
        let mut line = json!({"epoch": epoch, "steps": engine.steps(), "test_accuracy": accuracy,
                              "epsilon": epsilon_json(epsilon), "delta": args.delta, "seconds": seconds});
        if args.show_non_private_stats {
            line["train_loss_not_covered_by_epsilon"] = json!(train_loss);
        }
        return Ok(line.to_string());
    }
    let mut line = format!(
        "epoch {epoch:.2}  steps {}  test accuracy {:.2}%  epsilon {}{}  ({seconds:.1} s)",
        engine.steps(),
        100.0 * accuracy,
        epsilon_text(epsilon),
        asymptotic_note(engine),
    );
    if args.show_non_private_stats {
        let loss = train_loss.map_or("n/a".into(), |l| format!("{l:.4}"));
        line.push_str(&format!("  [not covered by epsilon: train loss {loss}]"));
    }
    Ok(line)
}

impl Trained {
    fn render(&self, args: &TrainArgs, engine: &PrivacyEngine, test: &Dataset) -> Result<String> {
        let accountant = engine
            .config()
            .privacy
            .as_ref()
            .map_or("none", |p| p.accountant.name());
        let mut summary = json!({
            "model": format!("{:?}", args.model), "dataset": format!("{:?}", args.dataset),
            "steps": engine.steps(), "resumed_at_step": self.resumed_at,
            "test_accuracy": engine.accuracy(test)?, "epsilon": epsilon_json(engine.epsilon()?),
            "delta": args.delta, "accountant": accountant,
            "epsilon_is_asymptotic": !asymptotic_note(engine).is_empty(),
            "stopped_by_budget": self.stopped_by_budget, "seconds": self.started.elapsed().as_secs_f64(),
        });
        if args.show_non_private_stats {
            summary["nonfinite_gradients_not_covered_by_epsilon"] =
                json!(engine.nonfinite_gradients());
        }
        if let Some(traffic) = self.traffic {
            let steps = engine.steps().saturating_sub(self.resumed_at).max(1) as f64;
            summary["collective_per_step"] = json!({
                "operations": traffic.operations as f64 / steps,
                "bytes": traffic.bytes as f64 / steps,
                "seconds": traffic.seconds / steps,
            });
        }
        if args.json {
            Ok(format!("{}{summary}\n", self.lines))
        } else {
            Ok(format!(
                "{}{}\n",
                self.lines,
                serde_json::to_string_pretty(&summary)?
            ))
        }
    }
}

/// The caveat of an accountant whose ε is an asymptotic approximation (GDP's CLT).
fn asymptotic_note(engine: &PrivacyEngine) -> &'static str {
    match engine.accountant().map(|a| a.guarantee()) {
        Some(dp_accounting::Guarantee::Asymptotic) => {
            " (asymptotic: the GDP CLT approximation, may be below the true epsilon)"
        }
        _ => "",
    }
}
