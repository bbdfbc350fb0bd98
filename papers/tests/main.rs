//! Integration tests of the papers' own models: the NCF recommender, word2vec on Brown
//! with its canaries, and sparse DP-SGD on it through the engine.

mod ncf;
mod sparse_dp_sgd;
mod word2vec;
