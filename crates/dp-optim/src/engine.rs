//! The privacy engine: sampler → fused forward/backward with clipping → noise → update →
//! ledger, fail-closed, with a budget it never exceeds and atomic checkpoints.

use candle_core::{Device, Tensor};
use dp_accounting::{calibrate_steps, Accountant, AccountantKind, Ledger, OrderGrid};
use dp_mechanisms::{NoiseSource, NoiseState};
use dp_models::data::Dataset;
use dp_models::fused::{ClipRule, FusedModel};
use dp_models::loss::argmax_rows;
use dp_models::PrivateModel;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::sampler::{Sampler, ShuffleState};

/// The update rule applied to the noisy average gradient.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Optimizer {
    /// SGD with (PyTorch-style) momentum: v ← μv + g, θ ← θ − ηv.
    Sgd {
        /// η.
        lr: f64,
        /// μ.
        momentum: f64,
    },
    /// Adam (NoisyAdam when fed noisy gradients), with bias correction.
    Adam {
        /// η.
        lr: f64,
        /// β₁.
        beta1: f64,
        /// β₂.
        beta2: f64,
        /// ε of the denominator.
        eps: f64,
    },
}

/// Everything a training run needs besides the model and the data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// How batches are drawn.
    pub sampler: Sampler,
    /// `None`: non-private training (no clipping, no noise, no accounting).
    pub privacy: Option<PrivacyConfig>,
    /// The update rule.
    pub optimizer: Optimizer,
    /// What the noisy sum is divided by.
    #[serde(default)]
    pub normalisation: GradientNormalisation,
}

/// What the noisy gradient sum `Σᵢ cᵢ∇ᵢ + N(0, σ²C²)` is divided by before the update.
///
/// The choice does not change the accounting event (the noisy *sum* is what the
/// Gaussian mechanism releases), but with [`GradientNormalisation::RealisedBatchSize`]
/// the update also depends on the realised Poisson batch size `|I_t|`, a count that the
/// sampled-Gaussian analysis does not cover (it is not noised). It is offered because
/// the GDP paper's code does it (`shared/spec/papers.md` §3.1); the default is the
/// expected batch size, as in Opacus.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GradientNormalisation {
    /// Divide by the sampler's expected batch size (`qn` for Poisson): the update is a
    /// post-processing of the noisy sum alone.
    #[default]
    ExpectedBatchSize,
    /// Divide by the realised batch size `max(1, |I_t|)` (Bu, Dong, Long & Su's NoisySGD
    /// and NoisyAdam, Algorithms 1–2 as the authors' TF code implements them). Not
    /// covered by the accountant: the realised size leaks through the step length.
    RealisedBatchSize,
}

/// The private part of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrivacyConfig {
    /// σ: the noise standard deviation is σ times the clipping sensitivity.
    pub noise_multiplier: f64,
    /// The clipping norm C (flat and per-layer clipping), or AUTO-S's γ.
    pub max_grad_norm: f64,
    /// How per-example gradients are bounded.
    pub clipping: Clipping,
    /// δ at which ε is reported and the budget is enforced.
    pub delta: f64,
    /// Stop before ε would exceed this (`None`: no budget).
    pub target_epsilon: Option<f64>,
    /// The accountant used for ε and the budget.
    pub accountant: AccountantKind,
    /// Orders for the RDP accountants.
    pub orders: OrderGrid,
}

/// How per-example gradients are bounded before they are summed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Clipping {
    /// `gᵢ·min(1, C/‖gᵢ‖)` (Abadi et al. 2016): sensitivity C.
    Flat,
    /// Each of the L parametric layers clipped to C/√L: sensitivity C.
    PerLayer,
    /// AUTO-S (Bu et al. 2022): `gᵢ/(‖gᵢ‖ + γ)` with γ = `max_grad_norm`: sensitivity 1.
    Automatic,
}

impl PrivacyConfig {
    fn clip_rule(&self) -> ClipRule {
        let c = self.max_grad_norm as f32;
        match self.clipping {
            Clipping::Flat => ClipRule::Flat { max_norm: c },
            Clipping::PerLayer => ClipRule::PerLayer { max_norm: c },
            Clipping::Automatic => ClipRule::Automatic { gamma: c },
        }
    }

