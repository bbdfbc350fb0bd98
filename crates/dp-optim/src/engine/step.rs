//! The engine's public steps, from which every algorithm is written (DP-SGD,
//! [`PrivacyEngine::step`], is these five calls in order):
//!
//! 1. [`begin_step`](PrivacyEngine::begin_step) validates the data and reserves the
//!    step's charge under the budget ([`Error::BudgetExceeded`] before anything is
//!    drawn);
//! 2. [`draw_batch`](PrivacyEngine::draw_batch) draws the batch with the run's sampler,
//!    under that charge (a [`Batch`] token: nothing else can be summed);
//! 3. [`clipped_sum`](PrivacyEngine::clipped_sum) sums the clipped per-example gradients
//!    (fail-closed: every parameter must be covered);
//! 4. [`release`](PrivacyEngine::release) consumes the charge, adds the Gaussian
//!    mechanism's noise, checks it, and commits the charge and the sampler's move: the
//!    noisy sum exists only once the ledger holds its event;
//! 5. [`apply_update`](PrivacyEngine::apply_update) divides by the batch size the
//!    configuration names and applies the optimiser.
//!
//! Also: [`release_value`](PrivacyEngine::release_value) for a scalar statistic of an
//! [`ExtraBatch`](super::ExtraBatch) (charged first, under the scheme that drew it),
//! [`draw_extra_batch`](PrivacyEngine::draw_extra_batch) outside the training sequence,
//! and [`snapshot`](PrivacyEngine::snapshot) / [`rollback`](PrivacyEngine::rollback)
//! of θ and the optimiser moments (`snapshot.rs`).

use std::sync::atomic::{AtomicU64, Ordering};

use dp_accounting::{DpEvent, SamplingScheme};
use dp_mechanisms::{GaussianMechanism, Mechanism};
use dp_models::{ClipRule, ClippedGradient, PrivateModel};

use super::batch::{Batch, ExtraBatch};
use super::device::Gradient;
use super::distributed::NoiseBy;
use super::step_tokens::{ClippedSum, NoisyGradient, StepCharge};
use super::{PrivacyEngine, StepReport};
use crate::config::PrivacyConfig;
use crate::error::{Error, Result};

/// Ids of step charges, unique in the process (a batch or sum of one engine's step cannot
/// pass for another's).
static NEXT_CHARGE: AtomicU64 = AtomicU64::new(0);

impl<M: PrivateModel> PrivacyEngine<M> {
    /// Validates `data` (which must have the engine's `dataset_size` records) and reserves
    /// this step's charge: the sampler's amplification of the step's Gaussian mechanism
    /// (nothing inside a shuffled epoch, nothing for a non-private run).
    /// [`Error::BudgetExceeded`] if it does not fit the budget.
    pub fn begin_step(&mut self, data: &M::Data) -> Result<StepCharge> {
        self.begin_charge(data, None)
    }

    /// [`begin_step`](Self::begin_step) for a step that runs a second mechanism (of event
    /// `also`) on the same batch, e.g. a private coordinate selection: the reserved event
    /// is the sampler's amplification of the two composed, accounted jointly since both
    /// read the one sampled batch. Refused under shuffled and cyclic sampling (whose
    /// charges cover the Gaussian only) and for non-private runs.
    pub fn begin_step_with(&mut self, data: &M::Data, also: DpEvent) -> Result<StepCharge> {
        if self.config.privacy.is_none() {
            return Err(Error::NotPrivate {
                operation: "begin_step_with",
            });
        }
        let scheme = self.config.sampler.scheme(self.dataset_size);
        if scheme.charge_period().is_some() {
            return Err(Error::InvalidSetting {
                name: "sampler",
                value: format!("{:?}", self.config.sampler),
                reason: "cannot take a joint step: a charge covering several steps (a \
                         shuffled epoch, a cycle of groups) covers the Gaussian only (use \
                         Poisson or fixed-size sampling)"
                    .into(),
            });
        }
        self.begin_charge(data, Some(also))
    }

    fn begin_charge(&mut self, data: &M::Data, also: Option<DpEvent>) -> Result<StepCharge> {
        self.check_data(data)?;
        let id = NEXT_CHARGE.fetch_add(1, Ordering::Relaxed);
        let Some(p) = &self.config.privacy else {
            return Ok(StepCharge {
                id,
                reservation: None,
                mechanism: None,
                also: None,
                drawn: false,
                shuffle: None,
                noise_multiplier: None,
            });
        };
        let scheme = self.config.sampler.scheme(self.dataset_size);
        let mechanism = step_mechanism(p, &scheme)?;
        let inner = match &also {
            None => mechanism.event(),
            Some(other) => DpEvent::Composed {
                events: vec![mechanism.event(), other.clone()],
            },
        };
        let event = scheme.event_at_step(inner, self.steps - self.period_origin)?;
        if event.is_none() {
            self.check_epoch_charge(p.noise_multiplier)?;
        }
        Ok(StepCharge {
            id,
            reservation: self.reserve(event.as_ref())?,
            mechanism: Some(mechanism),
            also,
            drawn: false,
            shuffle: None,
            noise_multiplier: Some(p.noise_multiplier),
        })
    }

