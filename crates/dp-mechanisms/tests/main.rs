//! Integration tests of dp-mechanisms: sampler statistics, selection distributions,
//! empirical privacy audits, reproducibility and input validation.

mod audit;
mod band_mf;
mod events;
mod reproducibility;
mod selection;
mod statistical;
mod stats;
