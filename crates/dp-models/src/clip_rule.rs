//! How each example's gradient is bounded before the gradients are summed, and the
//! sensitivity of that sum.

/// How per-example gradients are combined: clipped (three rules) or summed as they are.
///
/// The clip factor is computed in `f32`, as the kernels apply it; the bound is kept in
/// `f64` so that the sensitivity a noise mechanism is calibrated to is the configured
/// value itself, not its `f32` rounding.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ClipRule {
    /// Plain sum, no clipping: the non-private baseline (unbounded sensitivity).
    None,
    /// Opacus-style flat clipping: `cᵢ = min(1, C / (‖gᵢ‖ + 1e-6))` (Abadi et al. 2016),
    /// so every clipped gradient has norm ≤ C.
    Flat {
        /// The clipping norm C.
        max_grad_norm: f64,
    },
    /// AUTO-S (Bu et al. 2022): `cᵢ = 1 / (‖gᵢ‖ + γ)`, so every clipped gradient has norm
    /// below 1.
    AutoS {
        /// γ (the paper uses 0.01).
        gamma: f64,
    },
    /// Per-layer clipping with an equal split: each of the L parametric layers' gradient
    /// is clipped to C/√L, so the whole per-sample gradient still has norm ≤ C.
    PerLayer {
        /// The total clipping norm C.
        max_grad_norm: f64,
    },
}

impl ClipRule {
    /// The clip factor for a gradient (or, for `PerLayer`, one layer's gradient among
    /// `layers`) of squared norm `squared_norm`. Fail-closed: a squared norm that is not
    /// finite and ≥ 0 (NaN, ±∞, negative: a computation that went wrong) gets factor 0,
    /// never 1 (`f32::min(NaN, 1.0)` is 1.0, so this is checked first).
    pub fn factor(self, squared_norm: f32, layers: usize) -> f32 {
        if !(squared_norm.is_finite() && squared_norm >= 0.0) {
            return 0.0;
        }
        let norm = squared_norm.sqrt();
        match self {
            ClipRule::None => 1.0,
            ClipRule::Flat { max_grad_norm } => (max_grad_norm as f32 / (norm + 1e-6)).min(1.0),
            ClipRule::AutoS { gamma } => 1.0 / (norm + gamma as f32),
            ClipRule::PerLayer { max_grad_norm } => {
                (max_grad_norm as f32 / (layers.max(1) as f32).sqrt() / (norm + 1e-6)).min(1.0)
            }
        }
    }

    /// The bound on each clipped per-example gradient's L2 norm, hence the L2
    /// sensitivity of the clipped sum under add/remove-one neighbours (twice it under
    /// replace-one): C for flat and per-layer clipping, 1 for AUTO-S; `None` without
    /// clipping.
    pub fn sensitivity(self) -> Option<f64> {
        match self {
            ClipRule::None => None,
            ClipRule::Flat { max_grad_norm } | ClipRule::PerLayer { max_grad_norm } => {
                Some(max_grad_norm)
            }
            ClipRule::AutoS { .. } => Some(1.0),
        }
    }
}
