//! Resolves flags into library inputs and runs a command.

mod account;
mod audit;
mod calibrate;
mod distributed;
mod resume;
mod train;
mod train_config;

use anyhow::{bail, Result};
use dp_accounting::{AccountantKind, DpEvent, NeighbouringRelation, OrderGrid, SamplingScheme};

use crate::args::{
    AccountantChoice, Cli, Command, OrdersChoice, RunArgs, SamplingChoice, StepsRounding,
};
use crate::output::{number, short};

/// Runs the parsed command and returns what to print.
pub fn run(cli: Cli) -> Result<String> {
    match cli.command {
        Command::Account(args) => account::run(&args),
        Command::Calibrate(args) => calibrate::run(&args),
        Command::Train(args) => train::run(&args),
        Command::Audit(args) => audit::run(&args),
    }
}

/// A DP-SGD run as the flags describe it.
#[derive(Clone, Debug)]
pub struct Run {
    pub sampling_rate: f64,
    /// `None` when the steps are to be solved for.
    pub steps: Option<u64>,
    pub scheme: SamplingScheme,
    pub orders: OrderGrid,
    pub accountants: Vec<AccountantKind>,
    pub json: bool,
}

impl Run {
    pub fn relation(&self) -> NeighbouringRelation {
        self.scheme.relation()
    }

    /// The event of `steps` steps at noise multiplier σ (noise std / clipping norm); the
    /// sampling scheme decides the event, including σ/2 under replace-one neighbours.
    pub fn event(&self, sigma: f64, steps: u64) -> DpEvent {
        self.scheme.gaussian_run_event(sigma, steps)
    }

    pub fn describe(&self) -> String {
        let q = number(self.sampling_rate);
        match self.scheme {
            SamplingScheme::TruncatedPoisson {
                max_batch_size: cap,
                ..
            } => format!(
                "Poisson sampling q = {q} cut to {cap} records (a record's batch is cut with probability {}), add-or-remove-one neighbours",
                number(self.scheme.truncation_probability().unwrap_or(f64::NAN))
            ),
            SamplingScheme::CyclicPoisson { groups, sampling_rate } if sampling_rate >= 1.0 => format!(
                "balls in bins: the records in {groups} random groups, step t taking all of group t mod {groups}, add-or-remove-one neighbours, each cycle of {groups} steps charged once as the unamplified Gaussian (the random bin is not credited)"
            ),
            SamplingScheme::CyclicPoisson { groups, sampling_rate } => format!(
                "the records in {groups} random groups, step t Poisson-sampling group t mod {groups} at {} (q = {q} per step), add-or-remove-one neighbours, each cycle of {groups} steps charged once",
                number(sampling_rate)
            ),
            SamplingScheme::Poisson { .. } => {
                format!("Poisson sampling q = {q}, add-or-remove-one neighbours")
            }
            SamplingScheme::FixedSize { dataset_size, batch_size } => format!(
                "batches of {batch_size} of {dataset_size} without replacement (q = {q}), replace-one neighbours (sensitivity 2C: the event's noise_multiplier is half the flag's)"
            ),
            SamplingScheme::Shuffle { dataset_size, batch_size } => format!(
                "shuffled epochs of batches of {batch_size} of {dataset_size} (q = {q}), add-or-remove-one neighbours, each epoch charged once as the unamplified Gaussian"
            ),
        }
    }
}

pub fn check_delta(delta: f64) -> Result<f64> {
    if !(delta > 0.0 && delta < 1.0) {
        bail!("--delta ({}) must be in (0, 1)", short(delta));
    }
    Ok(delta)
}

pub fn check_noise_multiplier(sigma: f64) -> Result<f64> {
    check_positive("--noise-multiplier", sigma)
}

/// `value` of `flag` must be finite and > 0.
pub fn check_positive(flag: &str, value: f64) -> Result<f64> {
    if !(value.is_finite() && value > 0.0) {
        bail!("{flag} ({}) must be finite and > 0", short(value));
    }
    Ok(value)
}

/// The sampling scheme `--sampling` names, at the per-step rate `sampling_rate`.
fn scheme_of(
    args: &RunArgs,
    sampling_rate: f64,
    sizes: Option<(u64, u64)>,
    groups: Option<u64>,
) -> Result<SamplingScheme> {
    Ok(match (args.sampling, sizes, args.max_batch_size) {
        (SamplingChoice::Poisson, _, None) => SamplingScheme::Poisson { sampling_rate },
        (SamplingChoice::CyclicPoisson | SamplingChoice::BallsInBins, _, None) => {
            let groups = groups.unwrap_or(1);
            let within = sampling_rate * groups as f64;
            if within > 1.0 + 1e-12 {
                bail!(
                    "--groups ({groups}) times the per-step rate ({}) must be at most 1: each group is sampled at that rate",
                    short(sampling_rate)
                );
            }
            SamplingScheme::CyclicPoisson {
                groups,
                sampling_rate: within.min(1.0),
            }
        }
        (SamplingChoice::WithoutReplacement, Some((dataset_size, batch_size)), None) => {
            SamplingScheme::FixedSize {
                dataset_size,
                batch_size,
            }
        }
        (SamplingChoice::WithoutReplacement, None, None) => {
            bail!("--sampling without-replacement needs --dataset-size and --batch-size")
        }
        (SamplingChoice::TruncatedPoisson, Some((dataset_size, _)), Some(cap)) if cap > 0 => {
            SamplingScheme::TruncatedPoisson {
                dataset_size,
                sampling_rate,
                max_batch_size: cap,
            }
        }
        (SamplingChoice::TruncatedPoisson, Some(_), Some(cap)) => {
            bail!("--max-batch-size ({cap}) must be >= 1")
        }
        (SamplingChoice::TruncatedPoisson, _, _) => bail!(
            "--sampling truncated-poisson needs --dataset-size, --batch-size and --max-batch-size"
        ),
        (_, _, Some(_)) => bail!("--max-batch-size needs --sampling truncated-poisson"),
    })
}

