//! The checked-in experiment configs (`papers/src/<paper>/<table>.json`) and
//! published values (`papers/src/<paper>/published.json`).

use serde::{Deserialize, Serialize};

/// What every table states about itself: its number, id, title and caption.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TableHeading {
    /// The table's number in the issue and the report (tables run in this order).
    pub number: u32,
    /// File stem and `--only` name.
    pub id: String,
    /// Heading.
    pub title: String,
    /// What the table shows, for a reader who has not seen the paper.
    pub caption: String,
}

/// A dataset setting of the accounting table, reported at several epoch counts.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AccountingRow {
    /// Row label, e.g. `MNIST`.
    pub dataset: String,
    /// Training-set size n.
    pub n: u64,
    /// Expected batch size B (p = B/n).
    pub batch_size: u64,
    /// The noise multiplier σ (noise std / clip norm).
    pub sigma: f64,
    /// The δ every ε of the row is stated at.
    pub delta: f64,
    /// Epoch counts (T = epochs·n/B steps, fractional as in the authors' code).
    pub epochs: Vec<f64>,
}

/// Which dataset a training table uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DatasetChoice {
    /// MNIST, 60,000 / 10,000.
    Mnist,
    /// UCI Adult, a9a-style 123 features, the authors' last-fold split.
    Adult,
    /// IMDB reviews, 10,000 words, length 256.
    Imdb,
    /// MovieLens-1M ratings, 80/20 split.
    Movielens,
    /// Fashion-MNIST, 60,000 / 10,000.
    FashionMnist,
    /// CIFAR-10 binary version, 50,000 / 10,000, normalised.
    Cifar10,
}

/// Which model a training table trains: one of dp-models' zoo, or one a paper registers.
/// Written in a config by its kebab-case name (`crate::paper_model` has the names and the
/// registry); an unknown name is refused with the known ones listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelChoice {
    /// The GDP paper's MNIST CNN (ReLU, conv1 padding 3 as the PyTorch twin), 26,010
    /// parameters, fused tier.
    GdpMnistCnn,
    /// 123 → 16 → 2 ReLU MLP, fused tier.
    AdultMlp,
    /// Embedding(10000, 16) → mean → Dense(16, ReLU) → Dense(2), the DP layers on the general path.
    ImdbEmbeddingAverage,
    /// Tramèr & Boneh's MNIST CNN with tanh (26,010 parameters), fused tier.
    MnistCnnTanh,
    /// The same CNN with ReLU.
    MnistCnnRelu,
    /// Tramèr & Boneh's CIFAR-10 CNN with tanh (550,570 parameters), fused tier.
    Cifar10CnnTanh,
    /// The same CNN with ReLU.
    Cifar10CnnRelu,
    /// 784 → 1000 (ReLU) → 10 MLP (Abadi et al. 2016's MNIST network without PCA; the DPD
    /// stand-in), 795,010 parameters, fused tier.
    MnistMlp1000,
    /// A model a paper registers, by its name.
    Paper(&'static str),
}

/// A training run's algorithm: dp-optim's own, which the harness runs itself, or one a
/// paper registers. Written in a config by its kebab-case name (`crate::paper_algorithm`
/// has the names and the registry); an unknown name is refused with the known ones listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// NoisySGD (the GDP paper's Algorithm 1, `dp_optim::gdp`).
    NoisySgd,
    /// NoisyAdam (its Algorithm 2: β₁ 0.9, β₂ 0.999, ξ 1e-8).
    NoisyAdam,
    /// DP-SGD with the table's momentum (Abadi et al. 2016).
    DpSgd,
    /// DPD (differentially private dropout, `dp_optim::dpd`): SGLD-form steps, noise 2Cσ
    /// on the clipped sum, σ calibrated from the run's `dpd` budget.
    Dpd,
    /// Non-private SGD with Gaussian weight dropout `θ ⊙ (1 + √α ξ)` (the run's
    /// `gaussian_dropout` α).
    GaussianDropout,
    /// An algorithm a paper registers, by its name: DP-SGD's engine configuration, its
    /// own hooks (`TableAlgorithm`), cost factor and columns.
    Paper(&'static str),
}

/// How a training table draws its batches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SamplerChoice {
    /// Poisson with rate B/n; ledger under add/remove neighbours.
    #[default]
    Poisson,
    /// Uniform batches of exactly B; ledger under replace-one neighbours (Wang, Balle &
    /// Kasiviswanathan 2019).
    FixedSize,
}