    /// One DP-SGD step on `data` (which must have `dataset_size` records): the five
    /// steps above in order. The charge is reserved first ([`Error::BudgetExceeded`]
    /// if it does not fit), committed once the noisy gradient is ready, and only then is
    /// θ updated.
    pub fn step(&mut self, data: &M::Data) -> Result<StepReport> {
        Ok(self.step_with_batch(data)?.0)
    }

    /// [`step`](Self::step), also returning the indices of the batch it drew (for an
    /// algorithm that evaluates on that batch, like SA-DPSGD's energy).
    pub fn step_with_batch(&mut self, data: &M::Data) -> Result<(StepReport, Batch)> {
        let mut charge = self.begin_step(data)?;
        let batch = self.draw_batch(&mut charge)?;
        let clipped = self.clipped_sum(data, &batch)?;
        let noisy = self.release(charge, clipped)?;
        Ok((self.apply_update(&noisy)?, batch))
    }

    /// The clipped gradient sum of the examples `batch` of `data`, in physical slices,
    /// with the run's clipping rule; fail-closed: every slice's sum must cover every
    /// parameter ([`Error::UnprotectedParameter`]).
    pub fn clipped_sum(&mut self, data: &M::Data, batch: &Batch) -> Result<ClippedSum> {
        self.clipped_sum_with(data, batch, self.clip_rule())
    }

    /// [`clipped_sum`](Self::clipped_sum) with another rule (e.g. the first clip of sparse
    /// DP-SGD, whose sum only a selection reads). [`release`](Self::release) refuses a
    /// sum whose rule bounds more than its mechanism covers.
    pub fn clipped_sum_with(
        &mut self,
        data: &M::Data,
        batch: &Batch,
        rule: ClipRule,
    ) -> Result<ClippedSum> {
        self.sum_slices(batch, rule, |model, slice, applied| {
            model.clipped_gradient(data, slice, applied)
        })
    }

    /// Sums `gradient` over `batch` in physical slices, checking each covers every
    /// parameter; `rule` as configured, or as a fault test breaks it.
    pub(super) fn sum_slices(
        &mut self,
        batch: &Batch,
        rule: ClipRule,
        gradient: impl Fn(&M, &[usize], ClipRule) -> dp_models::Result<ClippedGradient>,
    ) -> Result<ClippedSum> {
        let applied = rule;
        #[cfg(feature = "fault-injection")]
        let applied = self.fault.map_or(applied, |f| f.clip_rule(applied));
        let physical = self.physical_batch_size.unwrap_or(usize::MAX).max(1);
        let mut sum = Gradient::zeros(&self.moments, &self.model)?;
        let (mut loss_sum, mut nonfinite) = (0.0f64, 0usize);
        for slice in batch.indices().chunks(physical) {
            let clipped = gradient(&self.model, slice, applied)?;
            let part = sum.like(clipped.sum)?;
            sum.accumulate(part)?;
            nonfinite += clipped
                .squared_norms
                .iter()
                .filter(|v| !v.is_finite())
                .count();
            loss_sum += clipped.losses.iter().map(|&l| f64::from(l)).sum::<f64>();
        }
        Ok(ClippedSum {
            sum,
            rule,
            charge: batch.charge(),
            batch_size: batch.len(),
            loss_sum,
            nonfinite,
        })
    }

    /// Releases `clipped` through the charge's Gaussian mechanism: noise added, every
    /// coordinate checked finite ([`Error::UnprotectedParameter`] otherwise), the charge
    /// committed, the step counted. Refused when the sum was clipped with a larger bound
    /// than the mechanism was calibrated for, or not clipped at all in a private run.
    pub fn release(&mut self, charge: StepCharge, clipped: ClippedSum) -> Result<NoisyGradient> {
        self.release_on(charge, clipped, None, NoiseBy::ThisEngine)
    }

