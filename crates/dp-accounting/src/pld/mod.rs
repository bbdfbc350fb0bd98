//! Privacy loss distributions: the tight accountant.

mod accountant;
mod mechanism;
mod pmf;

pub use accountant::{PldAccountant, PldConfig};
