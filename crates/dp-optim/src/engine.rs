//! The privacy engine: sampler → charge reserved on the ledger → fused forward/backward
//! with clipping → noise → charge recorded → update; fail-closed, with a budget enforced
//! on the ledger itself and checkpoints that keep every charge.

use candle_core::{Device, Tensor};
use dp_accounting::{
    calibrate_steps, Accountant, AccountantKind, Budget, BudgetFilter, DpEvent, DynAccountant,
    Guarantee, Ledger, OrderGrid, Reservation,
};
use dp_mechanisms::NoiseSource;
use dp_models::data::Dataset;
use dp_models::fused::{ClipRule, FusedModel};
use dp_models::loss::argmax_rows;
use dp_models::PrivateModel;
use serde::{Deserialize, Serialize};

use crate::checkpoint::{Checkpoint, CHECKPOINT_FORMAT};
use crate::error::{Error, Result};
use crate::fingerprint::{RunField, RunFingerprint};
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
    expected_data: Option<String>,
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

/// [`dp_accounting::Error::BudgetExceeded`] as the engine's [`Error::BudgetExhausted`].
fn budget_error(e: dp_accounting::Error) -> Error {
    match e {
        dp_accounting::Error::BudgetExceeded {
            epsilon,
            budget_epsilon,
            delta,
        } => Error::BudgetExhausted {
            epsilon,
            budget: budget_epsilon,
            delta,
        },
        other => other.into(),
    }
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

    /// The ledger (behind its budget filter) of a private run, and the planned step
    /// count under a budget. An asymptotic accountant (GDP's CLT) may report but never
    /// enforce a budget: its ε may be below the true value.
    fn private_ledger(
        p: &PrivacyConfig,
        sampler: Sampler,
        n: usize,
    ) -> Result<(Option<Charges>, Option<u64>)> {
        for (name, v) in [
            ("noise multiplier (sigma)", p.noise_multiplier),
            ("max_grad_norm (clip)", p.max_grad_norm),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::InvalidConfig(format!(
                    "{name} is {v}: it must be finite and > 0"
                )));
            }
        }
        let relation = sampler.relation();
        let accountant = p.accountant.build(relation, &p.orders)?;
        // The accountant must accept the sampler's event: a mismatch is an error.
        let step = sampler.step_event(n, p.noise_multiplier);
        accountant.supports(&step)?;
        // Whether ε is a bound can depend on the event (GDP is exact for a Gaussian, a
        // CLT approximation once sampled): ask after one step.
        let mut probe = accountant.boxed_clone();
        probe.compose(&step, 1)?;
        let budget = match p.target_epsilon {
            None => Budget::unbounded(p.delta)?,
            Some(_) if probe.guarantee() == Guarantee::Asymptotic => {
                return Err(Error::InvalidConfig(format!(
                    "the {} accountant's epsilon is asymptotic and may be below the true \
                     value: it can report but not enforce a budget (enforce with rdp or pld)",
                    p.accountant.name()
                )))
            }
            Some(target) => Budget::new(target, p.delta)?,
        };
        let planned = match p.target_epsilon {
            None => None,
            Some(target) => {
                let make = || p.accountant.build(relation, &p.orders);
                let run = |t| sampler.run_event(n, p.noise_multiplier, t);
                Some(calibrate_steps(make, run, target, p.delta)?.value)
            }
        };
        Ok((Some(BudgetFilter::new(accountant, budget)), planned))
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
            let saved = RunFingerprint::default().with_dataset(self.dataset_size, expected);
            saved.check_resume(&run, &[])?;
        }
        self.data_seen = Some(SeenData {
            address,
            records: data.len(),
            digest,
        });
        Ok(())
    }

    /// The dry run of this step's charge (`None`: non-private, or a step that costs
    /// nothing, as inside a shuffled epoch).
    fn reserve_step(&self) -> Result<Option<Reservation<Box<dyn DynAccountant>>>> {
        let (Some(filter), Some(p)) = (&self.ledger, &self.config.privacy) else {
            return Ok(None);
        };
        let event =
            self.config
                .sampler
                .event_at_step(self.dataset_size, p.noise_multiplier, self.steps);
        match event {
            None => Ok(None),
            Some(event) => filter.reserve(&event, 1).map(Some).map_err(budget_error),
        }
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
        #[cfg(feature = "fault-injection")]
        let rule = crate::fault::clip_rule(self.fault, self.clip_rule());
        #[cfg(not(feature = "fault-injection"))]
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
        self.config
            .privacy
            .as_ref()
            .map_or(ClipRule::None, PrivacyConfig::clip_rule)
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

    /// Charges an extra event (e.g. a privatised acceptance test) to the ledger, under
    /// the budget ([`Error::BudgetExhausted`] and no change if it does not fit); an error
    /// for non-private runs, since nothing would record it. Call it *before* releasing
    /// what the event covers.
    pub fn charge(&mut self, event: &DpEvent) -> Result<()> {
        match &mut self.ledger {
            Some(filter) => {
                let reservation = filter.reserve(event, 1).map_err(budget_error)?;
                Ok(filter.commit(reservation)?)
            }
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
    /// (reproducible) run; see [`Checkpoint`] for what a checkpoint reveals.
    pub fn checkpoint(&self) -> Result<Checkpoint> {
        Ok(Checkpoint {
            format: CHECKPOINT_FORMAT,
            fingerprint: self.fingerprint(),
            theta: self.model.parameters()?,
            moments: self.moments.clone(),
            steps: self.steps,
            ledger: self.ledger().cloned(),
            noise: self.noise.is_reproducible().then(|| self.noise.state()),
            nonfinite_gradients: self.nonfinite,
            shuffle: self.shuffle.clone(),
        })
    }

    /// Resumes from a checkpoint of the same run: every setting must match
    /// ([`Error::ResumeMismatch`] names the first that does not). The ledger is replayed
    /// under this run's budget, so every earlier charge counts.
    pub fn restore(&mut self, checkpoint: &Checkpoint) -> Result<()> {
        self.restore_allowing(checkpoint, &[])
    }

    /// [`restore`](Self::restore), accepting changes to the fields in `allowed` that
    /// [may change](RunField::may_change) (a new learning rate, σ, clip or budget).
    pub fn restore_allowing(
        &mut self,
        checkpoint: &Checkpoint,
        allowed: &[RunField],
    ) -> Result<()> {
        checkpoint
            .fingerprint
            .check_resume(&self.fingerprint, allowed)?;
        let fail = |reason: String| Error::Checkpoint {
            path: "(in memory)".into(),
            reason,
        };
        if checkpoint.theta.len() != self.model.num_params()
            || checkpoint.moments.len() != self.moments.len()
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
                self.moments.len()
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
        self.moments = checkpoint.moments.clone();
        self.steps = checkpoint.steps;
        self.nonfinite = checkpoint.nonfinite_gradients;
        self.shuffle = checkpoint.shuffle.clone();
        self.ledger = ledger;
        self.expected_data = checkpoint
            .fingerprint
            .0
            .get(&RunField::Dataset)
            .and_then(|d| d.rsplit(' ').next())
            .map(str::to_string);
        self.data_seen = None;
        Ok(())
    }

    /// Writes a checkpoint atomically (temporary file, fsync, rename), mode 0600.
    pub fn save_checkpoint(&self, path: &std::path::Path) -> Result<()> {
        self.checkpoint()?.save(path)
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
        let logits = model.logits(&x)?;
        if logits.len() != ys.len() * data.classes {
            return Err(Error::InvalidConfig(format!(
                "the model gives {} logits per record, the data has {} classes",
                logits.len() / ys.len().max(1),
                data.classes
            )));
        }
        visit(&logits, ys);
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
