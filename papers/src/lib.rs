//! The papers this workspace reproduces, written as clients of its public API, and the
//! harness behind `cargo xtask reproduce`: it runs the papers' tables from checked-in
//! configs, caches each run by the hash of its config, and writes JSON, Markdown and SVG
//! next to a comparison with the published numbers.
//!
//! One directory per paper holds everything that is only about that paper: its table
//! configs and published values (`*.json`), and its code — [`gdp`] (the NCF
//! recommender), `sa_dpsgd` (dp-optim's `SaDpsgd` with the table hooks of its accepted-step
//! budget), `dpd` (the accounting and stand-in tables) and
//! [`wide`] (word2vec on the Brown corpus, canaries, the table driver). The shared
//! harness — configs, the training-run driver (`training`), runs × seeds → table
//! (`training_table`), reports, plots, the summary page — is the rest of `src/`; it runs a
//! paper's algorithm through the hooks of `training::TableAlgorithm`, and `algorithms`
//! lists which paper provides which.
//! docs/reproduction/README.md says why this is a crate and what a new paper touches.

mod accounting;
mod algorithms;
mod args;
mod atomic_file;
mod claim_box;
mod config;
#[cfg(test)]
mod config_checks;
mod dpd;
pub mod gdp;
mod index;
mod jobs;
pub mod lm;
#[cfg(test)]
mod page_numbers;
mod plot;
mod progress;
mod provenance;
mod report;
mod run;
mod run_cache;
mod sa_dpsgd;
mod shows;
mod summary;
mod table;
mod training;
mod training_table;
pub mod wide;

pub use args::{Profile, ReproduceArgs};
pub use run::run;
