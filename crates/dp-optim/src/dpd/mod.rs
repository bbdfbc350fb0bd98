//! Differentially private dropout (Ermis & Cemgil 2017, arXiv 1712.01665;
//! `docs/reproduction/dpd.md`, "The paper as this reproduction reads it"): SGLD whose injected noise is read as Gaussian dropout.
//!
//! Each iteration clips per-example gradients to C, adds `N(0, (2C)²σ² I)` to their sum
//! (replace-one neighbours: the sum has sensitivity 2C) and takes an SGLD-form step with a
//! Robbins–Monro step size. σ comes from a per-iteration budget `(ε_iter, δ_iter)` by the
//! Gaussian mechanism, and `ε_iter` is the largest value whose composition over T
//! iterations meets `ε_tot`: by advanced composition (DPD-AC) or through zCDP (DPD-zCDP).
//! The noise, read as Gaussian dropout `N(0, α θ²)`, implies the per-weight rate
//! `α = 4C²σ²/θ²`, reported by [`implied_dropout_rates`].
//!
//! The paper's Algorithm box, its amplification theorem and its zCDP formula are not in
//! the available text; every reading taken here is a switch, documented in
//! `docs/reproduction/dpd.md`.

mod budget;
mod dropout;
mod readings;
mod training;

pub use budget::{DpdBudget, DpdCalibration, DpdComposition, GaussianCalibration};
pub use dropout::{implied_dropout_rates, DropoutRates, GaussianDropout, PredictiveAverage};
pub use readings::{dpd_ac_epsilon, dpd_zcdp_epsilon, ZcdpReading};
pub use training::{DpdTraining, NoisePlacement, StepSizeSchedule};
