//! The privacy engine: sampler → charge reserved on the ledger → fused forward/backward
//! with clipping → noise → charge recorded → update; fail-closed, with a budget enforced
//! on the ledger itself and checkpoints that keep every charge.

use candle_core::{Device, Tensor};
use dp_accounting::{Accountant, BudgetFilter, DynAccountant, Ledger};
use dp_mechanisms::NoiseSource;
use dp_models::data::Dataset;
use dp_models::fused::{ClipRule, FusedModel};
use dp_models::PrivateModel;
use serde::{Deserialize, Serialize};

use crate::config::{GradientNormalisation, Optimizer, PrivacyConfig, TrainConfig};
use crate::error::{Error, Result};
use crate::evaluate::accuracy;
use crate::fingerprint::RunFingerprint;
use crate::sampler::{Sampler, ShuffleState};

mod charges;
mod resume;

/// What one step did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepReport {
    /// Realised batch size (Poisson batches vary and may be empty).
    pub batch_size: usize,
    /// Mean loss over the batch (NaN for an empty batch). Computed from the private batch
    /// without noise: **not covered by ε** (docs/training.md, "What a run releases").
    pub mean_loss: f64,
    /// Samples whose gradient was not finite in this step (zeroed, not clipped). A count
    /// of the private batch: **not covered by ε**.
    pub nonfinite_gradients: usize,
}

/// Trains a fused model with DP-SGD / DP-Adam.
///
/// Fail-closed by construction: the model's clipped sum must cover every parameter, noise
/// is added to all of it, and `step` checks both before touching θ. Non-finite
/// per-sample gradients get clip factor 0 and are counted; non-finite *inputs* are an
/// error naming the record, before anything is charged. Each step's event is charged to
/// the ledger *before* the update is applied, through a [`BudgetFilter`]: a step whose
/// event would take ε past the budget, or that the accountant cannot compose, changes
/// nothing. Every other charge ([`charge`](Self::charge): SA-DPSGD's acceptance tests,
/// resumed steps in the replayed ledger) goes through the same filter.
pub struct PrivacyEngine<M: PrivateModel = FusedModel> {
    model: M,
    config: TrainConfig,
    dataset_size: usize,
    ledger: Option<Charges>,
    max_steps: Option<u64>,
    fingerprint: RunFingerprint,
    data_seen: Option<SeenData>,
    /// The checkpoint's dataset entry, checked at the first step after a resume.
    expected_data: Option<RunFingerprint>,
    noise: NoiseSource,
    moments: Vec<Vec<f32>>,
    steps: u64,
    nonfinite: u64,
    batch: Vec<usize>,
    features: Vec<f32>,
    labels: Vec<u32>,
    physical_batch_size: Option<usize>,
    shuffle: ShuffleState,
    #[cfg(feature = "fault-injection")]
    fault: Option<crate::fault::Fault>,
}

/// The ledger behind its budget filter.
type Charges = BudgetFilter<Box<dyn DynAccountant>>;

/// The dataset the engine has validated and digested (by address and size: a `step` on
/// other data validates again).
struct SeenData {
    address: usize,
    records: usize,
    digest: String,
}

impl<M: PrivateModel> PrivacyEngine<M> {
    /// An engine for `model` on a training set of `dataset_size` records.
    pub fn new(
        model: M,
        config: TrainConfig,
        dataset_size: usize,
        noise: NoiseSource,
    ) -> Result<Self> {
        config.sampler.validate(dataset_size)?;
        let (ledger, max_steps) = match &config.privacy {
            None => (None, None),
            Some(p) => Self::private_ledger(p, config.sampler, dataset_size)?,
        };
        let fingerprint =
            RunFingerprint::of(&config, &model.architecture(), noise.is_reproducible());
        let moments = match config.optimizer {
            Optimizer::Sgd { .. } => vec![vec![0.0; model.num_params()]],
            Optimizer::Adam { .. } => vec![vec![0.0; model.num_params()]; 2],
        };
        Ok(PrivacyEngine {
            model,
            config,
            dataset_size,
            ledger,
            max_steps,
            fingerprint,
            data_seen: None,
            expected_data: None,
            noise,
            moments,
            steps: 0,
            nonfinite: 0,
            batch: Vec::new(),
            features: Vec::new(),
            labels: Vec::new(),
            physical_batch_size: None,
            shuffle: ShuffleState::default(),
            #[cfg(feature = "fault-injection")]
            fault: None,
        })
    }

