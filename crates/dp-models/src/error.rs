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
    /// Data (samples, words, splits) is inconsistent with what was asked of it.
    #[error("invalid data: {0}")]
    InvalidData(String),
    /// A network or model configuration is invalid.
    #[error("invalid model: {0}")]
    InvalidModel(String),
    /// An error from Candle.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// An error from the mechanisms crate (the noise source).
    #[error(transparent)]
    Mechanisms(#[from] dp_mechanisms::Error),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
