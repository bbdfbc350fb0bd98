//! The private language-model table (beyond the four papers): a GPT-style causal
//! transformer on the Brown corpus. This module holds its data pipeline so far:
//!
//! * [`split`] — the corpus split by document (train / validation / test, every genre in
//!   each), so no document's text is on both sides of the train/test gap;
//! * [`tokenizer`] — a byte-level BPE (Hugging Face `tokenizers`) trained on the training
//!   documents only;
//! * [`sequences`] — each document's tokens cut into training sequences, the privacy unit.

pub mod sequences;
pub mod split;
pub mod tokenizer;
