//! The shuffled sampler's epoch rule. A shuffled epoch is charged once, at its first
//! step, as one Gaussian mechanism at the noise multiplier then in force (parallel
//! composition over the epoch's disjoint batches; `Sampler::Shuffle`); every later step
//! of the epoch is covered by that charge only if it adds the same noise. So σ may change
//! only at an epoch boundary — whether by [`set_noise_multiplier`], by a resume with
//! `--allow-change noise-multiplier`, or by any other path — and each step inside an
//! epoch is checked against the epoch's charge before anything is drawn.
//!
//! [`set_noise_multiplier`]: PrivacyEngine::set_noise_multiplier

use dp_models::PrivateModel;

use super::PrivacyEngine;
use crate::error::{Error, Result};
use crate::sampler::Sampler;

impl<M: PrivateModel> PrivacyEngine<M> {
    /// The shuffled epoch that step `step` (0-based) falls in, as (its first step, the
    /// next boundary); `None` for other samplers.
    pub(super) fn shuffled_epoch(&self, step: u64) -> Option<(u64, u64)> {
        let Sampler::Shuffle { .. } = self.config.sampler else {
            return None;
        };
        let epoch = self.config.sampler.steps_per_epoch(self.dataset_size) as u64;
        let start = step - step % epoch;
        Some((start, start + epoch))
    }

    /// Refuses a step inside a shuffled epoch whose noise multiplier is not the one the
    /// epoch was charged at ([`Error::EpochBoundary`]).
    pub(super) fn check_epoch_charge(&self, noise_multiplier: f64) -> Result<()> {
        let Some((start, next)) = self.shuffled_epoch(self.steps) else {
            return Ok(());
        };
        if start == self.steps || self.epoch_noise == Some(noise_multiplier) {
            return Ok(());
        }
        let Some(charged) = self.epoch_noise else {
            return Err(Error::UnprotectedParameter(format!(
                "step {} is inside a shuffled epoch whose charge is unknown",
                self.steps
            )));
        };
        Err(Error::EpochBoundary {
            field: "noise_multiplier",
            step: self.steps,
            epoch_start: start,
            next_boundary: next,
            charged,
            requested: noise_multiplier,
        })
    }

    /// Records the noise multiplier a committed shuffled-epoch charge was reserved at.
    pub(super) fn note_epoch_charge(&mut self, noise_multiplier: Option<f64>) {
        if self.shuffled_epoch(self.steps).is_some() {
            self.epoch_noise = noise_multiplier;
        }
    }
}
