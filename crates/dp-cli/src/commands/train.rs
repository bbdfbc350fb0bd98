//! `dp train`.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use dp_accounting::{calibrate_noise, AccountantKind, CalibrationOptions, OrderGrid};
use dp_mechanisms::NoiseSource;
use dp_models::fused::FusedModel;
use dp_models::models::{mnist_cnn, Activation};
use dp_optim::{
    Clipping, GradientNormalisation, Optimizer, PrivacyConfig, PrivacyEngine, Sampler, TrainConfig,
};
use serde_json::json;

use crate::args::{
    AccountantChoice, ClippingChoice, DatasetChoice, ModelChoice, OptimizerChoice, OrdersChoice,
    TrainArgs, TrainSampling,
};

pub fn run(args: &TrainArgs) -> Result<String> {
    if !(args.epochs.is_finite() && args.epochs > 0.0) {
        bail!("--epochs ({}) must be finite and > 0", args.epochs);
    }
    for (name, v) in [
        ("--clip", args.clip),
        ("--lr", args.lr),
        ("--delta", args.delta),
    ] {
        if !(v.is_finite() && v > 0.0) {
            bail!("{name} ({v}) must be finite and > 0");
        }
    }
    if !(0.0..1.0).contains(&args.momentum) {
        bail!("--momentum ({}) must be in [0, 1)", args.momentum);
    }
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
    let mut noise = match args.seed {
        Some(seed) => {
            eprintln!("warning: --seed makes the noise reproducible and predictable; never use it in production");
            NoiseSource::seeded(seed)
        }
        None => NoiseSource::os_seeded()?,
    };
    let spec = match args.model {
        ModelChoice::MnistCnn => mnist_cnn(Activation::Tanh)?,
        ModelChoice::MnistCnnRelu => mnist_cnn(Activation::Relu)?,
    };
    let sampler = match args.sampling {
        TrainSampling::Poisson => Sampler::Poisson {
            sampling_rate: args.batch_size as f64 / n as f64,
        },
        TrainSampling::FixedSize => Sampler::FixedSize {
            batch_size: args.batch_size,
        },
        TrainSampling::Shuffle => Sampler::Shuffle {
            batch_size: args.batch_size,
        },
    };
    let steps_per_epoch = sampler.steps_per_epoch(n);
    let total_steps = (args.epochs * steps_per_epoch as f64).round().max(1.0) as u64;
    let accountant = match args.accountant {
        AccountantChoice::Rdp | AccountantChoice::All => AccountantKind::Rdp,
        AccountantChoice::RdpClassic => AccountantKind::RdpClassic,
        AccountantChoice::Pld => AccountantKind::Pld,
        AccountantChoice::Gdp => AccountantKind::Gdp,
    };
    let orders = match args.orders {
        OrdersChoice::Opacus => OrderGrid::Opacus,
        OrdersChoice::DpAccounting => OrderGrid::DpAccounting,
        OrdersChoice::Tf => OrderGrid::TfLegacy,
        OrdersChoice::Int2To64 => OrderGrid::Int2To64,
    };
    let privacy = if args.no_dp {
        None
    } else {
        let sigma = match (args.sigma, args.target_epsilon) {
            (Some(s), _) => s,
            (None, Some(target)) => {
                let make = || accountant.build(sampler.relation(), &orders);
                let event = |s: f64| sampler.run_event(n, s, total_steps);
                let solved = calibrate_noise(
                    make,
                    event,
                    target,
                    args.delta,
                    CalibrationOptions {
                        relative_tolerance: 1e-4,
                        ..CalibrationOptions::default()
                    },
                )?;
                eprintln!(
                    "calibrated sigma = {:.4} for epsilon {target} over {total_steps} steps",
                    solved.value
                );
                solved.value
            }
            (None, None) => bail!("give --sigma, --target-epsilon, or --no-dp"),
        };
        Some(PrivacyConfig {
            noise_multiplier: sigma,
            max_grad_norm: args.clip,
            clipping: match args.clipping {
                ClippingChoice::Flat => Clipping::Flat,
                ClippingChoice::PerLayer => Clipping::PerLayer,
                ClippingChoice::AutoS => Clipping::Automatic,
            },
            delta: args.delta,
            target_epsilon: args.target_epsilon,
            accountant,
            orders,
        })
    };
    let optimizer = match args.optimizer {
        OptimizerChoice::Sgd => Optimizer::Sgd {
            lr: args.lr,
            momentum: args.momentum,
        },
        OptimizerChoice::Adam => Optimizer::Adam {
            lr: args.lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        },
    };
    let model = FusedModel::new(spec, &mut noise)?;
    let config = TrainConfig {
        sampler,
        privacy,
        optimizer,
        normalisation: GradientNormalisation::ExpectedBatchSize,
    };
    let mut engine = PrivacyEngine::new(model, config, n, noise)?;
    if let Some(size) = args.physical_batch_size {
        engine.set_physical_batch_size(size)?;
    }
    let checkpoint = args
        .checkpoint_dir
        .as_ref()
        .map(|d| d.join("checkpoint.json"));
    if let Some(path) = &checkpoint {
        std::fs::create_dir_all(path.parent().unwrap_or(path))
            .with_context(|| format!("creating {}", path.display()))?;
        if path.is_file() {
            engine.restore(&dp_optim::Checkpoint::load(path)?)?;
            eprintln!("resumed from {} at step {}", path.display(), engine.steps());
        }
    }
    let start = Instant::now();
    // Drawn only when stderr is a terminal (indicatif hides itself otherwise).
    let progress = indicatif::ProgressBar::new(total_steps);
    progress.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} steps  {elapsed_precise} < {eta}  {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    progress.set_position(engine.steps());
    let mut out = String::new();
    let mut stopped_by_budget = false;
    while engine.steps() < total_steps {
        let epoch_end = ((engine.steps() / steps_per_epoch as u64) + 1) * steps_per_epoch as u64;
        let (mut loss_sum, mut loss_count) = (0.0, 0usize);
        while engine.steps() < epoch_end.min(total_steps) {
            match engine.step(&train) {
                Ok(report) => {
                    progress.inc(1);
                    if report.batch_size > 0 {
                        loss_sum += report.mean_loss;
                        loss_count += 1;
                    }
                }
                Err(dp_optim::Error::BudgetExhausted { .. }) => {
                    stopped_by_budget = true;
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        let accuracy = engine.accuracy(&test)?;
        let epsilon = engine.epsilon()?;
        let epoch = engine.steps() as f64 / steps_per_epoch as f64;
        let loss = loss_sum / loss_count.max(1) as f64;
        let line = if args.json {
            json!({"epoch": epoch, "steps": engine.steps(), "train_loss": loss, "test_accuracy": accuracy,
                   "epsilon": epsilon, "delta": args.delta, "seconds": start.elapsed().as_secs_f64()})
            .to_string()
        } else {
            let eps = epsilon.map_or("n/a (no DP)".to_string(), |e| format!("{e:.4}"));
            format!("epoch {epoch:.2}  steps {}  train loss {loss:.4}  test accuracy {:.2}%  epsilon {eps}  ({:.1} s)", engine.steps(), 100.0 * accuracy, start.elapsed().as_secs_f64())
        };
        progress.suspend(|| eprintln!("{line}"));
        out.push_str(&line);
        out.push('\n');
        if let Some(path) = &checkpoint {
            engine.save_checkpoint(path)?;
        }
        if stopped_by_budget {
            eprintln!("stopped: the next step would exceed the privacy budget");
            break;
        }
    }
    progress.finish_and_clear();
    if let Some(path) = &args.save_weights {
        engine.model().save_safetensors(path)?;
    }
    let summary = json!({
        "model": format!("{:?}", args.model), "dataset": format!("{:?}", args.dataset),
        "steps": engine.steps(), "test_accuracy": engine.accuracy(&test)?, "epsilon": engine.epsilon()?,
        "delta": args.delta, "accountant": if args.no_dp { "none" } else { accountant.name() },
        "nonfinite_gradients": engine.nonfinite_gradients(), "stopped_by_budget": stopped_by_budget,
        "seconds": start.elapsed().as_secs_f64(),
    });
    if args.json {
        out.push_str(&format!("{summary}\n"));
        Ok(out)
    } else {
        Ok(format!(
            "{out}{}\n",
            serde_json::to_string_pretty(&summary)?
        ))
    }
}