    /// The L2 sensitivity of the clipped sum.
    fn sensitivity(&self) -> f64 {
        match self.clipping {
            Clipping::Flat | Clipping::PerLayer => self.max_grad_norm,
            Clipping::Automatic => 1.0,
        }
    }
}

/// What one step did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepReport {
    /// Realised batch size (Poisson batches vary and may be empty).
    pub batch_size: usize,
    /// Mean loss over the batch (NaN for an empty batch).
    pub mean_loss: f64,
    /// Samples whose gradient was not finite in this step (zeroed, not clipped).
    pub nonfinite_gradients: usize,
}

/// A checkpoint: weights, optimizer state, ledger, RNG state and counters.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Checkpoint {
    /// θ (internal layout).
    pub theta: Vec<f32>,
    /// Optimizer moments.
    pub moments: Vec<Vec<f32>>,
    /// Steps taken.
    pub steps: u64,
    /// The privacy ledger.
    pub ledger: Option<Ledger>,
    /// The noise source's state.
    pub noise: NoiseState,
    /// Non-finite per-sample gradients so far.
    pub nonfinite_gradients: u64,
    /// The shuffled sampler's epoch state (empty for other samplers).
    #[serde(default)]
    pub shuffle: ShuffleState,
}

/// Trains a fused model with DP-SGD / DP-Adam.
///
/// Fail-closed by construction: the fused backward returns one clipped sum covering every
/// entry of the single parameter `Var`, noise is added to all of it, and `step` checks
/// both before touching θ. Non-finite per-sample gradients get clip factor 0 and are
/// counted. The budget is enforced *before* a step: the largest number of steps whose ε
/// fits is computed once with the configured accountant.
pub struct PrivacyEngine<M: PrivateModel = FusedModel> {
    model: M,
    config: TrainConfig,
    dataset_size: usize,
    accountant: Option<Box<dyn Accountant + Send>>,
    max_steps: Option<u64>,
    noise: NoiseSource,
    moments: Vec<Vec<f32>>,
    steps: u64,
    nonfinite: u64,
    batch: Vec<usize>,
    features: Vec<f32>,
    labels: Vec<u32>,
    physical_batch_size: Option<usize>,
    shuffle: ShuffleState,
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
        let (accountant, max_steps) = match &config.privacy {
            None => (None, None),
            Some(p) => {
                if !(p.noise_multiplier.is_finite() && p.noise_multiplier > 0.0) {
                    return Err(Error::InvalidConfig(format!(
                        "noise multiplier {} must be > 0",
                        p.noise_multiplier
                    )));
                }
                if !(p.max_grad_norm.is_finite() && p.max_grad_norm > 0.0) {
                    return Err(Error::InvalidConfig(format!(
                        "max_grad_norm {} must be > 0",
                        p.max_grad_norm
                    )));
                }
                let relation = config.sampler.relation();
                let accountant = p.accountant.build(relation, &p.orders)?;
                // The accountant must accept the sampler's event: a mismatch is an error.
                let event = config.sampler.step_event(dataset_size, p.noise_multiplier);
                accountant.supports(&event)?;
                let max_steps = match p.target_epsilon {
                    None => None,
                    Some(target) => {
                        let make = || p.accountant.build(relation, &p.orders);
                        let sampler = config.sampler;
                        let run = |t| sampler.run_event(dataset_size, p.noise_multiplier, t);
                        Some(calibrate_steps(make, run, target, p.delta)?.value)
                    }
                };
                (Some(accountant), max_steps)
            }
        };
        let moments = match config.optimizer {
            Optimizer::Sgd { .. } => vec![vec![0.0; model.num_params()]],
            Optimizer::Adam { .. } => vec![vec![0.0; model.num_params()]; 2],
        };
        Ok(PrivacyEngine {
            model,
            config,
            dataset_size,
            accountant,
            max_steps,
            noise,
            moments,
            steps: 0,
            nonfinite: 0,
            batch: Vec::new(),
            features: Vec::new(),
            labels: Vec::new(),
            physical_batch_size: None,
            shuffle: ShuffleState::default(),
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

    /// Sets σ from the next step on; the ledger records every step with its own σ. Refused
    /// for non-private runs and when a budget is set, since the step limit that enforces
    /// the budget was computed for the initial σ.
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
            Some(p) if p.target_epsilon.is_some() => Err(Error::InvalidConfig(
                "the noise multiplier cannot change under a budget (its step limit assumes the initial one)"
                    .into(),
            )),
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

    /// The largest number of steps the budget allows (`None`: no budget).
    pub fn max_steps(&self) -> Option<u64> {
        self.max_steps
    }

    /// Non-finite per-sample gradients zeroed so far.
    pub fn nonfinite_gradients(&self) -> u64 {
        self.nonfinite
    }

    /// ε spent so far at the configured δ (`None` for non-private runs).
    pub fn epsilon(&self) -> Result<Option<f64>> {
        match (&self.accountant, &self.config.privacy) {
            (Some(a), Some(p)) => Ok(Some(a.epsilon(p.delta)?)),
            _ => Ok(None),
        }
    }

    /// The ledger (`None` for non-private runs).
    pub fn ledger(&self) -> Option<&Ledger> {
        self.accountant.as_ref().map(|a| a.ledger())
    }

    /// One training step on `data` (which must have `dataset_size` records).
    pub fn step(&mut self, data: &Dataset) -> Result<StepReport> {
        if data.len() != self.dataset_size {
            return Err(Error::InvalidConfig(format!(
                "the engine was built for {} records, got {}",
                self.dataset_size,
                data.len()
            )));
        }
        if let Some(max) = self.max_steps {
            if self.steps >= max {
                let p = self
                    .config
                    .privacy
                    .as_ref()
                    .ok_or_else(|| Error::InvalidConfig("budget without privacy".into()))?;
                return Err(Error::BudgetExhausted {
                    epsilon: f64::NAN,
                    budget: p.target_epsilon.unwrap_or(f64::NAN),
                    delta: p.delta,
                });
            }
        }
        let n = self.dataset_size;
        let p_count = self.model.num_params();
        self.config
            .sampler
            .draw(n, &mut self.noise, &mut self.shuffle, &mut self.batch);
        let b = self.batch.len();
        let rule = self
            .config
            .privacy
            .as_ref()
            .map_or(ClipRule::None, PrivacyConfig::clip_rule);
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
            let m = slice.len();
            let x = Tensor::from_slice(&self.features, (m, size), &Device::Cpu)?;
            let clipped = self
                .model
                .clipped_gradient(&x, &self.labels, data.classes, rule)?;
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
        let mean_loss = if b == 0 {
            f64::NAN
        } else {
            loss_sum / b as f64
        };
        if let Some(p) = &self.config.privacy {
            self.noise
                .add_gaussian_f32(&mut gradient, p.noise_multiplier * p.sensitivity());
        }
        // Fail closed: one clipped, noised, finite gradient for every entry of θ.
        if gradient.len() != p_count {
            return Err(Error::UnprotectedParameter(format!(
                "{} of {p_count} parameters have a gradient",
                gradient.len()
            )));
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
        self.apply_update(&gradient)?;
        if let Some(accountant) = &mut self.accountant {
            let p = self
                .config
                .privacy
                .as_ref()
                .ok_or_else(|| Error::InvalidConfig("accountant without privacy".into()))?;
            if let Some(event) =
                self.config
                    .sampler
                    .event_at_step(n, p.noise_multiplier, self.steps)
            {
                accountant.compose(&event, 1)?;
            }
        }
        self.steps += 1;
        self.nonfinite += nonfinite as u64;
        Ok(StepReport {
            batch_size: b,
            mean_loss,
            nonfinite_gradients: nonfinite,
        })
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

    /// Charges an extra event (e.g. a privatised acceptance test) to the ledger; an
    /// error for non-private runs, since nothing would record it.
    pub(crate) fn charge(&mut self, event: &dp_accounting::DpEvent) -> Result<()> {
        match &mut self.accountant {
            Some(a) => Ok(a.compose(event, 1)?),
            None => Err(Error::InvalidConfig(
                "a private test in a non-private run has no ledger to charge".into(),
            )),
        }
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

    /// The state to write to a checkpoint.
    pub fn checkpoint(&self) -> Result<Checkpoint> {
        Ok(Checkpoint {
            theta: self.model.parameters()?,
            moments: self.moments.clone(),
            steps: self.steps,
            ledger: self.ledger().cloned(),
            noise: self.noise.state(),
            nonfinite_gradients: self.nonfinite,
            shuffle: self.shuffle.clone(),
        })
    }

    /// Resumes from a checkpoint (same config and model architecture): the ledger is
    /// replayed, so the budget already spent is kept.
    pub fn restore(&mut self, checkpoint: &Checkpoint) -> Result<()> {
        self.model.set_parameters(&checkpoint.theta)?;
        self.moments = checkpoint.moments.clone();
        self.steps = checkpoint.steps;
        self.nonfinite = checkpoint.nonfinite_gradients;
        self.shuffle = checkpoint.shuffle.clone();
        self.noise = NoiseSource::restore(&checkpoint.noise);
        if let (Some(p), Some(ledger)) = (&self.config.privacy, &checkpoint.ledger) {
            let mut fresh = p
                .accountant
                .build(self.config.sampler.relation(), &p.orders)?;
            ledger.replay(&mut fresh)?;
            self.accountant = Some(fresh);
        }
        Ok(())
    }

    /// Writes a checkpoint atomically (temporary file, fsync, rename).
    pub fn save_checkpoint(&self, path: &std::path::Path) -> Result<()> {
        let fail = |reason: String| Error::Checkpoint {
            path: path.display().to_string(),
            reason,
        };
        let json = serde_json::to_vec(&self.checkpoint()?).map_err(|e| fail(e.to_string()))?;
        let tmp = path.with_extension("tmp");
        {
            use std::io::Write;
            let mut file = std::fs::File::create(&tmp).map_err(|e| fail(e.to_string()))?;
            file.write_all(&json).map_err(|e| fail(e.to_string()))?;
            file.sync_all().map_err(|e| fail(e.to_string()))?;
        }
        std::fs::rename(&tmp, path).map_err(|e| fail(e.to_string()))
    }
}

impl Checkpoint {
    /// Reads a checkpoint written by [`PrivacyEngine::save_checkpoint`].
    pub fn load(path: &std::path::Path) -> Result<Self> {
        let fail = |reason: String| Error::Checkpoint {
            path: path.display().to_string(),
            reason,
        };
        let bytes = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
        serde_json::from_slice(&bytes).map_err(|e| fail(e.to_string()))
    }
}

/// Calls `visit(logits, labels)` for `data` in batches of 1000 examples.
pub(crate) fn for_each_logit_batch<M: PrivateModel>(
    model: &M,
    data: &Dataset,
    mut visit: impl FnMut(&[f32], &[u32]),
) -> Result<()> {
    let size = data.example_size();
    for (xs, ys) in data
        .features
        .chunks(1000 * size)
        .zip(data.labels.chunks(1000))
    {
        let x = Tensor::from_slice(xs, (ys.len(), size), &Device::Cpu)?;
        visit(&model.logits(&x)?, ys);
    }
    Ok(())
}

/// Accuracy of `model` on `data`.
pub fn accuracy<M: PrivateModel>(model: &M, data: &Dataset) -> Result<f64> {
    let mut correct = 0usize;
    for_each_logit_batch(model, data, |logits, labels| {
        correct += argmax_rows(logits, data.classes)
            .iter()
            .zip(labels)
            .filter(|(p, y)| p == y)
            .count();
    })?;
    Ok(correct as f64 / data.len().max(1) as f64)
}

/// Root-mean-square error of the softmax expectation `Σₖ k·softmax(z)ₖ` against the label
/// index — the GDP paper's MovieLens metric (labels are ratings − 1).
pub fn expected_class_rmse<M: PrivateModel>(model: &M, data: &Dataset) -> Result<f64> {
    let mut squared = 0.0f64;
    for_each_logit_batch(model, data, |logits, labels| {
        for (row, &y) in logits.chunks(data.classes).zip(labels) {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let weights: Vec<f64> = row.iter().map(|&z| f64::from(z - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            let mean = weights
                .iter()
                .enumerate()
                .map(|(k, w)| k as f64 * w)
                .sum::<f64>()
                / total;
            squared += (mean - f64::from(y)).powi(2);
        }
    })?;
    Ok((squared / data.len().max(1) as f64).sqrt())
}