/// `--groups`, which the cyclic schemes need and the others refuse.
fn check_groups(args: &RunArgs) -> Result<Option<u64>> {
    let cyclic = matches!(
        args.sampling,
        SamplingChoice::CyclicPoisson | SamplingChoice::BallsInBins
    );
    match (cyclic, args.groups) {
        (true, Some(g)) if g >= 1 => Ok(Some(g)),
        (true, Some(_)) => bail!("--groups (0) must be >= 1"),
        (true, None) => bail!("--sampling cyclic-poisson and balls-in-bins need --groups"),
        (false, Some(_)) => bail!("--groups needs --sampling cyclic-poisson or balls-in-bins"),
        (false, None) => Ok(None),
    }
}

/// Resolves `--q/--steps` or `--dataset-size/--batch-size/--epochs`.
pub fn resolve_run(args: &RunArgs, steps_required: bool) -> Result<Run> {
    let groups = check_groups(args)?;
    let (sampling_rate, sizes) = match (args.q, args.dataset_size, args.batch_size) {
        (None, None, None) if args.sampling == SamplingChoice::BallsInBins => {
            (1.0 / groups.unwrap_or(1) as f64, None)
        }
        (Some(_), ..) | (_, _, Some(_)) if args.sampling == SamplingChoice::BallsInBins => {
            bail!(
                "--sampling balls-in-bins takes a whole group per step: drop --q and --batch-size"
            )
        }
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            bail!("give either --q or --dataset-size with --batch-size, not both")
        }
        (Some(q), None, None) => (q, None),
        (None, Some(n), Some(b)) => {
            if n == 0 || b == 0 || b > n {
                bail!("--batch-size ({b}) must be in 1..=--dataset-size ({n})");
            }
            (b as f64 / n as f64, Some((n, b)))
        }
        (None, Some(_), None) => bail!("--dataset-size needs --batch-size"),
        (None, None, Some(_)) => bail!("--batch-size needs --dataset-size"),
        (None, None, None) => {
            bail!("missing the sampling rate: give --q or --dataset-size and --batch-size")
        }
    };
    if !(sampling_rate > 0.0 && sampling_rate <= 1.0) {
        bail!("--q ({}) must be in (0, 1]", short(sampling_rate));
    }
    let steps = match (args.steps, args.epochs) {
        (Some(_), Some(_)) => bail!("give either --steps or --epochs, not both"),
        (Some(0), None) => bail!("--steps must be > 0"),
        (Some(steps), None) => Some(steps),
        (None, Some(epochs)) => {
            if !(epochs.is_finite() && epochs > 0.0) {
                bail!("--epochs ({}) must be finite and > 0", short(epochs));
            }
            let exact = epochs / sampling_rate;
            // 90/0.04 is 2249.9999999999995 in floating point: snap to the integer within
            // 1e-9 before rounding, so epochs that divide evenly give the intended count.
            let nearest = exact.round();
            let value = if (exact - nearest).abs() <= 1e-9 * nearest.max(1.0) {
                nearest
            } else {
                match args.steps_rounding {
                    StepsRounding::Floor => exact.floor(),
                    StepsRounding::Ceil => exact.ceil(),
                }
            };
            if !(1.0..=1e15).contains(&value) {
                bail!(
                    "--epochs ({}) gives {} steps; need between 1 and 1e15",
                    short(epochs),
                    short(value)
                );
            }
            Some(value as u64)
        }
        (None, None) if steps_required => bail!("missing the run length: give --steps or --epochs"),
        (None, None) => None,
    };
    let scheme = scheme_of(args, sampling_rate, sizes, groups)?;
    let orders = match args.orders {
        OrdersChoice::Opacus => OrderGrid::Opacus,
        OrdersChoice::DpAccounting => OrderGrid::DpAccounting,
        OrdersChoice::Tf => OrderGrid::TfLegacy,
        OrdersChoice::Int2To64 => OrderGrid::Int2To64,
    };
    let accountants = match args.accountant {
        AccountantChoice::Rdp => vec![AccountantKind::Rdp],
        AccountantChoice::RdpClassic => vec![AccountantKind::RdpClassic],
        AccountantChoice::Pld => vec![AccountantKind::Pld],
        AccountantChoice::Gdp => vec![AccountantKind::Gdp],
        AccountantChoice::All => AccountantKind::DP_SGD.to_vec(),
    };
    Ok(Run {
        sampling_rate,
        steps,
        scheme,
        orders,
        accountants,
        json: args.json,
    })
}
