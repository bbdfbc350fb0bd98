//! The engine's steps for sparse DP-SGD: a private selection of coordinates from one
//! clipped sum, a second clipped sum restricted to them, and Gaussian noise on them
//! only. The selection and the Gaussian read the same batch, so the step's charge
//! ([`begin_step_with`](PrivacyEngine::begin_step_with)) is their joint sampled event.

use dp_mechanisms::Mechanism;
use dp_models::{ClipRule, PrivateModel, SparsePrivateModel};

use super::batch::Batch;
use super::step_tokens::{ClippedSum, NoisyGradient, StepCharge};
use super::PrivacyEngine;
use crate::error::{Error, Result};
use crate::selection::CoordinateSelector;

/// The coordinates a step's private selection chose, holding the step's (committed)
/// charge: consumed by [`release_on_support`](PrivacyEngine::release_on_support), so a
/// charge selects once and releases once:
///
/// ```compile_fail
/// # fn f(e: &mut dp_optim::PrivacyEngine, data: &dp_models::data::Dataset,
/// #      s: &dp_optim::CoordinateSelector) -> dp_optim::Result<()> {
/// let mut charge = e.begin_step_with(data, s.event())?;
/// let batch = e.draw_batch(&mut charge)?;
/// let scores = e.clipped_sum(data, &batch)?;
/// let first = e.select_coordinates(charge, &scores, s)?;
/// let again = e.select_coordinates(charge, &scores, s)?; // use of a moved value
/// # Ok(()) }
/// ```
pub struct Selection {
    charge: StepCharge,
    coordinates: Vec<usize>,
}

impl Selection {
    /// The chosen coordinates.
    pub fn coordinates(&self) -> &[usize] {
        &self.coordinates
    }
}

impl<M: PrivateModel> PrivacyEngine<M> {
    /// Chooses coordinates of `|clipped|` with `selector`, whose event the step's charge
    /// must have been begun with; the charge is committed first (the chosen coordinates
    /// are a release) and moves into the returned [`Selection`]. Refused when the sum is
    /// not of the charge's batch, or its per-coordinate sensitivity exceeds the
    /// selector's.
    pub fn select_coordinates(
        &mut self,
        mut charge: StepCharge,
        clipped: &ClippedSum,
        selector: &CoordinateSelector,
    ) -> Result<Selection> {
        if clipped.charge != charge.id || !charge.drawn {
            return Err(Error::UnprotectedParameter(
                "the scores are not of the batch drawn under this step's charge".into(),
            ));
        }
        if charge.also.as_ref() != Some(&selector.event()) {
            return Err(Error::InvalidSetting {
                name: "selector",
                value: format!("{:?}", selector.event()),
                reason: "is not covered by the step's charge: begin the step with the \
                         selector's event"
                    .into(),
            });
        }
        let scheme = self.config.sampler.scheme(self.dataset_size);
        // ‖clip(g)‖₂ ≤ bound bounds every coordinate of one example's contribution.
        let bound = clipped
            .rule
            .sensitivity()
            .ok_or_else(|| Error::UnprotectedParameter("a selection on an unclipped sum".into()))?;
        let bound = scheme.relation().sum_sensitivity(bound);
        if bound > selector.sensitivity() {
            return Err(Error::UnprotectedParameter(format!(
                "the scores' sensitivity {bound} exceeds the selector's {}",
                selector.sensitivity()
            )));
        }
        let scores: Vec<f64> = clipped
            .sum
            .to_host()?
            .iter()
            .map(|&v| f64::from(v.abs()))
            .collect();
        if let (Some(filter), Some(reservation)) = (&mut self.ledger, charge.reservation.take()) {
            filter.commit(reservation)?;
        }
        charge.also = None;
        let coordinates = selector.select(&scores, &mut self.noise)?;
        Ok(Selection {
            charge,
            coordinates,
        })
    }
}

impl<M: SparsePrivateModel> PrivacyEngine<M> {
    /// The sum over `batch` of each example's gradient clipped by `first`, restricted to
    /// `support`, and clipped again with the run's rule: zero off the support.
    pub fn clipped_sum_on_support(
        &mut self,
        data: &M::Data,
        batch: &Batch,
        first: ClipRule,
        support: &[usize],
    ) -> Result<ClippedSum> {
        let mut mask = vec![false; self.model.num_params()];
        for &j in support {
            *mask.get_mut(j).ok_or(Error::InvalidParameter {
                name: "support",
                value: j as f64,
                reason: "a coordinate beyond the model's parameters",
            })? = true;
        }
        let rule = self.clip_rule();
        self.sum_slices(batch, rule, |model, slice, applied| {
            model.clipped_gradient_on_support(data, slice, first, &mask, applied)
        })
    }

    /// [`release`](PrivacyEngine::release) of the selection's step with the noise on the
    /// chosen coordinates only: the sum must be zero elsewhere
    /// ([`Error::UnprotectedParameter`] otherwise).
    pub fn release_on_support(
        &mut self,
        selection: Selection,
        clipped: ClippedSum,
    ) -> Result<NoisyGradient> {
        let Selection {
            charge,
            coordinates,
        } = selection;
        self.release_on(
            charge,
            clipped,
            Some(&coordinates),
            super::distributed::NoiseBy::ThisEngine,
        )
    }
}
