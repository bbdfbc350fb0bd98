//! Candle models with per-sample gradients, and datasets — **not implemented yet**.
//!
//! Issue [3] fills this crate (the fused DP-SGD executor, per-sample-gradient layers,
//! MNIST/Fashion-MNIST/CIFAR-10/Adult/Brown loaders found through `DP_DATA_DIR`). Until
//! then it exports nothing.
#![deny(missing_docs)]
