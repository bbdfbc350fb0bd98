//! Named tolerances and small builders shared by the test modules.

use dp_accounting::{Conversion, FractionalSeries, OrderGrid, RdpAccountant, RdpConfig, Result};

/// Published values quoted to ~10 significant digits.
pub const PUBLISHED_DIGITS: f64 = 1e-9;
/// Values quoted to 4–5 significant digits.
pub const FOUR_DIGITS: f64 = 5e-5;

pub fn rdp(orders: OrderGrid, conversion: Conversion) -> Result<RdpAccountant> {
    RdpConfig {
        orders,
        conversion,
        ..RdpConfig::default()
    }
    .build()
}

pub fn rdp_abs(orders: OrderGrid, conversion: Conversion) -> Result<RdpAccountant> {
    RdpConfig {
        orders,
        conversion,
        series: FractionalSeries::Absolute,
        ..RdpConfig::default()
    }
    .build()
}

/// |got − want| ≤ tol·max(1, |want|), with a readable message.
#[track_caller]
pub fn assert_close(got: f64, want: f64, tol: f64, what: &str) {
    let scale = want.abs().max(1.0);
    assert!(
        (got - want).abs() <= tol * scale,
        "{what}: got {got:.12}, want {want:.12} (tol {tol:e})"
    );
}

/// Relative closeness.
#[track_caller]
pub fn assert_rel(got: f64, want: f64, rtol: f64, what: &str) {
    assert!(
        ((got - want) / want).abs() <= rtol,
        "{what}: got {got:.15e}, want {want:.15e} (rtol {rtol:e})"
    );
}
