//! Privacy loss distributions: the tight accountant.

mod accountant;
mod mechanism;
mod pmf;
mod replace_gaussian;

pub use accountant::{PldAccountant, PldConfig};
