//! Integration tests of dp-models: the fused tier against an independent per-example
//! autograd reference, the DP layers and their executors, layouts, reproducibility, and
//! the data loaders.

mod data;
mod fixtures;
mod fused;
mod nn;
mod papers_data;
mod reference;
