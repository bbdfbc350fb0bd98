//! The fused executor: per-sample forward and DP backward over a reused workspace,
//! samples processed in parallel over a fixed number of chunks.
//!
//! * [`workspace`] — the activations kept between forward and backward, and the per-chunk
//!   scratch.
//! * [`forward`](mod@forward) — one sample end to end, layer by layer.
//! * [`per_sample`] — one sample's backward through every layer, and materialised
//!   per-sample gradients for tests; [`layer_backward`] — each layer kind's backward on
//!   slices.
//! * [`backward`](mod@backward) — the DP backward of a batch: per chunk, each sample's
//!   backward, norm and clip factors; conv gradients accumulated with their factor, linear
//!   layers by one book-keeping gemm; chunks reduced in order.

mod backward;
mod forward;
mod layer_backward;
mod per_sample;
mod workspace;

pub use backward::{backward, BackwardOutput};
pub use forward::forward;
pub use per_sample::per_sample_gradients;
pub use workspace::{Workspace, CHUNKS};
