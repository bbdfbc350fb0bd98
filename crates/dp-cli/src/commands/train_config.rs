//! The run a `dp train` command line describes: its sampler, noise correlation, update
//! rule and privacy settings (σ calibrated when only a target ε is given).

use anyhow::{bail, Result};
use dp_accounting::{AccountantKind, OrderGrid};
use dp_optim::{BandMf, Clipping, NoiseCorrelation, Optimizer, PrivacyConfig, Sampler};

use crate::args::{
    AccountantChoice, ClippingChoice, MechanismChoice, OptimizerChoice, OrdersChoice, TrainArgs,
    TrainSampling,
};
use crate::output::{diag, short};

/// The largest logical (and physical) batch `dp train` accepts: MNIST's training set.
pub const MAX_BATCH: usize = 60_000;

pub fn sampler(args: &TrainArgs, n: usize) -> Result<Sampler> {
    let b = args.batch_size;
    Ok(match (args.mechanism, args.sampling, args.max_batch_size) {
        (MechanismChoice::BandMf, TrainSampling::Poisson, None) => {
            let Some(bands) = args.bands.filter(|&b| b >= 1) else {
                bail!("--mechanism band-mf needs --bands (at least 1)");
            };
            BandMf::sampler(b, bands, n).map_err(|_| {
                anyhow::anyhow!(
                    "--bands ({bands}) times --batch-size ({b}) must be at most the {n} training records (each of the --bands groups is sampled at rate bands·B/n)"
                )
            })?
        }
        (MechanismChoice::BandMf, ..) => bail!(
            "--mechanism band-mf draws its own batches (cyclic Poisson over --bands groups); drop --sampling and --max-batch-size"
        ),
        (_, TrainSampling::TruncatedPoisson, Some(cap)) if (1..=MAX_BATCH).contains(&cap) => {
            Sampler::TruncatedPoisson {
                sampling_rate: b as f64 / n as f64,
                max_batch_size: cap,
            }
        }
        (_, TrainSampling::TruncatedPoisson, Some(cap)) => {
            bail!("--max-batch-size ({cap}) must be in 1..={MAX_BATCH}")
        }
        (_, TrainSampling::TruncatedPoisson, None) => {
            bail!("--sampling truncated-poisson needs --max-batch-size")
        }
        (_, _, Some(_)) => bail!("--max-batch-size needs --sampling truncated-poisson"),
        (_, TrainSampling::Poisson, None) => Sampler::Poisson {
            sampling_rate: b as f64 / n as f64,
        },
        (_, TrainSampling::FixedSize, None) => Sampler::FixedSize { batch_size: b },
        (_, TrainSampling::Shuffle, None) => Sampler::Shuffle { batch_size: b },
    })
}

/// The noise correlation `--mechanism` asks for: BandMF's strategy optimised for the
/// run's `steps`.
fn correlation(args: &TrainArgs, steps: u64) -> Result<NoiseCorrelation> {
    Ok(match (args.mechanism, args.bands) {
        (MechanismChoice::DpSgd, None) => NoiseCorrelation::Independent,
        (MechanismChoice::DpSgd, Some(_)) => bail!("--bands needs --mechanism band-mf"),
        (MechanismChoice::BandMf, Some(bands)) if bands >= 1 && bands as u64 <= steps => {
            NoiseCorrelation::Banded(BandMf::strategy(steps, bands)?)
        }
        (MechanismChoice::BandMf, Some(bands)) => {
            bail!("--bands ({bands}) must be in 1..={steps} (the run's steps)")
        }
        (MechanismChoice::BandMf, None) => bail!("--mechanism band-mf needs --bands"),
    })
}

pub fn optimizer(args: &TrainArgs) -> Optimizer {
    match args.optimizer {
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
    }
}

/// The privacy settings (`None` with `--no-dp`), σ calibrated when only a target is given.
pub fn privacy(
    args: &TrainArgs,
    sampler: Sampler,
    n: usize,
    total_steps: u64,
) -> Result<Option<PrivacyConfig>> {
    if args.no_dp {
        return Ok(None);
    }
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
    let sigma = match (args.noise_multiplier, args.target_epsilon) {
        (Some(s), _) => s,
        (None, Some(target)) => {
            let solved = dp_optim::noise_multiplier_for(
                target,
                args.delta,
                sampler,
                n,
                total_steps,
                accountant,
                &orders,
            )?;
            diag(&format!(
                "calibrated noise_multiplier = {:.4} for epsilon {} over {total_steps} steps",
                solved.value,
                short(target)
            ));
            solved.value
        }
        (None, None) => bail!("give --noise-multiplier, --target-epsilon, or --no-dp"),
    };
    Ok(Some(PrivacyConfig {
        noise_multiplier: sigma,
        max_grad_norm: args.max_grad_norm,
        clipping: match args.clipping {
            ClippingChoice::Flat => Clipping::Flat,
            ClippingChoice::PerLayer => Clipping::PerLayer,
            ClippingChoice::AutoS => Clipping::AutoS,
        },
        delta: args.delta,
        target_epsilon: args.target_epsilon,
        accountant,
        orders,
        correlation: correlation(args, total_steps)?,
    }))
}
