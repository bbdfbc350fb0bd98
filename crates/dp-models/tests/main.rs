//! Integration tests of dp-models: the DP layers and their executors, layouts,
//! reproducibility, and the data loaders (the fused executor's own tests against an
//! autograd reference are in src/fused/tests/).

mod data;
mod fixtures;
mod nn;
mod papers_data;
