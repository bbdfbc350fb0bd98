//! Integration tests of dp-accounting: public vectors, independent oracles, the
//! accountant contract and properties.

// Reference values are quoted with all the digits their source printed.
#![allow(clippy::excessive_precision)]

mod audit;
mod contract;
mod cross_accountant;
mod fdp_audit;
mod properties;
mod sampling;
mod support;
mod truncated;
mod vectors;