/// A Robbins–Monro learning-rate decay `lr·(1 + t/decay_steps)^(−power)` for every run of
/// the table.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LrDecay {
    /// t₀ in steps.
    pub decay_steps: f64,
    /// γ ∈ (0.5, 1].
    pub power: f64,
}

/// The DPD settings shared by a table's DPD runs (`docs/reproduction/dpd.md`, "The paper as this reproduction reads it").
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DpdTableConfig {
    /// δ′ of advanced composition (and of the zCDP conversion).
    pub delta_prime: f64,
    /// Amplification bound.
    pub amplification: dp_accounting::Amplification,
    /// σ from (ε_iter, δ_iter): classic (the paper's formula, ε_iter < 1) or analytic.
    pub gaussian: dp_optim::dpd::GaussianCalibration,
    /// Gaussian prior precision λ (0: no prior).
    #[serde(default)]
    pub prior_precision: f64,
    /// Noise on the clipped sum (default) or, literally, on the parameter update.
    #[serde(default)]
    pub placement: dp_optim::dpd::NoisePlacement,
}

/// A DPD run's budget.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DpdRunConfig {
    /// ε_tot, the whole run's ε that DPD's per-iteration budget is derived from.
    pub epsilon_total: f64,
    /// AC or zCDP.
    pub composition: dp_optim::dpd::DpdComposition,
}

/// How per-example gradients are bounded.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClippingChoice {
    /// `min(1, R/‖g‖)` with the table's clip R.
    Flat,
    /// AUTO-S `g/(‖g‖ + γ)` (Bu et al. 2022), sensitivity 1.
    AutoS {
        /// γ > 0, the stability constant added to the norm (Bu et al. suggest 0.01).
        gamma: f64,
    },
}

/// The test metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Metric {
    /// Test accuracy (%).
    Accuracy,
    /// RMSE of the expected rating.
    Rmse,
}

impl Metric {
    /// Column heading.
    pub fn heading(self) -> &'static str {
        match self {
            Metric::Accuracy => "test accuracy (%)",
            Metric::Rmse => "test RMSE",
        }
    }
}

/// A table of training runs sharing data, model and optimiser settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrainingTable {
    /// Data.
    pub dataset: DatasetChoice,
    /// Model.
    pub model: ModelChoice,
    /// Update rule.
    pub algorithm: Algorithm,
    /// Learning rate η.
    pub lr: f64,
    /// Expected batch size B (Poisson rate B/n).
    pub batch_size: usize,
    /// Clipping norm R.
    pub clip: f64,
    /// The δ of every run's ε (and of a target ε's calibration).
    pub delta: f64,
    /// Divide the noisy sum by the realised batch size (the authors' code) or by B.
    pub realised_batch_normalisation: bool,
    /// Stop once μ_CLT exceeds this after an epoch (the authors: 2).
    pub stop_max_mu: Option<f64>,
    /// Test metric.
    pub metric: Metric,
    /// The runs.
    pub runs: Vec<RunConfig>,
    /// The smoke profile's reductions.
    pub smoke: SmokeConfig,
    /// SGD momentum for `dp-sgd` and `sa-dpsgd` (0 for the GDP algorithms).
    #[serde(default)]
    pub momentum: f64,
    /// Stop a run before its ε (the ledger's; for SA-DPSGD the paper's accepted-step ε)
    /// would exceed this; `epochs` stays an upper bound.
    #[serde(default)]
    pub target_epsilon: Option<f64>,
    /// Minimum-ε table: for each accuracy, the smallest ε at which each run first reaches it.
    #[serde(default)]
    pub accuracy_targets: Vec<f64>,
    /// RDP orders of the ledger (default: the GDP authors' grid).
    #[serde(default)]
    pub orders: Option<dp_accounting::OrderGrid>,
    /// Curves to plot.
    #[serde(default)]
    pub plots: Vec<PlotConfig>,
    /// Claims of the paper checked on the results.
    #[serde(default)]
    pub claims: Vec<ClaimConfig>,
    /// Batch sampling (default Poisson).
    #[serde(default)]
    pub sampler: SamplerChoice,
    /// Learning-rate decay applied to every run (default: constant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr_decay: Option<LrDecay>,
    /// DPD settings, for tables with DPD runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dpd: Option<DpdTableConfig>,
    /// Also report the posterior-predictive accuracy: softmax averaged over the last K
    /// iterates (SGLD's predictive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predictive_iterates: Option<usize>,
}

