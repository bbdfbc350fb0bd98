//! Integration tests of dp-accounting: public vectors, independent oracles, the
//! accountant contract and properties.

mod contract;
mod cross_accountant;
mod properties;
mod support;
mod vectors;
