//! Command-line flags, as clap parses them (raw; resolved in `commands`).

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Differential-privacy accounting for machine learning.
#[derive(Debug, Parser)]
#[command(name = "dp", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// ε of a DP-SGD run (Poisson or without-replacement sampling, Gaussian noise).
    Account(AccountArgs),
    /// The noise multiplier σ (or, given --sigma, the number of steps) that meets a
    /// target ε.
    Calibrate(CalibrateArgs),
}

/// Which accountant(s) to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AccountantChoice {
    /// RDP, improved conversion (Balle et al. 2020).
    Rdp,
    /// RDP, classic conversion (Mironov 2017), as most published tables.
    RdpClassic,
    /// Privacy loss distributions: tight.
    Pld,
    /// GDP central limit theorem: asymptotic, can under-report.
    Gdp,
    /// All four side by side.
    All,
}

/// Rényi order grids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OrdersChoice {
    /// Opacus DEFAULT_ALPHAS (151 orders).
    Opacus,
    /// dp_accounting DEFAULT_RDP_ORDERS (156 orders).
    DpAccounting,
    /// TF Privacy's legacy grid (72 orders).
    Tf,
    /// Integers 2..=64 (SA-DPSGD, Tramèr–Boneh).
    #[value(name = "int2-64")]
    Int2To64,
}

/// How batches are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SamplingChoice {
    /// Each record joins each batch independently with probability q (add/remove neighbours).
    Poisson,
    /// Fixed-size batches drawn uniformly without replacement (replace-one neighbours).
    WithoutReplacement,
}

/// How `epochs / q` becomes a whole number of steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StepsRounding {
    /// Round down (Opacus).
    Floor,
    /// Round up (TF Privacy's compute_dp_sgd_privacy).
    Ceil,
}

/// How the run's sampling rate and length are given.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Sampling rate q = batch size / dataset size, in (0, 1].
    #[arg(long, allow_negative_numbers = true)]
    pub q: Option<f64>,
    /// Number of training steps.
    #[arg(long)]
    pub steps: Option<u64>,
    /// Dataset size N (with --batch-size, replaces --q: q = B/N).
    #[arg(long)]
    pub dataset_size: Option<u64>,
    /// Batch size B (expected batch size under Poisson sampling).
    #[arg(long)]
    pub batch_size: Option<u64>,
    /// Epochs E (replaces --steps: steps = E/q, rounded per --steps-rounding).
    #[arg(long, allow_negative_numbers = true)]
    pub epochs: Option<f64>,
    /// Rounding of E/q to steps.
    #[arg(long, value_enum, default_value_t = StepsRounding::Floor)]
    pub steps_rounding: StepsRounding,
    /// Batch sampling scheme.
    #[arg(long, value_enum, default_value_t = SamplingChoice::Poisson)]
    pub sampling: SamplingChoice,
    /// Rényi orders for the RDP accountants.
    #[arg(long, value_enum, default_value_t = OrdersChoice::Opacus)]
    pub orders: OrdersChoice,
    /// Accountant(s).
    #[arg(long, value_enum, default_value_t = AccountantChoice::Rdp)]
    pub accountant: AccountantChoice,
    /// Print JSON (one object; an array for --accountant all).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct AccountArgs {
    /// Noise multiplier σ (noise std / clipping norm), > 0.
    #[arg(long, allow_negative_numbers = true)]
    pub sigma: f64,
    /// Target δ, in (0, 1).
    #[arg(long, allow_negative_numbers = true)]
    pub delta: f64,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Target ε, > 0.
    #[arg(long, allow_negative_numbers = true)]
    pub target_epsilon: f64,
    /// Target δ, in (0, 1).
    #[arg(long, allow_negative_numbers = true)]
    pub delta: f64,
    /// Solve for the number of steps at this σ instead of solving for σ.
    #[arg(long, allow_negative_numbers = true)]
    pub sigma: Option<f64>,
    /// Relative tolerance on σ.
    #[arg(long, default_value_t = 1e-6, allow_negative_numbers = true)]
    pub tolerance: f64,
    /// Use Opacus's search (bracket from 10, stop within 0.01 of the target ε), which
    /// reproduces Opacus's σ values exactly.
    #[arg(long)]
    pub opacus_search: bool,
    #[command(flatten)]
    pub run: RunArgs,
}
