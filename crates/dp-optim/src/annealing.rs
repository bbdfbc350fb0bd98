//! SA-DPSGD (Fu, Chen, Ling et al. 2022, arXiv 2211.07218): DP-SGD whose noisy update is
//! kept or undone by a simulated-annealing test (`docs/reproduction/sa-dpsgd.md`, "Eq. (3) and Algorithm 2, reconstructed").
//!
//! After each DP-SGD step the energy (mean cross-entropy) of the new weights is compared
//! with a reference energy: the update is accepted when `ΔE ≤ 0`, otherwise with
//! probability `exp(−ΔE·Q₀·τ)` (the paper's Eq. 3: the temperature `Q = Q₀·τ` multiplies
//! rather than divides, τ = accepted updates so far), and always after `μ₀` consecutive
//! rejections. A rejected update is undone (weights and optimiser moments).
//!
//! **Privacy.** The paper (its Theorem 1) charges only the τ accepted steps. That is not
//! a differential-privacy guarantee when the energy reads private data: every iteration,
//! accepted or not, touches a sampled batch, and the accept/reject bit depends on the
//! private losses with unbounded sensitivity. [`PrivacyEngine`]'s own ledger therefore
//! charges every iteration (the sound count when the energy comes from public data);
//! with private energy even that is a lower bound, which
//! [`AnnealedAccounting::conservative_is_sound`] reports. The paper's τ-step ε is
//! available beside it, labelled as the paper's claim.

use dp_accounting::{Accountant, AccountantKind, DpEvent, NeighbouringRelation, OrderGrid};
use dp_mechanisms::GaussianMechanism;
use dp_models::data::Dataset;
use dp_models::loss::cross_entropy;
use dp_models::Classifier;
use serde::{Deserialize, Serialize};

use crate::algorithm::Algorithm;
use crate::engine::{ExtraBatch, PrivacyEngine, StepReport};
use crate::error::{Error, Result};
use crate::sampler::Sampler;
use dp_accounting::validate;

/// Where the energy J(w_new) is evaluated (the paper does not say).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EnergySource {
    /// The minibatch the update was computed on (cheapest; private data).
    #[default]
    SameBatch,
    /// A fresh minibatch drawn with the same sampler (private data).
    FreshBatch,
    /// A held-out public set ([`SaDpsgd::public`]).
    Public,
    /// A privatised test on private data, as the authors' later DPSUR work does: a fresh
    /// Poisson batch (rate q), per-example loss differences `ℓᵢ(w_new) − ℓᵢ(w_old)`
    /// clipped to [−C_v, C_v], their sum plus `N(0, σ_v²C_v²)`, divided by the expected
    /// batch size. The sum has sensitivity C_v under add/remove-one, so each test is a
    /// Poisson-subsampled Gaussian mechanism with noise multiplier σ_v, charged to the
    /// ledger; the decision is post-processing of it.
    Privatised {
        /// Sampling rate of the validation batch.
        sampling_rate: f64,
        /// C_v > 0: the bound each per-example loss difference is clipped to.
        clip: f64,
        /// σ_v > 0: the test's noise standard deviation over C_v.
        noise_multiplier: f64,
    },
}

/// Which earlier energy ΔE is measured against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EnergyReference {
    /// The energy of the last accepted update.
    #[default]
    LastAccepted,
    /// The energy computed at the previous iteration, accepted or not.
    PreviousIteration,
}

/// SA-DPSGD's settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnnealingConfig {
    /// Q₀, the initial temperature (ablation default 10).
    pub initial_temperature: f64,
    /// μ₀: accept anyway after this many consecutive rejections (default 10).
    pub max_rejections: u32,
    /// Where the energy is evaluated.
    #[serde(default)]
    pub energy: EnergySource,
    /// What ΔE is measured against.
    #[serde(default)]
    pub reference: EnergyReference,
}

impl Default for AnnealingConfig {
    fn default() -> Self {
        AnnealingConfig {
            initial_temperature: 10.0,
            max_rejections: 10,
            energy: EnergySource::SameBatch,
            reference: EnergyReference::LastAccepted,
        }
    }
}

/// The counters of a run: t iterations, τ accepted, μ consecutive rejections.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AnnealingState {
    /// Iterations t.
    pub iterations: u64,
    /// Accepted updates τ.
    pub accepted: u64,
    /// Consecutive rejections μ.
    pub rejections: u32,
    /// Accepted because μ reached μ₀.
    pub forced: u64,
    /// Energy of the last accepted update.
    pub accepted_energy: Option<f64>,
    /// Energy of the previous iteration.
    pub previous_energy: Option<f64>,
}

