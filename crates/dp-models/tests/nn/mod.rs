//! The DP layers of `dp_models::nn`: every layer and five whole models (transformer
//! encoder, causal LM with a tied head, unrolled GRU, residual CNN with GroupNorm, MLP
//! regressor) against a per-example loop; ghost against materialised norms; the
//! differentiable ops against finite differences; the fail-closed checks.

mod check;
mod executors;
mod fail_closed;
mod frozen;
mod ghost;
mod layers;
mod lora;
mod loss;
mod models;
mod ops;
mod state_dict;
