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
    /// The noise multiplier σ (or, given --noise-multiplier, the number of steps) that meets a
    /// target ε.
    Calibrate(CalibrateArgs),
    /// Train a model with DP-SGD (or without privacy, --no-dp) and report accuracy and ε.
    Train(TrainArgs),
    /// Audit the engine empirically: one training run with canaries (Steinke, Nasr &
    /// Jagielski 2023) gives a lower bound on ε to set beside the claimed ε.
    Audit(AuditArgs),
}

/// `dp audit`: the one-run audit on synthetic data with Dirac canaries.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Noise multiplier σ of the audited DP-SGD run.
    #[arg(
        long,
        alias = "sigma",
        default_value_t = 2.0,
        allow_negative_numbers = true
    )]
    pub noise_multiplier: f64,
    /// Poisson sampling rate q.
    #[arg(long, default_value_t = 0.1, allow_negative_numbers = true)]
    pub q: f64,
    /// Training steps.
    #[arg(long, default_value_t = 100)]
    pub steps: u64,
    /// Per-sample clipping norm C.
    #[arg(
        long,
        alias = "clip",
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub max_grad_norm: f64,
    /// Learning rate (SGD).
    #[arg(long, default_value_t = 0.1, allow_negative_numbers = true)]
    pub lr: f64,
    /// δ of the claim and of the lower bound.
    #[arg(long, default_value_t = 1e-5, allow_negative_numbers = true)]
    pub delta: f64,
    /// m: canaries, each included with probability 1/2.
    #[arg(long, default_value_t = 1000)]
    pub canaries: usize,
    /// r: guesses (half "included", half "excluded"), at most --canaries.
    #[arg(long, default_value_t = 200)]
    pub guesses: usize,
    /// Probability with which the lower bound holds.
    #[arg(long, default_value_t = 0.95, allow_negative_numbers = true)]
    pub confidence: f64,
    /// Reproducible data, canaries and noise from this seed (the audit of a seeded run
    /// is as valid as any; the seed only fixes which run is audited).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// How `dp train --distributed` splits its steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DistributedChoice {
    /// The processes of an MPI job.
    Mpi,
}

/// Models `dp train` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModelChoice {
    /// The 26,010-parameter CNN of Tramèr & Boneh, tanh.
    MnistCnn,
    /// The same CNN with ReLU.
    MnistCnnRelu,
}

/// Datasets `dp train` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DatasetChoice {
    /// MNIST: 60,000 training and 10,000 test digits, 28 × 28 grey.
    Mnist,
    /// Fashion-MNIST: MNIST's format, 10 clothing classes.
    FashionMnist,
}

/// The optimizer applied to each noisy gradient.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OptimizerChoice {
    /// SGD with momentum.
    Sgd,
    /// Adam (NoisyAdam).
    Adam,
}

/// Per-example clipping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ClippingChoice {
    /// Flat clipping to --max-grad-norm.
    Flat,
    /// Each parametric layer clipped to --max-grad-norm/√L.
    PerLayer,
    /// AUTO-S normalisation with γ = --max-grad-norm (sensitivity 1).
    AutoS,
}

/// Batch samplers for training.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TrainSampling {
    /// Poisson sampling with q = batch size / dataset size.
    Poisson,
    /// Fixed-size batches drawn without replacement.
    FixedSize,
    /// Shuffled epochs of consecutive batches (each epoch charged as one Gaussian).
    Shuffle,
    /// Poisson sampling with batches cut to --max-batch-size records.
    TruncatedPoisson,
}

