//! Charges that cover several steps. A shuffled epoch is charged once, at its first
//! step, as one Gaussian mechanism at the noise multiplier then in force (parallel
//! composition over the epoch's disjoint batches; `Sampler::Shuffle`), and a cycle of a
//! cyclic sampler's groups likewise (`Sampler::CyclicPoisson`); every later step of the
//! period is covered by that charge only if it adds the same noise. So σ may change
//! only at a period's boundary — whether by [`set_noise_multiplier`], by a resume with
//! `--allow-change noise-multiplier`, or by any other path — and each step inside a
//! period is checked against its charge before anything is drawn.
//!
//! [`set_noise_multiplier`]: PrivacyEngine::set_noise_multiplier

use dp_models::PrivateModel;

use super::PrivacyEngine;
use crate::error::{Error, Result};

impl<M: PrivateModel> PrivacyEngine<M> {
    /// The charge period (a shuffled epoch, a cycle of the groups) that step `step`
    /// (0-based) falls in, as (its first step, the next boundary); `None` for samplers
    /// that charge every step.
    pub(super) fn charge_period(&self, step: u64) -> Option<(u64, u64)> {
        self.charge_period_from(step, self.period_origin)
    }

    /// [`charge_period`](Self::charge_period) with the periods counted from `origin`.
    pub(super) fn charge_period_from(&self, step: u64, origin: u64) -> Option<(u64, u64)> {
        let period = self
            .config
            .sampler
            .scheme(self.dataset_size)
            .charge_period()?;
        let start = step - (step - origin.min(step)) % period;
        Some((start, start + period))
    }

    /// Refuses a step inside a charge period whose noise multiplier is not the one the
    /// period was charged at ([`Error::EpochBoundary`]).
    pub(super) fn check_epoch_charge(&self, noise_multiplier: f64) -> Result<()> {
        let Some((start, next)) = self.charge_period(self.steps) else {
            return Ok(());
        };
        if start == self.steps || self.epoch_noise == Some(noise_multiplier) {
            return Ok(());
        }
        let Some(charged) = self.epoch_noise else {
            return Err(Error::UnprotectedParameter(format!(
                "step {} is inside a charged period whose charge is unknown",
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

    /// Records the noise multiplier a committed period charge was reserved at.
    pub(super) fn note_epoch_charge(&mut self, noise_multiplier: Option<f64>) {
        if self.charge_period(self.steps).is_some() {
            self.epoch_noise = noise_multiplier;
        }
    }
}
