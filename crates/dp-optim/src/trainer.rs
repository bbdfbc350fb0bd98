//! The training loop every client shares: epochs of an [`Algorithm`]'s steps, a
//! learning-rate schedule, the budget stop, atomic checkpoints written before anything
//! of the epoch is shown, and an [`Observer`] for evaluation, progress and custom stop
//! rules.

use dp_models::PrivateModel;

use crate::algorithm::Algorithm;
use crate::checkpoint::CheckpointDir;
use crate::engine::{PrivacyEngine, StepReport};
use crate::error::{Error, Result};
use dp_accounting::validate;

/// A learning rate for each step (0-based), set on the engine before the step.
pub trait LearningRateSchedule {
    /// η at step `step`.
    fn learning_rate(&self, step: u64) -> f64;
}

/// Whether training goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Keep training.
    Continue,
    /// End the epoch now (its checkpoint and [`Observer::epoch_done`] still run) and stop.
    Stop,
}

/// What an epoch did. The training loss is computed from the private batches without
/// noise: **not covered by ε** (show it only labelled so).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpochSummary {
    /// Steps taken by the engine so far.
    pub steps: u64,
    /// Steps taken in this epoch.
    pub epoch_steps: u64,
    /// Σ of the steps' finite mean losses and how many there were (not covered by ε).
    pub loss_sum_not_covered_by_epsilon: f64,
    /// The number of finite mean losses summed.
    pub loss_steps: u64,
    /// The engine refused the next step: it would exceed the budget.
    pub stopped_by_budget: bool,
}

impl EpochSummary {
    /// The epoch's mean training loss (`None` when no step had a finite loss); **not
    /// covered by ε**.
    pub fn mean_train_loss_not_covered_by_epsilon(&self) -> Option<f64> {
        (self.loss_steps > 0).then(|| self.loss_sum_not_covered_by_epsilon / self.loss_steps as f64)
    }
}

/// Watches a run: after every step and after every epoch (once its checkpoint is
/// written). Both may stop the run. The default methods do nothing.
pub trait Observer<M: PrivateModel, A: ?Sized> {
    /// After each step.
    fn step_done(
        &mut self,
        _engine: &PrivacyEngine<M>,
        _algorithm: &A,
        _report: &StepReport,
    ) -> Result<Control> {
        Ok(Control::Continue)
    }

    /// After each epoch, its checkpoint written: evaluation, printing, custom stop rules
    /// (e.g. the GDP paper's μ > 2).
    fn epoch_done(
        &mut self,
        _engine: &PrivacyEngine<M>,
        _algorithm: &A,
        _epoch: &EpochSummary,
    ) -> Result<Control> {
        Ok(Control::Continue)
    }
}

/// An observer that watches nothing.
impl<M: PrivateModel, A> Observer<M, A> for () {}

/// How a [`Trainer::fit`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FitOutcome {
    /// Steps taken by the engine (including those before a resume).
    pub steps: u64,
    /// The budget refused the next step.
    pub stopped_by_budget: bool,
    /// The observer stopped the run.
    pub stopped_by_observer: bool,
}

/// The loop: up to `total_steps` engine steps in epochs of `steps_per_epoch` (epoch ends
/// are multiples of it, so a resumed run keeps its epochs).
pub struct Trainer<'a> {
    /// The run's length in engine steps (a resumed engine continues towards it).
    pub total_steps: u64,
    /// Steps per epoch (≥ 1); the sampler's `steps_per_epoch` for the training set.
    pub steps_per_epoch: u64,
    /// Where each epoch's checkpoint is written, before the observer sees the epoch.
    pub checkpoints: Option<&'a CheckpointDir>,
    /// The learning rate of each step (`None`: the configuration's, or the algorithm's).
    pub schedule: Option<&'a dyn LearningRateSchedule>,
}

impl Trainer<'_> {
    /// Trains `engine` with `algorithm` on `train` until `total_steps`, the budget, or
    /// the observer stops it. The algorithm may be a trait object (`&mut dyn T` of a
    /// trait `T: Algorithm<M>` whose hooks the observer reads).
    pub fn fit<M, A, O>(
        &self,
        engine: &mut PrivacyEngine<M>,
        algorithm: &mut A,
        train: &M::Data,
        observer: &mut O,
    ) -> Result<FitOutcome>
    where
        M: PrivateModel,
        A: Algorithm<M> + ?Sized,
        O: Observer<M, A>,
    {
        validate::at_least_one("steps_per_epoch", self.steps_per_epoch as usize)?;
        let mut outcome = FitOutcome {
            steps: engine.steps(),
            stopped_by_budget: false,
            stopped_by_observer: false,
        };
        while engine.steps() < self.total_steps
            && !outcome.stopped_by_budget
            && !outcome.stopped_by_observer
        {
            let epoch = self.epoch(engine, algorithm, train, observer, &mut outcome)?;
            // The checkpoint first: anything shown from steps a resume would redo would be
            // a release that no ledger holds.
            if let Some(dir) = self.checkpoints {
                dir.save(&engine.checkpoint()?)?;
            }
            if observer.epoch_done(engine, algorithm, &epoch)? == Control::Stop {
                outcome.stopped_by_observer = true;
            }
        }
        outcome.steps = engine.steps();
        Ok(outcome)
    }

    /// One epoch's steps (ended early by the budget or the observer).
    fn epoch<M, A, O>(
        &self,
        engine: &mut PrivacyEngine<M>,
        algorithm: &mut A,
        train: &M::Data,
        observer: &mut O,
        outcome: &mut FitOutcome,
    ) -> Result<EpochSummary>
    where
        M: PrivateModel,
        A: Algorithm<M> + ?Sized,
        O: Observer<M, A>,
    {
        let start = engine.steps();
        let end = ((start / self.steps_per_epoch + 1) * self.steps_per_epoch).min(self.total_steps);
        let (mut loss_sum, mut loss_steps) = (0.0, 0u64);
        while engine.steps() < end {
            if let Some(schedule) = self.schedule {
                engine.set_learning_rate(schedule.learning_rate(engine.steps()))?;
            }
            let before = engine.steps();
            let report = match algorithm.step(engine, train) {
                Ok(report) => report,
                Err(Error::BudgetExceeded { .. }) => {
                    outcome.stopped_by_budget = true;
                    break;
                }
                Err(e) => return Err(e),
            };
            if engine.steps() == before {
                return Err(Error::StepNotTaken);
            }
            if report.mean_loss.is_finite() {
                loss_sum += report.mean_loss;
                loss_steps += 1;
            }
            if observer.step_done(engine, algorithm, &report)? == Control::Stop {
                outcome.stopped_by_observer = true;
                break;
            }
        }
        Ok(EpochSummary {
            steps: engine.steps(),
            epoch_steps: engine.steps() - start,
            loss_sum_not_covered_by_epsilon: loss_sum,
            loss_steps,
            stopped_by_budget: outcome.stopped_by_budget,
        })
    }
}
