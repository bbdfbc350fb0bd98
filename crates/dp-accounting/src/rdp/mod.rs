//! Rényi differential privacy: curves, order grids, conversions and the accountant.

mod accountant;
mod conversion;
pub mod curves;
mod orders;

pub use accountant::{RdpAccountant, RdpConfig};
pub use conversion::Conversion;
pub use curves::FractionalSeries;
pub use orders::OrderGrid;

/// ε(δ) from an RDP curve under a conversion: `(ε, optimal order)`.
///
/// `orders` and `rdp` must have equal length; orders ≤ 1 are skipped.
pub fn epsilon_from_rdp(
    orders: &[f64],
    rdp: &[f64],
    delta: f64,
    conversion: Conversion,
) -> (f64, f64) {
    orders
        .iter()
        .zip(rdp)
        .filter(|(&a, _)| a > 1.0)
        .map(|(&a, &r)| (conversion::epsilon_at_order(conversion, a, r, delta), a))
        .fold(
            (f64::INFINITY, f64::NAN),
            |acc, x| if x.0 < acc.0 { x } else { acc },
        )
}

/// δ(ε) from an RDP curve under a conversion.
pub fn delta_from_rdp(orders: &[f64], rdp: &[f64], epsilon: f64, conversion: Conversion) -> f64 {
    orders
        .iter()
        .zip(rdp)
        .filter(|(&a, _)| a > 1.0)
        .map(|(&a, &r)| conversion::log_delta_at_order(conversion, a, r, epsilon))
        .fold(f64::INFINITY, f64::min)
        .exp()
        .min(1.0)
}
