//! The crate's one error type.

use thiserror::Error;

/// What can go wrong while training privately.
#[non_exhaustive]
#[derive(Debug, Error)]
pub enum Error {
    /// A numeric parameter is outside its domain (NaN, negative, out of range).
    #[error("{name} ({value}) {reason}")]
    InvalidParameter {
        /// The parameter's name, as the API spells it.
        name: &'static str,
        /// The offending value.
        value: f64,
        /// What the value must satisfy.
        reason: &'static str,
    },
    /// A setting that does not fit the run or the data (not a number out of its domain:
    /// a combination, a choice, a size).
    #[error("{name} {value} {reason}")]
    InvalidSetting {
        /// The setting's name, as the API spells it.
        name: &'static str,
        /// Its value, as text.
        value: String,
        /// Why it does not fit, as a predicate (`needs …`, `is …`).
        reason: String,
    },
    /// An operation that needs a ledger (a charge, a private release, a change of σ) was
    /// asked of a non-private run.
    #[error("{operation} needs a private run; this one is non-private (no ledger)")]
    NotPrivate {
        /// The operation refused.
        operation: &'static str,
    },
    /// The data has another number of records than the engine was built for.
    #[error("the engine was built for {expected} records, got {got}")]
    DatasetSize {
        /// The engine's `dataset_size`.
        expected: usize,
        /// The data's record count.
        got: usize,
    },
    /// An algorithm's step took no engine step, so the training loop could not end.
    #[error("the algorithm's step took no engine step: the loop could not end")]
    StepNotTaken,
    /// The step would take ε past the budget: training stops before it.
    #[error("privacy budget reached: one more step would make epsilon {epsilon} > {budget_epsilon} at delta {delta}")]
    BudgetExceeded {
        /// ε after the refused step.
        epsilon: f64,
        /// The budget's ε.
        budget_epsilon: f64,
        /// The budget's δ.
        delta: f64,
    },
    /// A setting that a charge covering several steps (a shuffled epoch, a cycle of a
    /// cyclic sampler's groups) fixed was to change inside them.
    #[error(
        "{field} can only change where a charge begins (a shuffled epoch, a cycle of the \
         groups): step {step} is inside the steps charged at step {epoch_start} with {field} \
         {charged}, not {requested} (next boundary: step {next_boundary})"
    )]
    EpochBoundary {
        /// The setting, as the API spells it.
        field: &'static str,
        /// The step (0-based) that would run with the new value.
        step: u64,
        /// The epoch's first step, where it was charged.
        epoch_start: u64,
        /// The next epoch's first step, where the value may change.
        next_boundary: u64,
        /// The value the epoch was charged at.
        charged: f64,
        /// The value asked for.
        requested: f64,
    },
    /// The step was refused because a parameter lacks a clipped, noised gradient.
    #[error("refusing to step: {0}")]
    UnprotectedParameter(String),
    /// Accounting.
    #[error(transparent)]
    Accounting(#[from] dp_accounting::Error),
    /// Mechanisms / noise.
    #[error(transparent)]
    Mechanisms(#[from] dp_mechanisms::Error),
    /// Models / data.
    #[error(transparent)]
    Models(#[from] dp_models::Error),
    /// Candle.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// A checkpoint disagrees with the run that would resume from it.
    #[error(
        "cannot resume: the checkpoint has {field} = {checkpoint}, this run has {run}; {hint}"
    )]
    ResumeMismatch {
        /// The setting (named as `dp train`'s flag).
        field: &'static str,
        /// Its value in the checkpoint.
        checkpoint: String,
        /// Its value in this run.
        run: String,
        /// What to do.
        hint: String,
    },
    /// Another process holds the checkpoint directory.
    #[error("checkpoint directory {path} is in use by another process (its lock file is held); wait for it or use another directory")]
    CheckpointLocked {
        /// The directory.
        path: String,
    },
    /// Checkpoint I/O.
    #[error("checkpoint {path}: {reason}")]
    Checkpoint {
        /// The file.
        path: String,
        /// What failed.
        reason: String,
    },
    /// A collective operation of data-parallel training failed: a rank left the group, or
    /// the ranks disagree on the shape of what they exchange. Nothing from the operation
    /// may be released.
    #[error("collective {operation} failed on rank {rank}: {reason}")]
    Collective {
        /// The operation: `all-reduce`, `broadcast`, `barrier`.
        operation: &'static str,
        /// The rank that saw the failure.
        rank: usize,
        /// What went wrong.
        reason: String,
    },
}

impl From<dp_accounting::validate::ParameterError> for Error {
    fn from(e: dp_accounting::validate::ParameterError) -> Self {
        Error::InvalidParameter {
            name: e.name,
            value: e.value,
            reason: e.reason,
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