impl AnnealingState {
    /// τ/t, the acceptance rate.
    pub fn acceptance_rate(&self) -> f64 {
        self.accepted as f64 / self.iterations.max(1) as f64
    }
}

/// The verdict of one acceptance test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    /// ΔE ≤ 0 (or no reference energy yet).
    Improved,
    /// ΔE > 0, accepted with probability exp(−ΔE·Q₀·τ).
    AcceptedUphill,
    /// Accepted because μ reached μ₀.
    Forced,
    /// Rejected: the update was undone.
    Rejected,
}

impl Decision {
    /// Whether the update stays.
    pub fn accepted(self) -> bool {
        self != Decision::Rejected
    }
}

/// The paper's Eq. 3: 1 if ΔE ≤ 0, else `exp(−ΔE·Q₀·τ)` (so 1 while τ = 0).
pub fn acceptance_probability(delta_energy: f64, initial_temperature: f64, accepted: u64) -> f64 {
    if delta_energy <= 0.0 {
        1.0
    } else {
        (-delta_energy * initial_temperature * accepted as f64).exp()
    }
}

/// The acceptance test on ΔE (`None`: no reference energy yet) with uniform `u` ∈ [0, 1).
pub fn decide(
    config: &AnnealingConfig,
    state: &AnnealingState,
    delta_energy: Option<f64>,
    u: f64,
) -> Decision {
    if state.rejections >= config.max_rejections {
        return Decision::Forced;
    }
    match delta_energy {
        None => Decision::Improved,
        Some(d) if d <= 0.0 => Decision::Improved,
        Some(d) => {
            if u < acceptance_probability(d, config.initial_temperature, state.accepted) {
                Decision::AcceptedUphill
            } else {
                Decision::Rejected
            }
        }
    }
}

/// What one annealed iteration did.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnnealedStep {
    /// The verdict.
    pub decision: Decision,
    /// J(w_new).
    pub energy: f64,
    /// ΔE (`None` on the first iteration).
    pub delta_energy: Option<f64>,
    /// The realised batch size of the DP-SGD step.
    pub batch_size: usize,
    /// Mean loss of the batch before the update (**not covered by ε**).
    pub mean_loss: f64,
    /// Non-finite per-example gradients in the batch (**not covered by ε**).
    pub nonfinite_gradients: usize,
}

/// Per-example cross-entropy of `model` on the examples `indices` of `data`.
fn example_losses<M: Classifier>(model: &M, data: &Dataset, indices: &[usize]) -> Result<Vec<f64>> {
    let size = data.example_size();
    let mut out = Vec::with_capacity(indices.len());
    for chunk in indices.chunks(1000) {
        let mut features = Vec::with_capacity(chunk.len() * size);
        let mut labels = Vec::with_capacity(chunk.len());
        for &i in chunk {
            features.extend_from_slice(&data.features[i * size..][..size]);
            labels.push(data.labels[i]);
        }
        let x = candle_core::Tensor::from_vec(
            features,
            (chunk.len(), size),
            &candle_core::Device::Cpu,
        )?;
        let (losses, _) = cross_entropy(&model.logits(&x)?, &labels, data.classes);
        out.extend(losses.iter().map(|&l| f64::from(l)));
    }
    Ok(out)
}

/// Mean cross-entropy of `model` on the examples `indices` of `data` (all if `None`);
/// NaN for no examples.
fn mean_energy<M: Classifier>(model: &M, data: &Dataset, indices: Option<&[usize]>) -> Result<f64> {
    let all: Vec<usize>;
    let indices = match indices {
        Some(i) => i,
        None => {
            all = (0..data.len()).collect();
            &all
        }
    };
    let losses = example_losses(model, data, indices)?;
    Ok(losses.iter().sum::<f64>() / losses.len() as f64)
}

/// SA-DPSGD as an [`Algorithm`]: its settings, its counters (checkpoint them with the
/// engine's checkpoint to resume a run) and, for [`EnergySource::Public`], the public set.
#[derive(Clone, Debug)]
pub struct SaDpsgd<'a> {
    /// The acceptance settings.
    pub config: AnnealingConfig,
    /// t, τ, μ and the reference energies so far.
    pub state: AnnealingState,
    /// The held-out public set that [`EnergySource::Public`] evaluates the energy on.
    pub public: Option<&'a Dataset>,
}

