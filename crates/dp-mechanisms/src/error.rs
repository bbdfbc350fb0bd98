//! The crate's one error type.

use thiserror::Error;

/// What can go wrong when building or running a mechanism.
#[non_exhaustive]
#[derive(Debug, Error)]
pub enum Error {
    /// A parameter is outside its domain.
    #[error("{name} ({value}) {reason}")]
    InvalidParameter {
        /// The parameter's name.
        name: &'static str,
        /// The offending value.
        value: f64,
        /// What it must satisfy.
        reason: &'static str,
    },
    /// The input cannot be released (empty, NaN, k > n, out of the grid's range).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The operating system's random source failed.
    #[error("OS random source: {0}")]
    Entropy(String),
    /// An error from the accounting crate (calibration, conversion).
    #[error(transparent)]
    Accounting(#[from] dp_accounting::Error),
}

/// `Result` with this crate's [`Error`](enum@Error).
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<dp_accounting::validate::ParameterError> for Error {
    fn from(e: dp_accounting::validate::ParameterError) -> Self {
        Error::InvalidParameter {
            name: e.name,
            value: e.value,
            reason: e.reason,
        }
    }
}

/// Scores for a selection: non-empty and finite.
pub(crate) fn require_scores(scores: &[f64]) -> Result<()> {
    if scores.is_empty() {
        return Err(Error::InvalidInput("no scores to select from".into()));
    }
    if let Some(i) = scores.iter().position(|s| !s.is_finite()) {
        return Err(Error::InvalidInput(format!(
            "score {i} is {} (scores must be finite)",
            scores[i]
        )));
    }
    Ok(())
}