    /// [`release`](Self::release), with noise on the coordinates `support` only when one
    /// is given (the sum must then be zero elsewhere: [`Error::UnprotectedParameter`]
    /// otherwise).
    pub(super) fn release_on(
        &mut self,
        mut charge: StepCharge,
        clipped: ClippedSum,
        support: Option<&[usize]>,
        noise_by: NoiseBy,
    ) -> Result<NoisyGradient> {
        if clipped.charge != charge.id || !charge.drawn {
            return Err(Error::UnprotectedParameter(
                "the clipped sum is not of the batch drawn under this step's charge".into(),
            ));
        }
        let mut sum = clipped.sum;
        if let Some(mechanism) = &charge.mechanism {
            self.check_covered(mechanism, clipped.rule)?;
            let add_noise = noise_by == NoiseBy::ThisEngine;
            #[cfg(feature = "fault-injection")]
            let add_noise = add_noise && self.fault != Some(crate::fault::Fault::SkipNoise);
            match (add_noise, self.correlated.is_some(), support) {
                (false, ..) => {}
                (true, false, _) => self.add_noise(mechanism, &mut sum, support)?,
                (true, true, None) => self.add_correlated(&mut sum)?,
                (true, true, Some(_)) => {
                    return Err(Error::UnprotectedParameter(
                        "a release on a support cannot take banded correlated noise".into(),
                    ))
                }
            }
        }
        if let Some(bad) = sum.first_nonfinite()? {
            return Err(Error::UnprotectedParameter(format!(
                "{bad} has a non-finite noisy gradient"
            )));
        }
        if let (Some(filter), Some(reservation)) = (&mut self.ledger, charge.reservation.take()) {
            filter.commit(reservation)?;
            self.note_epoch_charge(charge.noise_multiplier);
        }
        if let Some(shuffle) = charge.shuffle.take() {
            self.shuffle = shuffle;
        }
        self.steps += 1;
        self.nonfinite += clipped.nonfinite as u64;
        Ok(NoisyGradient {
            sum,
            support: support.map(<[usize]>::to_vec),
            batch_size: clipped.batch_size,
            loss_sum: clipped.loss_sum,
            nonfinite: clipped.nonfinite,
        })
    }

    /// Refuses a sum clipped wider than `mechanism` is calibrated for, or not at all.
    pub(super) fn check_covered(
        &self,
        mechanism: &GaussianMechanism,
        rule: ClipRule,
    ) -> Result<()> {
        let scheme = self.config.sampler.scheme(self.dataset_size);
        let bound = scheme
            .relation()
            .sum_sensitivity(rule.sensitivity().ok_or_else(|| {
                Error::UnprotectedParameter("a private step got an unclipped sum".into())
            })?);
        if bound > mechanism.sensitivity() {
            return Err(Error::UnprotectedParameter(format!(
                "the sum's sensitivity {bound} exceeds the mechanism's {}",
                mechanism.sensitivity()
            )));
        }
        Ok(())
    }

    /// The mechanism's noise on every coordinate of `sum`, or on `support` only (host
    /// sums only: sparse models keep their parameters on the host).
    fn add_noise(
        &mut self,
        mechanism: &GaussianMechanism,
        sum: &mut Gradient,
        support: Option<&[usize]>,
    ) -> Result<()> {
        let Some(support) = support else {
            return sum.add_noise(mechanism, &mut self.noise);
        };
        let Gradient::Host(sum) = sum else {
            return Err(Error::UnprotectedParameter(
                "noise on a support needs a host sum".into(),
            ));
        };
        let mut on = vec![false; sum.len()];
        for &j in support {
            *on.get_mut(j).ok_or_else(|| Error::InvalidParameter {
                name: "support",
                value: j as f64,
                reason: "a coordinate beyond the model's parameters",
            })? = true;
        }
        if let Some(j) = (0..sum.len()).find(|&j| !on[j] && sum[j] != 0.0) {
            return Err(Error::UnprotectedParameter(format!(
                "coordinate {j} is outside the support but not zero"
            )));
        }
        let mut values: Vec<f32> = support.iter().map(|&j| sum[j]).collect();
        mechanism.release_in_place_f32(&mut values, &mut self.noise);
        support.iter().zip(values).for_each(|(&j, v)| sum[j] = v);
        Ok(())
    }

    /// Releases one scalar statistic of the private records of `batch` through
    /// `mechanism`: the event `scheme.amplify(mechanism.event())`, for the scheme that drew
    /// the batch, is charged (under the budget) before the noise is drawn. `value` must
    /// have the mechanism's sensitivity under the scheme's relation.
    pub fn release_value(
        &mut self,
        value: f64,
        mechanism: &GaussianMechanism,
        batch: &ExtraBatch,
    ) -> Result<f64> {
        self.charge(&batch.scheme().amplify(mechanism.event())?)?;
        Ok(mechanism.release(value, &mut self.noise))
    }

    /// The clipping rule in force (none for a non-private run).
    pub fn clip_rule(&self) -> ClipRule {
        self.config
            .privacy
            .as_ref()
            .map_or(ClipRule::None, PrivacyConfig::clip_rule)
    }

    /// Breaks the engine on purpose (the audit's tests only; see [`crate::fault`]).
    #[cfg(feature = "fault-injection")]
    pub fn inject_fault(&mut self, fault: crate::fault::Fault) {
        self.fault = Some(fault);
    }
}

/// The Gaussian mechanism of a step under `scheme`: the clipped sum's sensitivity under
/// the scheme's relation, and the noise σ·(clip rule's bound) that the configuration
/// names (so the mechanism's own multiplier is σ/2 under replace-one).
pub(super) fn step_mechanism(
    p: &PrivacyConfig,
    scheme: &SamplingScheme,
) -> Result<GaussianMechanism> {
    let bound = p.clip_rule().sensitivity().ok_or_else(|| {
        Error::UnprotectedParameter("a private run's clip rule bounds nothing".into())
    })?;
    let factor = scheme.relation().sum_sensitivity(1.0);
    Ok(GaussianMechanism::new(
        bound * factor,
        p.noise_multiplier / factor,
    )?)
}
