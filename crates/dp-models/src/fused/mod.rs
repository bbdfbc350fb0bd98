//! The fused tier: a sequential-network executor (Conv2d, Linear, tanh, ReLU, max/avg
//! pooling, flatten) whose forward and DP backward are each one Candle custom op.
//!
//! Samples are processed end to end on one thread each, in a fixed number of chunks run
//! in parallel; the backward computes each sample's gradient tile by tile (im2col
//! recomputed, not stored), its norm, its clip factor and its clipped contribution in one
//! pass, so no per-sample gradient tensor for the whole batch ever exists.

mod exec;
mod flops;
mod layout;
mod ops;
mod spec;
#[cfg(test)]
mod tests;

pub use exec::Keep;
pub use flops::Flops;
pub use layout::{from_torch, to_torch, TorchLayer};
pub use ops::FusedModel;
pub use spec::{LayerSpec, NetSpec};
