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
        looked: Box<Searched>,
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
        /// Which part: `network spec`, `Linear`, `staged executor`, `labels`, …
        part: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A trainable parameter would be released without a clipped per-sample gradient: it
    /// is not covered by a DP layer, is used outside one, or received no per-sample
    /// gradient. Raised before anything is released.
    #[error("parameter {parameter} {reason}")]
    UnprotectedParameter {
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

/// The directories a dataset was looked for in: as paths (what `Display` shows, for the
/// user at the terminal) and as the variables that set them (`$DP_DATA_DIR/mnist`), for
/// text that outlives the machine ([`Error::portable`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Searched {
    /// The paths, comma-separated.
    pub paths: String,
    /// The same, named by their variables.
    pub named: String,
}

impl std::fmt::Display for Searched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.paths)
    }
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

    /// The message without paths of this machine, for text that is committed or shared
    /// (a reproduction report): a [`DataNotPresent`](Error::DataNotPresent) names the
    /// directories by their variables; every other error is its `Display`.
    pub fn portable(&self) -> String {
        match self {
            Error::DataNotPresent {
                dataset,
                file,
                looked,
                download,
            } => format!(
                "data not present: {dataset} file {file} not found; looked in {}; {download}",
                looked.named
            ),
            other => other.to_string(),
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
