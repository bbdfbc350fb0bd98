//! The staged executor ([`nn::Executor::Staged`](crate::nn::Executor::Staged)): a
//! sequential stack of DP layers and parameter-free stages, run layer by layer with each
//! layer's own CPU backward (no Candle graph), behind a [`nn::Sequential`](crate::nn::Sequential)
//! that the fused executor does not cover.
//!
//! In DP mode each parametric layer uses its weights as constants (detached) and records
//! its input on the tape; the direct backward walks the stages in reverse from
//! `dL/dlogits` and gives every layer's `dL/dz` per example, from which the layer
//! computes per-sample squared norms, the clipped sum `Σᵢ cᵢ∇ᵢ` (book-keeping: one
//! matmul, no per-sample tensors) and, for tests, materialised per-sample gradients.
//! Candle's backward through zero probes on the outputs is the reference the direct one
//! is tested against. Candle's summed weight gradients are never used, so nothing
//! unclipped can reach an optimizer.
//!
//! * `Tape`, `TapeEntry` — the taps of one forward.
//! * `DpLayer` — the per-sample-gradient protocol of a stage, implemented by
//!   [`nn::Linear`](crate::nn::Linear) and [`nn::Conv2d`](crate::nn::Conv2d), one file each.
//! * `Stage`, `StagedModel` — the stack; `StagedModel::private_gradients` gets
//!   each layer's output gradient, then clips and sums.

mod backward;
mod conv2d;
mod gradients;
mod layer;
mod linear;
mod model;
mod stage;
mod tape;

pub(crate) use layer::DpLayer;
pub(crate) use model::StagedModel;
pub(crate) use stage::Stage;

#[cfg(test)]
mod tests;
