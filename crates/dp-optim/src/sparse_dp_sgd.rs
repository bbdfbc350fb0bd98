//! Sparse DP-SGD (the Wide-network paper's Algorithms 2 and 3, as
//! `docs/reproduction/wide.md` reconstructs them): clip each example's gradient at S₁,
//! privately select k = ⌈γp⌉ coordinates of the clipped sum's magnitudes, re-clip each
//! example's contribution on them at the run's clip S₂, and add `N(0, σ²S₂²)` there only.
//! The update then moves every coordinate (Adam's moments keep moving the others).

use dp_mechanisms::Mechanism;
use dp_models::{ClipRule, SparsePrivateModel};

use crate::algorithm::Algorithm;
use crate::engine::{PrivacyEngine, StepReport};
use crate::error::Result;
use crate::selection::{CoordinateSelection, CoordinateSelector};
use dp_accounting::validate;

/// Sparse DP-SGD with private coordinate selection, for any [`SparsePrivateModel`].
/// The step's event is the sampled composition of the selection and the Gaussian
/// ([`PrivacyEngine::begin_step_with`]).
#[derive(Clone, Debug)]
pub struct SparseDpSgd {
    first_clip: f64,
    fraction: f64,
    selection: CoordinateSelection,
    last_selection: Vec<usize>,
}

impl SparseDpSgd {
    /// Selection of a fraction `fraction` ∈ (0, 1] of the coordinates (γ) from the sum
    /// of gradients clipped at `first_clip` (S₁ > 0, which is also the scores'
    /// sensitivity), by `selection`.
    pub fn new(first_clip: f64, fraction: f64, selection: CoordinateSelection) -> Result<Self> {
        validate::positive("first_clip", first_clip)?;
        validate::rate("fraction", fraction)?;
        selection.selector(first_clip, 1)?;
        Ok(SparseDpSgd {
            first_clip,
            fraction,
            selection,
            last_selection: Vec::new(),
        })
    }

    /// Coordinates selected per step for a model of `num_params` parameters:
    /// k = ⌈γp⌉, at least 1.
    pub fn selected_per_step(&self, num_params: usize) -> usize {
        ((self.fraction * num_params as f64).ceil() as usize).clamp(1, num_params.max(1))
    }

    /// The selection mechanism for a model of `num_params` parameters; its event is the
    /// part of each step's charge besides the Gaussian.
    pub fn selector(&self, num_params: usize) -> Result<CoordinateSelector> {
        self.selection
            .selector(self.first_clip, self.selected_per_step(num_params))
    }

    /// The coordinates the last step selected (a release covered by its charge).
    pub fn last_selection(&self) -> &[usize] {
        &self.last_selection
    }
}

impl<M: SparsePrivateModel> Algorithm<M> for SparseDpSgd {
    fn step(&mut self, engine: &mut PrivacyEngine<M>, data: &M::Data) -> Result<StepReport> {
        let selector = self.selector(engine.model().num_params())?;
        let first = ClipRule::Flat {
            max_grad_norm: self.first_clip,
        };
        let mut charge = engine.begin_step_with(data, selector.event())?;
        let batch = engine.draw_batch(&mut charge)?;
        let scores = engine.clipped_sum_with(data, &batch, first)?;
        let selection = engine.select_coordinates(charge, &scores, &selector)?;
        let chosen = selection.coordinates().to_vec();
        let clipped = engine.clipped_sum_on_support(data, &batch, first, &chosen)?;
        let noisy = engine.release_on_support(selection, clipped)?;
        self.last_selection = chosen;
        engine.apply_update(&noisy)
    }
}
