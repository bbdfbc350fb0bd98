//! The private language-model table (beyond the four papers): a GPT-style causal
//! transformer on the Brown corpus, trained non-privately and with DP-Adam (ghost
//! clipping through [`dp_models::nn`]'s DP layers) at several ε, with Secret Sharer
//! canaries and a one-run audit in every run.
//!
//! * [`split`] — the corpus split by document (train / validation / test, every genre in
//!   each), so no document's text is on both sides of the train/test gap;
//! * [`tokenizer`] — a byte-level BPE (Hugging Face `tokenizers`) trained on the training
//!   documents only;
//! * [`sequences`] — each document's tokens cut into training sequences, the privacy unit;
//! * [`rows`] — sequences as the engine's training data; [`model`] — the transformer LM;
//! * [`canaries`] — Secret Sharer exposure; [`audit`] — the one-run audit;
//! * [`corpus`] — all of it built once per table; [`pretrain`] — non-private pretraining
//!   on a public part of the corpus (whole genres); [`sweep`] — the learning rates chosen on
//!   a public proxy; `train` — one run; `report` — the table.

pub mod audit;
pub mod canaries;
pub mod corpus;
mod kind;
pub mod model;
pub mod pretrain;
mod report;
pub mod rows;
mod runs;
pub mod sequences;
pub mod split;
pub mod sweep;
pub mod tokenizer;
pub mod train;

use serde::{Deserialize, Serialize};

pub use report::lm_report;

/// The language model's kinds of table (`"kind": "lm"`).
pub const TABLE_KINDS: &[(&str, crate::registry::ParseKind)] =
    &[("lm", crate::registry::parse::<LmTable>)];

use audit::AuditConfig;
use model::LmShape;

/// Data sizes of one profile.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LmSizes {
    /// BPE vocabulary.
    pub vocab: usize,
    /// Context (sequences are `context + 1` tokens).
    pub context: usize,
    /// At most this many training windows (the full corpus has about 10,800 of 129).
    pub max_train_windows: usize,
    /// At most this many validation and test windows each.
    pub max_eval_windows: usize,
    /// Training windows, evenly spaced, whose perplexity is reported (computed on private
    /// data: outside ε).
    pub train_eval: usize,
    /// Random tokens in a canary's secret.
    pub secret_len: usize,
    /// Secret Sharer canaries per insertion count.
    pub canaries_per_count: usize,
    /// Random secrets each canary's loss is ranked among.
    pub candidates: usize,
}

/// One profile: data, model, length, audit.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LmProfile {
    /// Data sizes.
    pub sizes: LmSizes,
    /// The model.
    pub shape: LmShape,
    /// Epochs of `N / batch_size` Poisson steps.
    pub epochs: u32,
    /// Expected batch size.
    pub batch_size: usize,
    /// The one-run audit.
    pub audit: AuditConfig,
    /// Epochs of non-private pretraining on the public part (tables with one; left out
    /// of the settings when 0, so a table without one keeps its cache keys).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pretrain_epochs: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One run of the table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LmRun {
    /// Label.
    pub label: String,
    /// The target ε (σ calibrated by PLD at δ = 1/N^1.1); `None`: non-private.
    pub epsilon: Option<f64>,
    /// From the seeded initialisation or from the weights pretrained on the public part.
    #[serde(default)]
    pub start: Start,
    /// Train LoRA adapters on attention's q and v only (the rest frozen).
    #[serde(default)]
    pub lora: Option<LoraSpec>,
    /// Adam's learning rate, where it is not the table's.
    #[serde(default)]
    pub lr: Option<f64>,
    /// Expected batch size, where it is not the profile's (the sweep's proxy runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<usize>,
    /// A fixed noise multiplier σ instead of one calibrated to `epsilon` (the sweep's
    /// proxy runs on public data: their noise mimics a private run's; their ε is no claim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise_multiplier: Option<f64>,
}

/// Where a run's weights start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Start {
    /// GPT-2's initialisation, seeded.
    #[default]
    Scratch,
    /// The model pretrained non-privately on the public part of the corpus.
    Pretrained,
}

/// A run's LoRA adapters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoraSpec {
    /// Rank r.
    pub rank: usize,
    /// α (updates scaled by α / r).
    pub alpha: f64,
}

/// The public part of the corpus: whole genres, the tokenizer's and pretraining's data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PublicPart {
    /// Brown category letters (`a`–`c` press, `j` learned, …).
    pub genres: String,
    /// Adam's learning rate in pretraining.
    pub lr: f64,
}

/// The table's configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LmTable {
    /// The full profile.
    pub full: LmProfile,
    /// The smoke profile.
    pub smoke: LmProfile,
    /// Examples per forward (memory only; the step is the whole Poisson batch).
    pub physical_batch: usize,
    /// Flat clipping norm C.
    pub clip: f64,
    /// Adam's learning rate (β = 0.9, 0.999, ε = 1e-8), every run.
    pub lr: f64,
    /// Insertion counts of the Secret Sharer canaries (0: controls never inserted).
    pub canary_copies: Vec<usize>,
    /// The runs.
    pub runs: Vec<LmRun>,
    /// A public part of the corpus (whole genres): the tokenizer is trained on it and the
    /// pretrained runs start from a model trained on it; the training, validation and
    /// test rows are then the private genres'. `None`: one corpus, tokenizer on its
    /// training documents.
    #[serde(default)]
    pub public: Option<PublicPart>,
    /// The learning-rate sweep of the pretrained runs on a public proxy (tables with a
    /// public part).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<sweep::LmSweep>,
}

impl LmTable {
    /// The profile's settings.
    pub fn profile(&self, profile: crate::args::Profile) -> &LmProfile {
        match profile {
            crate::args::Profile::Full => &self.full,
            crate::args::Profile::Smoke => &self.smoke,
        }
    }

    /// Every run's label: the sweep's candidates, then the table's runs.
    pub fn labels(&self) -> impl Iterator<Item = &str> {
        let candidates = self.sweep.iter().flat_map(|s| &s.runs);
        candidates.chain(&self.runs).map(|r| r.label.as_str())
    }
}
