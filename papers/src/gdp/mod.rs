//! The GDP paper (Bu, Dong, Long & Su, HDSR 2020): its tables are driven by the shared
//! training harness from the configs in this directory; the one model only this paper
//! uses is its NCF recommender, registered as the training tables' model `ncf`.

pub mod ncf;
pub mod table_models;

/// The GDP paper's kinds of table: none beyond the harness's accounting and training.
pub const TABLE_KINDS: &[(&str, crate::registry::ParseKind)] = &[];
