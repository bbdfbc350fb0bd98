//! DP-SGD, DP-Adam and the papers' variants — **not implemented yet**.
//!
//! Issues [3]–[7] fill this crate (samplers whose accounting events are checked against
//! the ledger, the privacy engine, NoisySGD/NoisyAdam, DPD, SA-DPSGD, AUTO-S, sparse
//! DP-SGD). Until then it exports nothing.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
