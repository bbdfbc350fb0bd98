//! Checkpoint and resume of a [`PrivacyEngine`]: what it writes, and the checks before it
//! takes a checkpoint's state (fingerprint, shapes, ledger, noise mode).

use dp_accounting::BudgetFilter;
use dp_mechanisms::NoiseSource;
use dp_models::PrivateModel;

use super::PrivacyEngine;
use crate::checkpoint::{Checkpoint, CHECKPOINT_FORMAT};
use crate::error::{Error, Result};
use crate::fingerprint::{RunField, RunFingerprint};

impl<M: PrivateModel> PrivacyEngine<M> {
    /// The run's fingerprint: its initial settings, and the data once a step has seen it.
    pub fn fingerprint(&self) -> RunFingerprint {
        match &self.data_seen {
            Some(seen) => self
                .fingerprint
                .clone()
                .with_dataset(seen.records, &seen.digest),
            None => self.fingerprint.clone(),
        }
    }

    /// The state to write to a checkpoint. The noise key is included only for a seeded
    /// (reproducible) run; see [`Checkpoint`] for what a checkpoint reveals. Refused on a
    /// rank other than 0 of a data-parallel group.
    pub fn checkpoint(&self) -> Result<Checkpoint> {
        self.check_checkpointable()?;
        Ok(Checkpoint {
            format: CHECKPOINT_FORMAT,
            fingerprint: self.fingerprint(),
            theta: self.model.parameters()?,
            moments: self.moments.to_host()?,
            steps: self.steps,
            ledger: self.ledger().cloned(),
            noise: self.noise.is_reproducible().then(|| self.noise.state()),
            nonfinite_gradients: self.nonfinite,
            shuffle: self.shuffle.clone(),
            epoch_noise_multiplier: self.epoch_noise,
            correlated_noise: self.correlated_history(),
            digest: None,
        })
    }

    /// Resumes from a checkpoint of the same run: every setting must match
    /// ([`Error::ResumeMismatch`] names the first that does not). The ledger is replayed
    /// under this run's budget, so every earlier charge counts.
    pub fn restore(&mut self, checkpoint: &Checkpoint) -> Result<()> {
        self.restore_allowing(checkpoint, &[])
    }

    /// [`restore`](Self::restore), accepting changes to the fields in `allowed` that
    /// [may change](RunField::may_change) (a new learning rate, σ, clip or budget). A
    /// shuffled run's σ changes only at an epoch boundary ([`Error::EpochBoundary`]:
    /// the epoch's charge was made at the checkpoint's σ).
    pub fn restore_allowing(
        &mut self,
        checkpoint: &Checkpoint,
        allowed: &[RunField],
    ) -> Result<()> {
        self.check_seed(checkpoint)?;
        self.restore_state(checkpoint, allowed)
    }

    /// [`restore_allowing`](Self::restore_allowing) without the seed check: for a rank
    /// other than 0 of a data-parallel group, which draws no noise of its own.
    pub(super) fn restore_state(
        &mut self,
        checkpoint: &Checkpoint,
        allowed: &[RunField],
    ) -> Result<()> {
        checkpoint
            .fingerprint
            .check_resume(&self.fingerprint, allowed)?;
        if let Some(saved) = checkpoint.fingerprint.0.get(&RunField::NoiseMultiplier) {
            self.check_fixed_sigma(saved.parse().unwrap_or(f64::NAN))?;
        }
        let origin = self.resumed_origin(checkpoint);
        self.check_resumed_epoch(checkpoint, origin)?;
        self.check_steps_paid(checkpoint)?;
        let fail = |reason: String| Error::Checkpoint {
            path: "(in memory)".into(),
            reason,
        };
        if checkpoint.theta.len() != self.model.num_params()
            || checkpoint.moments.len() != self.moments.count()
            || checkpoint
                .moments
                .iter()
                .any(|m| m.len() != checkpoint.theta.len())
        {
            return Err(fail(format!(
                "{} weights and {} moment vectors do not fit a model of {} parameters with {} moments",
                checkpoint.theta.len(),
                checkpoint.moments.len(),
                self.model.num_params(),
                self.moments.count()
            )));
        }
        let ledger = match (&self.ledger, &checkpoint.ledger) {
            (Some(filter), Some(saved)) => {
                let mut fresh = filter.accountant().boxed_clone();
                if !fresh.ledger().entries.is_empty() {
                    return Err(fail("this engine has already taken steps".into()));
                }
                saved.replay(&mut fresh)?;
                Some(BudgetFilter::new(fresh, filter.budget()))
            }
            (None, None) => None,
            _ => return Err(fail("the ledger does not match the run's privacy".into())),
        };
        if self.noise.is_reproducible() {
            let state = checkpoint
                .noise
                .as_ref()
                .ok_or_else(|| fail("a seeded run's checkpoint without its noise state".into()))?;
            self.noise = NoiseSource::restore(state);
        }
        self.model.set_parameters(&checkpoint.theta)?;
        self.moments.set_from_host(&checkpoint.moments)?;
        self.steps = checkpoint.steps;
        self.nonfinite = checkpoint.nonfinite_gradients;
        let groups = std::mem::take(&mut self.shuffle.groups);
        self.shuffle = checkpoint.shuffle.clone();
        self.shuffle.groups = groups;
        self.period_origin = origin;
        self.epoch_noise = checkpoint.epoch_noise_multiplier;
        self.restore_correlated(checkpoint.correlated_noise.as_ref())?;
        self.ledger = ledger;
        self.expected_data = checkpoint
            .fingerprint
            .0
            .get_key_value(&RunField::Dataset)
            .map(|(&field, value)| RunFingerprint([(field, value.clone())].into()));
        self.data_seen = None;
        Ok(())
    }

