//! Integration tests of the papers' own models: the NCF recommender, word2vec on Brown
//! with its canaries, sparse DP-SGD on it through the engine, and the language-model
//! table's data and its runs.

mod lm_data;
mod lm_table;
mod ncf;
mod real_data;
mod sparse_dp_sgd;
mod word2vec;
