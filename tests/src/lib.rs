//! Cross-crate tests live in main.rs.
