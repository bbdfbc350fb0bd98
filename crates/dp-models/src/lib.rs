//! Models with per-sample gradients for differentially private training, on Candle, and
//! the datasets they train on.
//!
//! * [`ClipRule`] — how per-example gradients are bounded, and the sensitivity of their
//!   sum.
//! * [`PrivateModel`] — what a DP engine trains (parameters, the clipped gradient of a
//!   batch of its [`TrainingData`]); [`Classifier`] adds logits on a labelled
//!   [`data::Dataset`].
//! * [`models`] — the papers' networks as specs (the 26,010-parameter MNIST CNN, MLPs).
//! * [`data`] — dataset lookup (`DP_DATA_DIR`, cache, checksum-verified download) and the
//!   MNIST / Fashion-MNIST IDX loader.
//! * [`flat`] — tensors as one flat host vector and back.
//! * [`loss`] — per-example cross-entropy and its gradient.
//! * [`nn`] — DP layers for any Candle model (drop-ins for candle-nn's), any per-example
//!   loss, on any device; [`nn::PrivateNet`] makes such a network a [`PrivateModel`].
#![deny(missing_docs)]

mod clip_rule;
mod clipped_gradient;
mod cpu;
pub mod data;
mod error;
pub mod flat;
mod fused;
pub mod loss;
pub mod models;
pub mod nn;
mod private_model;
mod staged;
mod training_data;

pub use clip_rule::ClipRule;
pub use clipped_gradient::{ClippedGradient, GradientSum};
pub use error::{Error, Result, Searched};
pub use private_model::{clipped_gradient_of_batch, Classifier, PrivateModel, SparsePrivateModel};
pub use training_data::TrainingData;