/// The privatised test's settings after validation, and the per-example losses of θ_old
/// on its batch.
struct Validation {
    batch: ExtraBatch,
    before: Vec<f64>,
    sampling_rate: f64,
    mechanism: GaussianMechanism,
}

impl<'a> SaDpsgd<'a> {
    /// A fresh run with `config` (and the public set, for [`EnergySource::Public`]).
    pub fn new(config: AnnealingConfig, public: Option<&'a Dataset>) -> Self {
        SaDpsgd {
            config,
            state: AnnealingState::default(),
            public,
        }
    }

    /// One SA-DPSGD iteration: a DP-SGD step (charged to the ledger like any step), the
    /// energy of the new weights, the acceptance test, and the rollback of a rejected
    /// update.
    pub fn step_annealed<M: Classifier>(
        &mut self,
        engine: &mut PrivacyEngine<M>,
        data: &Dataset,
    ) -> Result<AnnealedStep> {
        let saved = engine.snapshot()?;
        let validation = self.start_validation(engine, data)?;
        let (report, batch) = engine.step_with_batch(data)?;
        let (energy, delta_energy) = match validation {
            Some(v) => (f64::NAN, Some(privatised_delta(engine, data, v)?)),
            None => {
                let energy = self.energy(engine, data, batch.indices())?;
                let reference = match self.config.reference {
                    EnergyReference::LastAccepted => self.state.accepted_energy,
                    EnergyReference::PreviousIteration => self.state.previous_energy,
                };
                // An empty batch has no energy: no information (ΔE unknown).
                (
                    energy,
                    reference.filter(|_| energy.is_finite()).map(|r| energy - r),
                )
            }
        };
        let u = engine.noise_source().uniform();
        let decision = decide(&self.config, &self.state, delta_energy, u);
        self.record(decision, energy);
        if !decision.accepted() {
            engine.rollback(saved)?;
        }
        Ok(AnnealedStep {
            decision,
            energy,
            delta_energy,
            batch_size: report.batch_size,
            mean_loss: report.mean_loss,
            nonfinite_gradients: report.nonfinite_gradients,
        })
    }

    /// For the privatised test: its validated settings, a fresh Poisson batch and the
    /// per-example losses of the current weights on it (before the update).
    fn start_validation<M: Classifier>(
        &self,
        engine: &mut PrivacyEngine<M>,
        data: &Dataset,
    ) -> Result<Option<Validation>> {
        let EnergySource::Privatised {
            sampling_rate,
            clip,
            noise_multiplier,
        } = self.config.energy
        else {
            return Ok(None);
        };
        validate::rate("energy.sampling_rate", sampling_rate)?;
        validate::positive("energy.clip", clip)?;
        validate::positive("energy.noise_multiplier", noise_multiplier)?;
        let batch = engine.draw_extra_batch(Sampler::Poisson { sampling_rate });
        let before = example_losses(engine.model(), data, batch.indices())?;
        Ok(Some(Validation {
            batch,
            before,
            sampling_rate,
            mechanism: GaussianMechanism::new(clip, noise_multiplier)?,
        }))
    }

    /// J(w_new) on the energy source the configuration names.
    fn energy<M: Classifier>(
        &self,
        engine: &mut PrivacyEngine<M>,
        data: &Dataset,
        batch: &[usize],
    ) -> Result<f64> {
        match self.config.energy {
            EnergySource::SameBatch => mean_energy(engine.model(), data, Some(batch)),
            EnergySource::FreshBatch => {
                let fresh = engine.draw_extra_batch(engine.config().sampler);
                mean_energy(engine.model(), data, Some(fresh.indices()))
            }
            EnergySource::Public => {
                let public = self.public.ok_or_else(|| Error::InvalidSetting {
                    name: "energy",
                    value: "public".into(),
                    reason: "public energy needs a public dataset".into(),
                })?;
                mean_energy(engine.model(), public, None)
            }
            EnergySource::Privatised { .. } => Err(Error::InvalidSetting {
                name: "energy",
                value: "privatised".into(),
                reason: "the privatised test has no energy of its own".into(),
            }),
        }
    }