    /// Where the resumed run's charge periods count from: a cyclic sampler's groups are
    /// not in a production checkpoint, so its resume drew new ones and starts a new cycle
    /// at the checkpoint's step (each record still joins one step per charged cycle); a
    /// seeded run drew its groups again from the seed and keeps the run's cycles.
    fn resumed_origin(&self, checkpoint: &Checkpoint) -> u64 {
        match self.config.sampler {
            crate::sampler::Sampler::CyclicPoisson { .. } if !self.noise.is_reproducible() => {
                checkpoint.steps
            }
            _ => 0,
        }
    }

    /// Refuses a checkpoint inside a charge period (a shuffled epoch, a cycle) when this
    /// run's σ is not the one the period was charged at.
    fn check_resumed_epoch(&self, checkpoint: &Checkpoint, origin: u64) -> Result<()> {
        let (Some((start, next)), Some(p)) = (
            self.charge_period_from(checkpoint.steps, origin),
            self.config.privacy.as_ref(),
        ) else {
            return Ok(());
        };
        if start == checkpoint.steps
            || checkpoint.epoch_noise_multiplier == Some(p.noise_multiplier)
        {
            return Ok(());
        }
        match checkpoint.epoch_noise_multiplier {
            None => Err(Error::Checkpoint {
                path: "(in memory)".into(),
                reason: format!(
                    "step {} is inside a shuffled epoch but the checkpoint does not say what \
                     it was charged at",
                    checkpoint.steps
                ),
            }),
            Some(charged) => Err(Error::EpochBoundary {
                field: "noise_multiplier",
                step: checkpoint.steps,
                epoch_start: start,
                next_boundary: next,
                charged,
                requested: p.noise_multiplier,
            }),
        }
    }

    /// Refuses a checkpoint whose step count implies more charges than its ledger holds
    /// (one per step; one per epoch when shuffled): a lowered count or an emptied ledger
    /// would resume with less spent than was released.
    fn check_steps_paid(&self, checkpoint: &Checkpoint) -> Result<()> {
        let Some(ledger) = &checkpoint.ledger else {
            return Ok(());
        };
        let scheme = self.config.sampler.scheme(self.dataset_size);
        let owed = scheme.charges(checkpoint.steps);
        let paid = ledger
            .entries
            .iter()
            .fold(0u64, |n, e| n.saturating_add(e.count));
        if paid < owed {
            return Err(Error::Checkpoint {
                path: "(in memory)".into(),
                reason: format!(
                    "{} steps need at least {owed} charges but its ledger holds {paid}",
                    checkpoint.steps
                ),
            });
        }
        Ok(())
    }

    /// A seeded run continues the checkpoint's noise stream: refused when this run's seed
    /// is another one (it would be silently ignored).
    fn check_seed(&self, checkpoint: &Checkpoint) -> Result<()> {
        match &checkpoint.noise {
            Some(saved) if self.noise.is_reproducible() && saved.key != self.noise.state().key => {
                Err(Error::ResumeMismatch {
                    field: "seed",
                    checkpoint: "a --seed run".into(),
                    run: "another --seed value".into(),
                    hint: "a seeded resume continues the checkpoint's noise stream; resume \
                           with the --seed the run was started with"
                        .into(),
                })
            }
            _ => Ok(()),
        }
    }

    /// Writes a checkpoint atomically (temporary file, fsync, rename), mode 0600.
    pub fn save_checkpoint(&self, path: &std::path::Path) -> Result<()> {
        self.checkpoint()?.save(path)
    }
}
