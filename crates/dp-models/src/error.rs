//! The crate's one error type.

use std::path::PathBuf;

use thiserror::Error;

/// What can go wrong loading data or running a model.
#[non_exhaustive]
#[derive(Debug, Error)]
pub enum Error {
    /// A dataset file was found nowhere and could not be downloaded.
    #[error("data not present: {dataset} file {file} not found; looked in {looked}; {download}")]
    DataNotPresent {
        /// The dataset.
        dataset: String,
        /// The file.
        file: String,
        /// Every place searched.
        looked: String,
        /// What happened to the download attempt.
        download: String,
    },
    /// A file exists but is truncated, corrupt or has the wrong checksum.
    #[error("{path}: {reason}")]
    CorruptFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// An I/O error on a named file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Data (records, words, splits) is inconsistent with what was asked of it.
    #[error("invalid data ({what}): {reason}")]
    InvalidData {
        /// Which data: `dataset`, `word pairs`, `corpus`, …
        what: &'static str,
        /// What is wrong, naming the first bad record where there is one.
        reason: String,
    },
    /// A network, a layer or its weights do not fit together, or a model was used outside
    /// what it supports.
    #[error("invalid model ({part}): {reason}")]
    InvalidModel {
        /// Which part: `network spec`, `Linear`, `autograd model`, `labels`, …
        part: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A trainable parameter would be released without a clipped per-sample gradient: it
    /// is not covered by a DP layer, is used outside one, or received no per-sample
    /// gradient. Raised before anything is released.
    #[error("parameter {parameter} {reason}")]
    NotPrivate {
        /// The parameter's name in its `VarMap`.
        parameter: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A numeric parameter is outside its domain.
    #[error("{name} ({value}) {reason}")]
    InvalidParameter {
        /// The parameter's name, as the API spells it.
        name: &'static str,
        /// The offending value.
        value: f64,
        /// What the value must satisfy.
        reason: &'static str,
    },
    /// An error from Candle.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// An error from the mechanisms crate (the noise source).
    #[error(transparent)]
    Mechanisms(#[from] dp_mechanisms::Error),
}

impl Error {
    /// [`Error::InvalidModel`] of `part`.
    pub fn invalid_model(part: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidModel {
            part,
            reason: reason.into(),
        }
    }

    /// [`Error::InvalidData`] of `what`.
    pub fn invalid_data(what: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidData {
            what,
            reason: reason.into(),
        }
    }
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