/// How the noise of successive steps is related.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MechanismChoice {
    /// DP-SGD: independent Gaussian noise at every step.
    DpSgd,
    /// BandMF: noise correlated over --bands steps by a strategy optimised for the run,
    /// the records in --bands groups sampled in turn (amplified BandMF).
    BandMf,
}

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// The model.
    #[arg(long, value_enum, default_value_t = ModelChoice::MnistCnn)]
    pub model: ModelChoice,
    /// The dataset (found through DP_DATA_DIR, a cache, or a download).
    #[arg(long, value_enum, default_value_t = DatasetChoice::Mnist)]
    pub dataset: DatasetChoice,
    /// Passes over the training set (fractional allowed); the steps are epochs × n / batch
    /// size.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub epochs: f64,
    /// (Expected) batch size.
    #[arg(long, default_value_t = 256)]
    pub batch_size: usize,
    /// Noise multiplier σ (omit with --target-epsilon to calibrate it).
    #[arg(long, alias = "sigma", allow_negative_numbers = true)]
    pub noise_multiplier: Option<f64>,
    /// Per-sample clipping norm C.
    #[arg(
        long,
        alias = "clip",
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub max_grad_norm: f64,
    /// Per-example clipping rule.
    #[arg(long, value_enum, default_value_t = ClippingChoice::Flat)]
    pub clipping: ClippingChoice,
    /// Learning rate.
    #[arg(long, default_value_t = 0.1, allow_negative_numbers = true)]
    pub lr: f64,
    /// Momentum (SGD).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub momentum: f64,
    /// The optimizer applied to each noisy gradient.
    #[arg(long, value_enum, default_value_t = OptimizerChoice::Sgd)]
    pub optimizer: OptimizerChoice,
    /// How each batch is drawn; it fixes the neighbouring relation and the event charged
    /// per step.
    #[arg(long, value_enum, default_value_t = TrainSampling::Poisson)]
    pub sampling: TrainSampling,
    /// The most records a batch keeps under --sampling truncated-poisson.
    #[arg(long)]
    pub max_batch_size: Option<usize>,
    /// The noise mechanism.
    #[arg(long, value_enum, default_value_t = MechanismChoice::DpSgd)]
    pub mechanism: MechanismChoice,
    /// Bands of the BandMF strategy (and groups of its sampler), with --mechanism band-mf.
    #[arg(long)]
    pub bands: Option<usize>,
    /// δ of the (ε, δ) guarantee reported and budgeted (take it well below 1 / dataset
    /// size).
    #[arg(long, default_value_t = 1e-5, allow_negative_numbers = true)]
    pub delta: f64,
    /// Budget: stop before ε would exceed it (and calibrate σ if --noise-multiplier is absent).
    #[arg(long, allow_negative_numbers = true)]
    pub target_epsilon: Option<f64>,
    /// Accountant for ε and the budget.
    #[arg(long, value_enum, default_value_t = AccountantChoice::Rdp)]
    pub accountant: AccountantChoice,
    /// Rényi orders for the RDP accountants.
    #[arg(long, value_enum, default_value_t = OrdersChoice::Opacus)]
    pub orders: OrdersChoice,
    /// Reproducible noise from this seed. NOT FOR PRODUCTION: the noise is predictable.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Save a checkpoint here after every epoch, and resume from it if present.
    #[arg(long)]
    pub checkpoint_dir: Option<std::path::PathBuf>,
    /// Process each batch in slices of at most this many samples (bounds memory; the step
    /// and its privacy are unchanged).
    #[arg(long)]
    pub physical_batch_size: Option<usize>,
    /// Write the final weights here as safetensors (PyTorch layout and names).
    #[arg(long)]
    pub save_weights: Option<std::path::PathBuf>,
    /// Split each step over the processes of a job (`mpi`: run under `mpirun -np N`;
    /// needs a `dp` built with `--features mpi`). Rank 0 prints and saves.
    #[arg(long, value_enum)]
    pub distributed: Option<DistributedChoice>,
    /// Train without privacy (no clipping, no noise, no ε).
    #[arg(long)]
    pub no_dp: bool,
    /// Use only the first N training examples (smoke runs).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Print one JSON object per epoch and a final summary object.
    #[arg(long)]
    pub json: bool,
    /// Resume from a checkpoint written with a different value of this setting (repeat
    /// for several). Only settings whose change the ledger still covers are accepted.
    #[arg(long, value_enum)]
    pub allow_change: Vec<ChangeableField>,
    /// Also print the training loss and the count of non-finite per-sample gradients.
    /// Both are computed from the private training data without noise and are NOT
    /// covered by epsilon; they are labelled so.
    #[arg(long)]
    pub show_non_private_stats: bool,
}

/// A setting a resumed `dp train` may change with `--allow-change`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ChangeableField {
    /// The learning rate (post-processing of the noisy gradients).
    Lr,
    /// σ (the ledger records each step's own σ).
    NoiseMultiplier,
    /// The clipping norm (σ is relative to it, so the events do not change).
    MaxGradNorm,
    /// The budget (enforced on the whole ledger, earlier steps included).
    TargetEpsilon,
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
    /// Poisson sampling with batches cut to --max-batch-size records (add/remove
    /// neighbours; the PLD and RDP accountants).
    TruncatedPoisson,
    /// The records in --groups random groups, step t Poisson-sampling group t mod b at b
    /// times the per-step rate (BandMF's sampler); one charge per cycle of b steps.
    CyclicPoisson,
    /// Balls in bins: the records in --groups random groups, step t taking all of group
    /// t mod b; one unamplified Gaussian charge per cycle (the bin is not credited).
    BallsInBins,
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
    /// The most records a batch keeps under --sampling truncated-poisson.
    #[arg(long)]
    pub max_batch_size: Option<u64>,
    /// The groups of --sampling cyclic-poisson or balls-in-bins.
    #[arg(long)]
    pub groups: Option<u64>,
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
    #[arg(long, alias = "sigma", allow_negative_numbers = true)]
    pub noise_multiplier: f64,
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
    /// Solve for the number of steps at this noise multiplier σ instead of solving for σ.
    #[arg(long, alias = "sigma", allow_negative_numbers = true)]
    pub noise_multiplier: Option<f64>,
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
