//! The crate's one error type.

use thiserror::Error;

/// Everything that can go wrong while describing, composing or converting privacy.
///
/// Errors never leave an accountant half-updated: `compose` validates the whole event
/// tree before it mutates anything.
#[non_exhaustive]
#[derive(Debug, Error, Clone, PartialEq)]
pub enum Error {
    /// A numeric parameter is outside its domain (NaN, negative, out of range).
    #[error("{name} ({value}) {reason}")]
    InvalidParameter {
        /// The parameter's name, as used in events and CLI flags.
        name: &'static str,
        /// The offending value.
        value: f64,
        /// What the value must satisfy.
        reason: &'static str,
    },
    /// An accountant was asked to compose an event it cannot account for.
    #[error("the {accountant} accountant does not support {event}: {reason}")]
    Unsupported {
        /// The accountant's name.
        accountant: &'static str,
        /// The offending (sub-)event, as text.
        event: String,
        /// Why it is not supported.
        reason: String,
    },
    /// Calibration found no parameter meeting the target.
    #[error("calibration failed: {0}")]
    Calibration(String),
    /// One more event would exceed the privacy budget.
    #[error(
        "privacy budget exceeded: epsilon would be {epsilon} > budget {budget_epsilon} at delta {delta}"
    )]
    BudgetExceeded {
        /// The ε the ledger would reach.
        epsilon: f64,
        /// The budget's ε.
        budget_epsilon: f64,
        /// The budget's δ.
        delta: f64,
    },
    /// A computation did not converge or produced a non-finite value where one is required.
    #[error("numerical failure: {0}")]
    Numerical(String),
    /// A ledger could not be (de)serialised.
    #[error("ledger serialisation: {0}")]
    Serialization(String),
}

/// `Result` with this crate's [`Error`](enum@Error).
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<crate::validate::ParameterError> for Error {
    fn from(e: crate::validate::ParameterError) -> Self {
        Error::InvalidParameter {
            name: e.name,
            value: e.value,
            reason: e.reason,
        }
    }
}
