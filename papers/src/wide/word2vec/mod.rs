//! Word2vec with negative sampling on one shared embedding, as the Wide-network paper
//! trains it (`docs/reproduction/wide.md`, "Experiment"), with sparse per-example gradients, and the
//! Secret Sharer canaries that measure what it memorises.
//!
//! Readings where the paper is silent (all documented in `docs/reproduction/wide.md`):
//! a sample is one (target, context) pair with the context within ±window/2 of the
//! target in the stop-word-free, vocabulary-filtered token stream (so 1 + 1 + 8 rows per
//! sample, the paper's "10 rows"), negatives are drawn once per sample from the training
//! split's unigram^0.75 distribution, and `Pr(w | context)` for canaries is the softmax
//! over the vocabulary of `e_w · mean(e_context)`.

mod canaries;
mod corpus;
mod embedding;
mod stop_words;
mod training;

pub use canaries::{insert_canaries, random_canaries, Canary, CanaryExposure, CanaryRanker};
pub use corpus::{build_word2vec_data, CorpusConfig, NoiseDistribution, PairSet, Word2VecData};
pub use embedding::{SharedEmbedding, SparseGradient};
pub use stop_words::STOP_WORDS;