/// One training run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunConfig {
    /// Label in tables and plots (also the `published.json` row).
    pub label: String,
    /// σ; `None` trains without privacy (the baseline).
    pub sigma: Option<f64>,
    /// Epochs (at most; the μ stop rule may end the run earlier).
    pub epochs: u32,
    /// Overrides of the table's model, algorithm, clipping, learning rate, batch size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelChoice>,
    /// Algorithm override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<Algorithm>,
    /// Clipping (default flat at the table's clip).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clipping: Option<ClippingChoice>,
    /// Learning-rate override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr: Option<f64>,
    /// Batch-size override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<usize>,
    /// SA-DPSGD's settings (Q₀, μ₀, energy source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annealing: Option<dp_optim::annealing::AnnealingConfig>,
    /// DPD's budget (σ is calibrated from it; `sigma` must be unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dpd: Option<DpdRunConfig>,
    /// Calibrate σ so that the ledger's ε (RDP, classic conversion) of the whole run is
    /// this at the table's δ (`sigma` must be unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibrate_epsilon: Option<f64>,
    /// α of the non-private Gaussian weight-dropout baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gaussian_dropout: Option<f64>,
    /// Curve name in budget plots (default: the label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<String>,
    /// BandMF with this many bands ([`dp_optim::BandMf::configure`]: noise correlated by
    /// a strategy optimised for the run's steps, the records in `bands` groups sampled in
    /// turn at `bands` times the table's rate, one charge per cycle); unset: independent
    /// noise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bands: Option<usize>,
}

impl RunConfig {
    /// Whether the run is private (σ given or calibrated).
    pub fn is_private(&self) -> bool {
        self.sigma.is_some() || self.dpd.is_some() || self.calibrate_epsilon.is_some()
    }

    /// The ε the run was calibrated to, if any.
    pub fn target_epsilon(&self) -> Option<f64> {
        self.dpd.map(|d| d.epsilon_total).or(self.calibrate_epsilon)
    }
}

/// The smoke profile: the same pipeline on a subset, few epochs.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct SmokeConfig {
    /// Training examples kept (the first ones).
    pub train_examples: usize,
    /// Test examples kept.
    pub test_examples: usize,
    /// Epochs of every run.
    pub epochs: u32,
}

/// A plot of per-epoch curves.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlotConfig {
    /// File stem of the SVG.
    pub file: String,
    /// Title.
    pub title: String,
    /// What is on the y axis.
    pub y: PlotY,
    /// Runs drawn (for `epsilon`, the first run's accountants are drawn).
    pub runs: Vec<String>,
}

/// The y axis of a plot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlotY {
    /// The test metric per epoch, one line per run.
    Metric,
    /// ε per epoch under the moments accountant, the CLT and PLD.
    Epsilon,
    /// The test metric against the ledger's ε (all steps), one line per run: privacy–
    /// utility curves.
    MetricVersusEpsilon,
    /// The final test metric against each run's target ε, one line per `series`;
    /// non-private runs as flat dashed lines.
    MetricVersusBudget,
}

/// "`better` ends with a better metric than `worse`".
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClaimConfig {
    /// The claim in words.
    pub statement: String,
    /// The run expected to do better.
    pub better: String,
    /// The run expected to do worse.
    pub worse: String,
}

/// A published (or reference) value.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PublishedValue {
    /// Table id.
    pub table: String,
    /// Row label.
    pub row: String,
    /// Column key.
    pub column: String,
    /// The value.
    pub value: f64,
    /// Where it comes from (figure, page, repository).
    pub source: String,
    /// Allowed absolute difference for "within tolerance".
    pub tolerance: f64,
}

/// A paper's published values.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Published {
    /// Paper id.
    pub paper: String,
    /// Full title.
    pub title: String,
    /// Where the paper comes in a reproduction of all (1 first).
    pub order: u32,
    /// How reports, listings and the summary page name it: title, authors, year, and what
    /// is reproduced.
    pub heading: String,
    /// Citation.
    pub citation: String,
    /// The values.
    pub values: Vec<PublishedValue>,
}

impl Published {
    /// The value for (table, row, column), if published.
    pub fn find(&self, table: &str, row: &str, column: &str) -> Option<&PublishedValue> {
        self.values
            .iter()
            .find(|v| v.table == table && v.row == row && v.column == column)
    }
}
