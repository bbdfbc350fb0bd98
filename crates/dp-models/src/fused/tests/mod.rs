//! The fused executor against an independent per-example autograd reference: gradients,
//! norms, clipping, layouts and reproducibility.

mod executor;
mod reference;