    /// Updates the counters after `decision`.
    fn record(&mut self, decision: Decision, energy: f64) {
        let state = &mut self.state;
        state.iterations += 1;
        state.previous_energy = Some(energy).filter(|e| e.is_finite());
        if decision.accepted() {
            state.accepted += 1;
            state.rejections = 0;
            if decision == Decision::Forced {
                state.forced += 1;
            }
            if energy.is_finite() {
                state.accepted_energy = Some(energy);
            }
        } else {
            state.rejections += 1;
        }
    }
}

/// The privatised ΔE: per-example loss differences on the validation batch clipped to
/// [−C_v, C_v], summed, released through the Gaussian mechanism (sensitivity C_v under
/// add/remove-one, Poisson-sampled: charged before the noise is drawn), over the
/// expected batch size.
fn privatised_delta<M: Classifier>(
    engine: &mut PrivacyEngine<M>,
    data: &Dataset,
    v: Validation,
) -> Result<f64> {
    let after = example_losses(engine.model(), data, v.batch.indices())?;
    let clip = v.mechanism.sensitivity();
    let sum: f64 = v
        .before
        .iter()
        .zip(&after)
        .map(|(b, a)| (a - b).clamp(-clip, clip))
        .sum();
    let noisy = engine.release_value(sum, &v.mechanism, &v.batch)?;
    Ok(noisy / (v.sampling_rate * data.len() as f64).max(1.0))
}

impl<M: Classifier> Algorithm<M> for SaDpsgd<'_> {
    fn step(&mut self, engine: &mut PrivacyEngine<M>, data: &Dataset) -> Result<StepReport> {
        let step = self.step_annealed(engine, data)?;
        Ok(StepReport {
            batch_size: step.batch_size,
            mean_loss: step.mean_loss,
            nonfinite_gradients: step.nonfinite_gradients,
        })
    }
}

/// Both ε of an SA-DPSGD run, with what each assumes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnnealedAccounting {
    /// The paper's Theorem 1: the sampled Gaussian over the τ accepted steps, classic
    /// conversion, α ∈ {2..64}. Not a valid guarantee with any energy source, public
    /// energy included: every iteration reads a fresh private batch and releases a noisy
    /// gradient, and a rejected update still shapes the trajectory (the next iterate, the
    /// counters, which steps follow), so the rejected iterations must be charged too;
    /// with private energy the acceptance bits cost more on top. Reported for comparison
    /// with the paper only; [`all_steps_epsilon`](Self::all_steps_epsilon) is the bound.
    pub paper_epsilon: f64,
    /// The engine's ledger: every iteration t, plus every privatised acceptance test.
    pub all_steps_epsilon: f64,
    /// Whether `all_steps_epsilon` is a DP guarantee: when the energy reads public data
    /// or the test is privatised; with private, un-noised energy the acceptance bits add
    /// an unbounded cost.
    pub conservative_is_sound: bool,
}

/// The paper's and the all-steps ε after `state`, for a Poisson sampler.
pub fn annealed_accounting(
    sampler: &Sampler,
    dataset_size: usize,
    noise_multiplier: f64,
    delta: f64,
    config: &AnnealingConfig,
    state: &AnnealingState,
) -> Result<AnnealedAccounting> {
    let epsilon = |steps: u64, tests: u64| -> Result<f64> {
        if steps == 0 {
            return Ok(0.0);
        }
        let mut a = AccountantKind::RdpClassic
            .build(NeighbouringRelation::AddOrRemoveOne, &OrderGrid::Int2To64)?;
        a.compose(
            &sampler
                .scheme(dataset_size)
                .gaussian_run_event(noise_multiplier, steps),
            1,
        )?;
        if let EnergySource::Privatised {
            sampling_rate,
            noise_multiplier,
            ..
        } = config.energy
        {
            if tests > 0 {
                a.compose(&DpEvent::dp_sgd(sampling_rate, noise_multiplier, tests), 1)?;
            }
        }
        Ok(a.epsilon(delta)?)
    };
    if !matches!(sampler, Sampler::Poisson { .. }) {
        return Err(Error::InvalidSetting {
            name: "sampler",
            value: format!("{sampler:?}"),
            reason: "SA-DPSGD's accounting is stated for Poisson sampling".into(),
        });
    }
    Ok(AnnealedAccounting {
        paper_epsilon: epsilon(state.accepted, 0)?,
        all_steps_epsilon: epsilon(state.iterations, state.iterations)?,
        conservative_is_sound: matches!(
            config.energy,
            EnergySource::Public | EnergySource::Privatised { .. }
        ),
    })
}
