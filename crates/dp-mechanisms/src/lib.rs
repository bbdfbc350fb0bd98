//! Differentially private mechanisms, each a validated value that states its privacy as a
//! [`dp_accounting::DpEvent`].
//!
//! * [`GaussianMechanism`] — from (Δ, σ), (ε, δ) by the classic or the analytic bound, μ-GDP
//!   or ρ-zCDP; fast vector release for DP-SGD-sized buffers.
//! * [`LaplaceMechanism`].
//! * [`ExponentialMechanism`] — the Gumbel-max trick over a score vector.
//! * [`ReportNoisyMax`] — Laplace, exponential (permute-and-flip) or Gumbel noise.
//! * [`SparseVector`] — AboveThreshold, Sparse and NumericSparse (Dwork & Roth Alg. 1–3).
//! * [`TopK`] — exponential-mechanism peeling or one-shot Gumbel, basic or advanced budget
//!   split.
//! * [`hardened`] — exact discrete Laplace/Gaussian samplers and float releases on a 2^k
//!   grid, immune to the floating-point attack of Mironov 2012.
//! * [`NoiseSource`] — ChaCha20, OS-seeded by default; `seeded(u64)` for reproducible
//!   (never production) runs; save/restore for checkpoints.
//!
//! # Example
//!
//! Select the 3 largest coordinates of a vector privately, release them with Gaussian
//! noise, and account for both in one ledger:
//!
//! ```
//! use dp_accounting::{Accountant, RdpConfig};
//! use dp_mechanisms::{BudgetSplit, GaussianMechanism, Mechanism, NoiseSource, TopK, TopKMethod};
//!
//! let mut noise = NoiseSource::os_seeded()?;
//! let gradient = [0.1, -2.0, 0.05, 3.0, 1.5, -0.2];
//! let magnitudes: Vec<f64> = gradient.iter().map(|g: &f64| g.abs()).collect();
//! // Each |coordinate| moves by at most 1 between neighbouring datasets.
//! let top_k = TopK::new(1.0, 1.0, 3, false, TopKMethod::OneShotGumbel, BudgetSplit::Basic)?;
//! let chosen = top_k.select(&magnitudes, &mut noise)?;
//! let gaussian = GaussianMechanism::new(1.0, 2.0)?;
//! let mut values: Vec<f64> = chosen.iter().map(|&i| gradient[i]).collect();
//! gaussian.release_in_place_f64(&mut values, &mut noise);
//!
//! let mut accountant = RdpConfig::default().build()?;
//! accountant.compose(&top_k.event(), 1)?;
//! accountant.compose(&gaussian.event(), 1)?;
//! let epsilon = accountant.epsilon(1e-5)?;
//! println!("released {chosen:?} as {values:?}: epsilon = {epsilon:.3} at delta = 1e-5");
//! assert!(epsilon < 1.0 + 3.0);
//! # Ok::<(), dp_mechanisms::Error>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod band_mf;
mod error;
mod exponential;
mod gaussian;
pub mod hardened;
mod laplace;
mod mechanism;
mod noise;
mod report_noisy_max;
mod sparse_vector;
mod successive_sampling;
mod top_k;

pub use error::{Error, Result};
pub use exponential::ExponentialMechanism;
pub use gaussian::GaussianMechanism;
pub use laplace::LaplaceMechanism;
pub use mechanism::Mechanism;
pub use noise::{NoiseSource, NoiseState, PARALLEL_CHUNK};
pub use report_noisy_max::{NoisyMaxNoise, ReportNoisyMax};
pub use sparse_vector::{SparseAnswer, SparseOutcome, SparseVariant, SparseVector};
pub use top_k::{BudgetSplit, TopK, TopKMethod};