    /// Processes each logical batch in physical slices of at most `size` samples (to bound
    /// memory); the clipped sums are added before the noise, so the step, and its privacy,
    /// are those of the whole logical batch.
    pub fn set_physical_batch_size(&mut self, size: usize) -> Result<()> {
        if size == 0 {
            return Err(Error::InvalidConfig(
                "the physical batch size must be >= 1".into(),
            ));
        }
        self.physical_batch_size = Some(size);
        Ok(())
    }

    /// The model.
    pub fn model(&self) -> &M {
        &self.model
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Sets the learning rate of the update rule from the next step on (step-size
    /// schedules). The rate is not part of the privacy analysis: the update is a
    /// post-processing of the noisy sum.
    pub fn set_learning_rate(&mut self, lr: f64) -> Result<()> {
        if !(lr.is_finite() && lr >= 0.0) {
            return Err(Error::InvalidConfig(format!(
                "learning rate {lr} must be finite and >= 0"
            )));
        }
        match &mut self.config.optimizer {
            Optimizer::Sgd { lr: current, .. } | Optimizer::Adam { lr: current, .. } => {
                *current = lr;
            }
        }
        Ok(())
    }

    /// Sets σ from the next step on; the ledger records every step with its own σ and the
    /// budget is enforced on it. Refused for non-private runs, and inside a shuffled
    /// epoch (its charge, made at the epoch's first step, assumed the σ then in force).
    pub fn set_noise_multiplier(&mut self, noise_multiplier: f64) -> Result<()> {
        if !(noise_multiplier.is_finite() && noise_multiplier > 0.0) {
            return Err(Error::InvalidConfig(format!(
                "noise multiplier {noise_multiplier} must be > 0"
            )));
        }
        match &mut self.config.privacy {
            None => Err(Error::InvalidConfig(
                "a non-private run has no noise multiplier to change".into(),
            )),
            Some(_)
                if matches!(self.config.sampler, Sampler::Shuffle { .. })
                    && !self.steps.is_multiple_of(
                        self.config.sampler.steps_per_epoch(self.dataset_size) as u64,
                    ) =>
            {
                Err(Error::InvalidConfig(
                    "the noise multiplier of a shuffled run can only change at an epoch boundary"
                        .into(),
                ))
            }
            Some(p) => {
                p.noise_multiplier = noise_multiplier;
                Ok(())
            }
        }
    }

    /// The configuration in force (after any schedule changes).
    pub fn config(&self) -> &TrainConfig {
        &self.config
    }

    /// The model's parameters and the engine's noise source, for update rules layered on
    /// the engine (DPD's prior term, Gaussian weight dropout).
    pub(crate) fn model_and_noise(&mut self) -> (&M, &mut NoiseSource) {
        (&self.model, &mut self.noise)
    }

    /// The number of steps the budget allows when every step is the sampler's event at
    /// the initial σ, computed once (`None`: no budget). A plan, not the enforcement:
    /// the budget is enforced on the ledger before every step, so extra charges, a
    /// changed σ or a resumed ledger are all counted.
    pub fn max_steps(&self) -> Option<u64> {
        self.max_steps
    }

    /// Non-finite per-sample gradients zeroed so far.
    pub fn nonfinite_gradients(&self) -> u64 {
        self.nonfinite
    }

    /// ε spent so far at the configured δ (`None` for non-private runs).
    pub fn epsilon(&self) -> Result<Option<f64>> {
        match &self.ledger {
            Some(filter) => Ok(Some(filter.spent()?)),
            None => Ok(None),
        }
    }

    /// The ledger (`None` for non-private runs).
    pub fn ledger(&self) -> Option<&Ledger> {
        self.ledger.as_ref().map(|f| f.accountant().ledger())
    }

    /// The accountant holding the ledger (`None` for non-private runs).
    pub fn accountant(&self) -> Option<&dyn Accountant> {
        self.ledger
            .as_ref()
            .map(|f| f.accountant() as &dyn Accountant)
    }

    /// Validates `data` (sizes, labels, finite features; [`Dataset::validate`]) and
    /// digests it the first time the engine sees it; a resumed engine also checks the
    /// digest against the checkpoint's.
    fn check_data(&mut self, data: &Dataset) -> Result<()> {
        if data.len() != self.dataset_size {
            return Err(Error::InvalidConfig(format!(
                "the engine was built for {} records, got {}",
                self.dataset_size,
                data.len()
            )));
        }
        let address = data.features.as_ptr() as usize;
        if let Some(seen) = &self.data_seen {
            if seen.address == address && seen.records == data.len() {
                return Ok(());
            }
        }
        data.validate()?;
        let digest = data.digest();
        if let Some(expected) = &self.expected_data {
            let run = RunFingerprint::default().with_dataset(data.len(), &digest);
            expected.check_resume(&run, &[])?;
        }
        self.data_seen = Some(SeenData {
            address,
            records: data.len(),
            digest,
        });
        Ok(())
    }

    /// One training step on `data` (which must have `dataset_size` records): the charge
    /// is reserved first ([`Error::BudgetExhausted`] if it does not fit), recorded once
    /// the noisy gradient is ready, and only then is θ updated.
    pub fn step(&mut self, data: &Dataset) -> Result<StepReport> {
        self.check_data(data)?;
        let reservation = self.reserve_step()?;
        let n = self.dataset_size;
        self.config
            .sampler
            .draw(n, &mut self.noise, &mut self.shuffle, &mut self.batch);
        let b = self.batch.len();
        let (mut gradient, loss_sum, nonfinite) = self.clipped_sum(data)?;
        if let Some(p) = &self.config.privacy {
            let std = p.noise_multiplier * p.sensitivity();
            #[cfg(feature = "fault-injection")]
            let std = crate::fault::noise_std(self.fault, std);
            self.noise.add_gaussian_f32(&mut gradient, std);
        }
        if let Some(bad) = gradient.iter().position(|g| !g.is_finite()) {
            return Err(Error::UnprotectedParameter(format!(
                "parameter {bad} has a non-finite noisy gradient"
            )));
        }
        let divisor = match self.config.normalisation {
            GradientNormalisation::ExpectedBatchSize => self.config.sampler.expected_batch_size(n),
            GradientNormalisation::RealisedBatchSize => b as f64,
        };
        let scale = 1.0 / divisor.max(1.0);
        gradient.iter_mut().for_each(|g| *g *= scale as f32);
        if let (Some(filter), Some(reservation)) = (&mut self.ledger, reservation) {
            filter.commit(reservation)?;
        }
        self.apply_update(&gradient)?;
        self.steps += 1;
        self.nonfinite += nonfinite as u64;
        Ok(StepReport {
            batch_size: b,
            mean_loss: if b == 0 {
                f64::NAN
            } else {
                loss_sum / b as f64
            },
            nonfinite_gradients: nonfinite,
        })
    }

    /// The clipped gradient sum of the drawn batch, in physical slices; fail-closed: every
    /// slice's sum must cover every parameter. Also the loss sum and the count of
    /// non-finite per-example gradients (neither is covered by ε: see [`StepReport`]).
    fn clipped_sum(&mut self, data: &Dataset) -> Result<(Vec<f32>, f64, usize)> {
        let p_count = self.model.num_params();
        let rule = self.clip_rule();
        let physical = self.physical_batch_size.unwrap_or(usize::MAX).max(1);
        let mut gradient = vec![0.0f32; p_count];
        let (mut loss_sum, mut nonfinite) = (0.0f64, 0usize);
        let size = data.example_size();
        for slice in self.batch.chunks(physical) {
            self.features.clear();
            self.labels.clear();
            for &i in slice {
                self.features
                    .extend_from_slice(&data.features[i * size..][..size]);
                self.labels.push(data.labels[i]);
            }
            let x = Tensor::from_slice(&self.features, (slice.len(), size), &Device::Cpu)?;
            let clipped = self
                .model
                .clipped_gradient(&x, &self.labels, data.classes, rule)?;
            if clipped.sum.len() != p_count {
                return Err(Error::UnprotectedParameter(format!(
                    "the model's clipped sum covers {} of its {p_count} parameters",
                    clipped.sum.len()
                )));
            }
            gradient
                .iter_mut()
                .zip(&clipped.sum)
                .for_each(|(g, s)| *g += s);
            nonfinite += clipped
                .squared_norms
                .iter()
                .filter(|v| !v.is_finite())
                .count();
            loss_sum += clipped.losses.iter().map(|&l| f64::from(l)).sum::<f64>();
        }
        Ok((gradient, loss_sum, nonfinite))
    }

    #[cfg(feature = "fault-injection")]
    pub(crate) fn set_fault(&mut self, fault: Option<crate::fault::Fault>) {
        self.fault = fault;
    }

    /// The clipping rule in force (none for a non-private run).
    fn clip_rule(&self) -> ClipRule {
        let rule = self
            .config
            .privacy
            .as_ref()
            .map_or(ClipRule::None, PrivacyConfig::clip_rule);
        #[cfg(feature = "fault-injection")]
        let rule = crate::fault::clip_rule(self.fault, rule);
        rule
    }

    /// θ and the optimiser moments, to undo an update (SA-DPSGD's rejections).
    pub(crate) fn optimizer_snapshot(&self) -> Result<(Vec<f32>, Vec<Vec<f32>>)> {
        Ok((self.model.parameters()?, self.moments.clone()))
    }

    /// Puts back a snapshot (the ledger keeps the step: it did touch the data).
    pub(crate) fn restore_optimizer(&mut self, saved: (Vec<f32>, Vec<Vec<f32>>)) -> Result<()> {
        self.model.set_parameters(&saved.0)?;
        self.moments = saved.1;
        Ok(())
    }

    /// The indices of the last step's batch.
    pub(crate) fn last_batch(&self) -> &[usize] {
        &self.batch
    }

    /// A batch drawn with the engine's sampler, outside the training sequence.
    pub(crate) fn draw_extra_batch(&mut self, n: usize) -> Vec<usize> {
        self.draw_with(self.config.sampler, n)
    }

    /// A batch drawn with `sampler` from the engine's noise source.
    pub(crate) fn draw_with(&mut self, sampler: Sampler, n: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut shuffle = ShuffleState::default();
        sampler.draw(n, &mut self.noise, &mut shuffle, &mut out);
        out
    }

    /// Adds Gaussian noise of standard deviation `std` to `value`.
    pub(crate) fn gaussian(&mut self, std: f64) -> f64 {
        std * self.noise.standard_normal()
    }

    /// A uniform draw from the engine's noise source.
    pub(crate) fn uniform(&mut self) -> f64 {
        self.noise.uniform()
    }

    fn apply_update(&mut self, gradient: &[f32]) -> Result<()> {
        let mut theta = self.model.parameters()?;
        match self.config.optimizer {
            Optimizer::Sgd { lr, momentum } => {
                let v = &mut self.moments[0];
                for ((t, vi), &g) in theta.iter_mut().zip(v.iter_mut()).zip(gradient) {
                    *vi = momentum as f32 * *vi + g;
                    *t -= lr as f32 * *vi;
                }
            }
            Optimizer::Adam {
                lr,
                beta1,
                beta2,
                eps,
            } => {
                let step = (self.steps + 1) as i32;
                let (c1, c2) = (1.0 - beta1.powi(step), 1.0 - beta2.powi(step));
                let (m, rest) = self.moments.split_at_mut(1);
                for (((t, mi), vi), &g) in theta
                    .iter_mut()
                    .zip(m[0].iter_mut())
                    .zip(rest[0].iter_mut())
                    .zip(gradient)
                {
                    *mi = beta1 as f32 * *mi + (1.0 - beta1 as f32) * g;
                    *vi = beta2 as f32 * *vi + (1.0 - beta2 as f32) * g * g;
                    let m_hat = f64::from(*mi) / c1;
                    let v_hat = f64::from(*vi) / c2;
                    *t -= (lr * m_hat / (v_hat.sqrt() + eps)) as f32;
                }
            }
        }
        self.model.set_parameters(&theta)?;
        Ok(())
    }

    /// Test accuracy of the current model.
    pub fn accuracy(&self, data: &Dataset) -> Result<f64> {
        accuracy(&self.model, data)
    }
}
