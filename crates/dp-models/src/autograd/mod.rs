//! The autograd tier: layers outside the fused vocabulary (Embedding, Linear over
//! sequences, …) built from Candle ops, with per-sample gradients through probe taps.
//!
//! In DP mode each parametric layer uses its weights as constants (detached) and adds a
//! zero "probe" `Var` to its output; one backward of the summed per-example loss then
//! gives every layer's `dL/dz` per example, from which the layer computes per-sample
//! squared norms, the clipped sum `Σᵢ cᵢ∇ᵢ` (book-keeping: one matmul, no per-sample
//! tensors) and, for tests, materialised per-sample gradients. Candle's summed weight
//! gradients are never used, so nothing unclipped can reach an optimizer. This tier runs
//! on any Candle device, CUDA included (with the `cuda` feature).
//!
//! * [`Tape`], [`TapeEntry`] — the taps of one forward.
//! * [`DpLayer`] — the per-sample-gradient protocol of a stage, implemented by the DP
//!   layers of [`crate::nn`] ([`nn::Linear`](crate::nn::Linear),
//!   [`nn::Embedding`](crate::nn::Embedding), [`nn::Conv2d`](crate::nn::Conv2d)), one
//!   file each: the same layers serve any graph (through Candle's backward) and a
//!   sequential stack here (through the direct CPU backward where every stage has one).
//! * [`Stage`], [`AutogradModel`] — a sequential model of layers and parameter-free stages;
//!   [`AutogradModel::private_gradients`] gets each layer's output gradient by the direct
//!   CPU backward or by Candle's backward through the probes, then clips and sums.

mod backward;
mod conv2d;
mod embedding;
mod fused;
mod gradients;
mod layer;
mod linear;
mod model;
mod stage;
mod tape;

pub use gradients::AutogradGradients;
pub use layer::DpLayer;
pub use model::{AutogradModel, DEFAULT_CPU_CHUNK};
pub use stage::Stage;
pub use tape::{Tape, TapeEntry, DEFAULT_KEPT_ROWS_LIMIT};
