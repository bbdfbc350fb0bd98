//! RDP → (ε, δ) conversions.

use serde::{Deserialize, Serialize};

/// How an RDP curve becomes an (ε, δ) guarantee.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Conversion {
    /// Mironov 2017 (arXiv 1702.07476) Prop. 3: `ε = min_α RDP(α) + ln(1/δ)/(α−1)` and
    /// `δ = min_α exp((α−1)(RDP(α) − ε))`. What most published tables used (TF Privacy
    /// ≤ 2019, SA-DPSGD's "Lemma 2", the GDP paper's moments accountant).
    Classic,
    /// Balle et al. 2020 (AISTATS, arXiv 1905.09982) Thm 21 = Canonne–Kamath–Steinke 2020
    /// (arXiv 2004.00010) Prop. 12:
    /// `ε = min_α RDP(α) + ln(1 − 1/α) − (ln δ + ln α)/(α−1)`, taken together with the
    /// KL bound `δ ≤ √(1 − e^{−RDP})` and only for α > 1.01 (as dp_accounting does; the
    /// bound is numerically unstable as α → 1). Strictly tighter than [`Classic`](Self::Classic).
    Improved,
}

/// ε at `delta` for one order; `(ε, usable)`.
pub(crate) fn epsilon_at_order(conversion: Conversion, alpha: f64, rdp: f64, delta: f64) -> f64 {
    if rdp.is_nan() {
        return f64::INFINITY;
    }
    match conversion {
        Conversion::Classic => rdp + (1.0 / delta).ln() / (alpha - 1.0),
        Conversion::Improved => {
            if rdp < 0.0 {
                // Only reachable through rounding in extreme events; RDP is ≥ 0.
                0.0
            } else if delta * delta + (-rdp).exp_m1() > 0.0 {
                0.0
            } else if alpha > 1.01 {
                rdp + (-1.0 / alpha).ln_1p() - (delta * alpha).ln() / (alpha - 1.0)
            } else {
                f64::INFINITY
            }
        }
    }
}

/// ln δ at `epsilon` for one order.
pub(crate) fn log_delta_at_order(
    conversion: Conversion,
    alpha: f64,
    rdp: f64,
    epsilon: f64,
) -> f64 {
    if rdp.is_nan() {
        return 0.0;
    }
    match conversion {
        Conversion::Classic => ((alpha - 1.0) * (rdp - epsilon)).min(0.0),
        Conversion::Improved => {
            let kl_bound = if rdp <= 0.0 {
                f64::NEG_INFINITY
            } else {
                0.5 * (-(-rdp).exp()).ln_1p()
            };
            if alpha > 1.01 {
                let rdp_bound =
                    (alpha - 1.0) * (rdp - epsilon + (-1.0 / alpha).ln_1p()) - alpha.ln();
                kl_bound.min(rdp_bound)
            } else {
                kl_bound
            }
        }
    }
}
