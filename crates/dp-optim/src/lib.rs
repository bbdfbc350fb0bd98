//! Differentially private training on Candle: samplers paired with their accounting
//! events, clipping (flat, AUTO-S), Gaussian noise from `dp-mechanisms`, SGD with momentum
//! and Adam, and a fail-closed [`PrivacyEngine`] that keeps the ledger, enforces a budget
//! and checkpoints atomically.
//!
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod algorithm;
pub mod annealing;
pub mod audit;
mod band_mf;
mod checkpoint;
pub mod collective;
mod config;
pub mod dpd;
mod engine;
mod error;
mod evaluate;
#[cfg(feature = "fault-injection")]
pub mod fault;
mod fingerprint;
pub mod gdp;
mod integrity;
mod make_private;
mod optimizer;
mod sampler;
mod selection;
mod sparse_dp_sgd;
mod trainer;

pub use algorithm::{Algorithm, DistributedDpSgd, DpSgd};
pub use band_mf::BandMf;
pub use checkpoint::{Checkpoint, CheckpointDir, CHECKPOINT_FORMAT};
pub use config::{Clipping, GradientNormalisation, NoiseCorrelation, PrivacyConfig, TrainConfig};
pub use engine::{
    Batch, ClippedSum, ExtraBatch, NoisyGradient, PrivacyEngine, Selection, Snapshot, StepCharge,
    StepReport,
};
pub use error::{Error, Result};
pub use evaluate::{accuracy, expected_class_rmse};
pub use fingerprint::{RunField, RunFingerprint};
pub use make_private::{
    make_private, noise_multiplier_for, Noise, PrivateSettings, PrivateTraining,
};
pub use optimizer::Optimizer;
pub use sampler::{Sampler, ShuffleState};
pub use selection::{CoordinateSelection, CoordinateSelector};
pub use sparse_dp_sgd::SparseDpSgd;
pub use trainer::{Control, EpochSummary, FitOutcome, LearningRateSchedule, Observer, Trainer};
