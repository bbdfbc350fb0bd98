//! Differentially private mechanisms — **not implemented yet**.
//!
//! Issue [2] fills this crate: Gaussian, Laplace, exponential mechanism, report-noisy-max,
//! sparse vector and top-k selection, with an OS-seeded ChaCha20 noise source, each
//! mechanism stating its privacy as a [`dp_accounting::DpEvent`]. Until then it exports
//! nothing, so that no caller can mistake it for a working mechanism library.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
