//! Grids of Rényi orders α, as the peer libraries define them.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A named grid of Rényi orders. The grid changes ε in the 3rd–4th digit, so every
/// published value is pinned to the grid it was computed with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OrderGrid {
    /// Opacus `RDPAccountant.DEFAULT_ALPHAS`: `1 + x/10` for x in 1..=99, then 12..=63
    /// (151 orders).
    Opacus,
    /// dp_accounting `DEFAULT_RDP_ORDERS`: `1 + x/10` for x in 1..=99, 11..=63, and
    /// 128, 256, 512, 1024 (156 orders).
    DpAccounting,
    /// TF Privacy's legacy `compute_dp_sgd_privacy` grid: 1.25, 1.5, 1.75, 2, 2.25, 2.5,
    /// 3, 3.5, 4, 4.5, 5..=63, 128, 256, 512 (72 orders).
    TfLegacy,
    /// The integers 2..=64, as SA-DPSGD and Tramèr–Boneh use (63 orders).
    Int2To64,
    /// Any orders, each > 1.
    Custom(Vec<f64>),
}

impl OrderGrid {
    /// The orders of this grid, in increasing order.
    pub fn orders(&self) -> Vec<f64> {
        let tenths = (1..=99).map(|x| 1.0 + f64::from(x) / 10.0);
        match self {
            OrderGrid::Opacus => tenths.chain((12..=63).map(f64::from)).collect(),
            OrderGrid::DpAccounting => tenths
                .chain((11..=63).map(f64::from))
                .chain([128.0, 256.0, 512.0, 1024.0])
                .collect(),
            OrderGrid::TfLegacy => [1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 3.0, 3.5, 4.0, 4.5]
                .into_iter()
                .chain((5..=63).map(f64::from))
                .chain([128.0, 256.0, 512.0])
                .collect(),
            OrderGrid::Int2To64 => (2..=64).map(f64::from).collect(),
            OrderGrid::Custom(orders) => orders.clone(),
        }
    }

    /// Checks that a custom grid is non-empty, finite and has every order > 1.
    pub fn validate(&self) -> Result<()> {
        let orders = self.orders();
        if orders.is_empty() {
            return Err(Error::InvalidParameter {
                name: "orders",
                value: 0.0,
                reason: "must contain at least one order",
            });
        }
        for &alpha in &orders {
            if !(alpha.is_finite() && alpha > 1.0) {
                return Err(Error::InvalidParameter {
                    name: "orders",
                    value: alpha,
                    reason: "every order must be finite and > 1",
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_have_their_documented_sizes() {
        assert_eq!(OrderGrid::Opacus.orders().len(), 151);
        assert_eq!(OrderGrid::DpAccounting.orders().len(), 156);
        assert_eq!(OrderGrid::TfLegacy.orders().len(), 72);
        assert_eq!(OrderGrid::Int2To64.orders().len(), 63);
        assert!(OrderGrid::Custom(vec![1.0]).validate().is_err());
        assert!(OrderGrid::Custom(vec![]).validate().is_err());
    }
}
