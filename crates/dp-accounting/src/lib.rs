//! Privacy accounting for differentially private machine learning.
//!
//! * [`DpEvent`] describes what a mechanism did, as serialisable data.
//! * [`Accountant`] is the one trait every accountant implements: a dry-run
//!   [`supports`](Accountant::supports), [`compose`](Accountant::compose),
//!   [`epsilon`](Accountant::epsilon) and [`delta`](Accountant::delta).
//! * [`RdpAccountant`] — Rényi DP with the Opacus, dp_accounting, TF and integer order
//!   grids, exact or conservative fractional orders, classic or improved conversion.
//! * [`PldAccountant`] — privacy loss distributions with pessimistic connect-the-dots
//!   discretisation and FFT composition: the tight reference.
//! * [`GdpAccountant`] — the Gaussian-DP central limit theorem of Bu, Dong, Long & Su; an
//!   asymptotic approximation, labelled so in every report.
//! * [`ZcdpAccountant`] and [`ApproxDpAccountant`] — zCDP and the basic/advanced
//!   composition theorems, with amplification by subsampling.
//! * [`calibrate_noise`], [`calibrate_steps`] and [`calibrate_share`] — the noise
//!   multiplier, step count or share of the budget for a target (ε, δ), never
//!   overshooting.
//! * [`SamplingScheme`] — how batches are drawn (Poisson, fixed size, shuffled), the
//!   neighbouring relation that fixes, and the event of a mechanism run on each batch.
//! * [`Ledger`] and [`BudgetFilter`] — the record of a run and a guard that refuses the
//!   event that would exceed a budget.
//! * [`one_run_epsilon_lower_bound`] — the ε lower bound of a one-run privacy audit
//!   (Steinke, Nasr & Jagielski 2023), from an [`AuditOutcome`].
//!
//! # Example
//!
//! ε of DP-SGD on MNIST (q = 256/60000, σ = 1.1, 60 epochs) under two accountants:
//!
//! ```
//! use dp_accounting::{Accountant, DpEvent, PldAccountant, PldConfig, RdpConfig};
//!
//! let event = DpEvent::dp_sgd(256.0 / 60000.0, 1.1, 14062);
//! let mut rdp = RdpConfig::default().build()?;
//! rdp.compose(&event, 1)?;
//! let mut pld = PldConfig::default().build()?;
//! pld.compose(&event, 1)?;
//! let (eps_rdp, eps_pld) = (rdp.epsilon(1e-5)?, pld.epsilon(1e-5)?);
//! assert!(eps_pld < eps_rdp && eps_rdp < 2.6);
//! # Ok::<(), dp_accounting::Error>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod accountant;
mod audit;
mod boxed;
mod budget;
mod calibrate;
mod composition;
mod error;
mod event;
mod fdp_audit;
pub mod gdp;
mod kind;
mod ledger;
mod logspace;
pub mod pld;
pub mod rdp;
mod replay;
mod sampling;
mod terms;
mod truncated;
pub mod validate;
mod zcdp;

pub use accountant::{Accountant, Guarantee, PrivacyReport};
pub use audit::{one_run_epsilon_lower_bound, one_run_p_value, AuditOutcome};
pub use boxed::DynAccountant;
pub use budget::{Budget, BudgetFilter, Reservation};
pub use calibrate::{
    calibrate_noise, calibrate_share, calibrate_steps, Calibrated, CalibrationOptions,
};
pub use composition::{
    advanced_composition, amplify, basic_composition, sampled_advanced_composition, Amplification,
    ApproxDpAccountant, ApproxDpConfig, CompositionTheorem,
};
pub use error::{Error, Result};
pub use event::{DpEvent, NeighbouringRelation};
pub use fdp_audit::{
    fdp_one_run_epsilon_lower_bound, fdp_one_run_gaussian_epsilon, fdp_one_run_mu_lower_bound,
    fdp_one_run_refuses, Tradeoff,
};
pub use gdp::{GdpAccountant, GdpConfig};
pub use kind::AccountantKind;
pub use ledger::{Ledger, LedgerEntry};
pub use pld::{PldAccountant, PldConfig};
pub use rdp::{Conversion, FractionalSeries, OrderGrid, RdpAccountant, RdpConfig};
pub use sampling::SamplingScheme;
pub use truncated::{truncation_probability, TruncatedPoissonBound};
pub use zcdp::{zcdp_to_epsilon, ZcdpAccountant, ZcdpConfig, ZcdpConversion};
