//! The papers this workspace reproduces, written as clients of its public API, and the
//! harness behind `cargo xtask reproduce`: it runs the papers' tables from checked-in
//! configs, caches each run by the hash of its config, and writes JSON, Markdown and SVG
//! next to a comparison with the published numbers.
//!
//! One directory per paper holds everything that is only about that paper: its table
//! configs and published values (`*.json`), and its code — [`gdp`] (the NCF
//! recommender), [`sa_dpsgd`] (dp-optim's `SaDpsgd` with the table hooks of its
//! accepted-step budget), [`dpd`] (the accounting and stand-in tables), [`wide`] (word2vec
//! on the Brown corpus, canaries, the table driver) and [`lm`] (the private transformer
//! language model) — declared by build.rs from the directories. The shared harness —
//! configs, the kinds of table (`table_kind`, `registry`), the training-run driver
//! (`training`), runs × seeds → table (`training_table`), reports, plots, the summary
//! page — is the rest of `src/`; it reads a table through `table_kind::TableKind`, runs a
//! paper's algorithm through the hooks of `training::TableAlgorithm`, and finds it by name
//! among those the papers register (`paper_algorithm`, gathered by build.rs).
//! docs/reproduction/README.md says why this is a crate and what a new paper touches.

mod accounting;
mod args;
mod atomic_file;
mod by_name;
mod claim_box;
mod config;
#[cfg(test)]
mod config_checks;
#[cfg(test)]
mod fixture_paper_test;
mod index;
mod jobs;
mod lock_file;
#[cfg(test)]
mod page_numbers;
mod paper_algorithm;
mod paper_model;
mod plot;
mod progress;
mod provenance;
mod registry;
mod report;
mod run;
mod run_cache;
mod shows;
mod summary;
mod table;
mod table_kind;
mod training;
mod training_table;

// The papers with code: `pub mod <paper>;` for every `src/<paper>/` with a
// `published.json` and a `mod.rs`, written by build.rs.
include!(concat!(env!("OUT_DIR"), "/papers.rs"));

pub use args::{Profile, ReproduceArgs};
pub use run::run;
