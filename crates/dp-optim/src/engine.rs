//! The privacy engine: the model, its ledger behind a budget filter, the noise source
//! and the optimiser state of one private training run. Its public steps (`step.rs`:
//! reserve the charge, draw a batch, clip, release through the Gaussian mechanism,
//! update) are what every [`Algorithm`](crate::Algorithm) is written with; fail-closed,
//! with a budget enforced on the ledger itself and checkpoints that keep every charge.

use dp_accounting::{Accountant, BudgetFilter, DynAccountant, Ledger};
use dp_mechanisms::NoiseSource;
use dp_models::data::Dataset;
use dp_models::models::Network;
use dp_models::{Classifier, PrivateModel, TrainingData};
use serde::{Deserialize, Serialize};

use crate::config::TrainConfig;
use crate::error::{Error, Result};
use crate::evaluate::accuracy;
use crate::fingerprint::RunFingerprint;
use crate::sampler::ShuffleState;
use dp_accounting::validate;

mod batch;
mod charges;
mod correlated;
mod device;
mod distributed;
mod epoch;
mod resume;
mod snapshot;
mod sparse;
mod step;
mod step_tokens;
mod update;

pub use batch::{Batch, ExtraBatch};
pub use snapshot::Snapshot;
pub use sparse::Selection;
pub use step_tokens::{ClippedSum, NoisyGradient, StepCharge};

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

/// Trains a model with DP-SGD / DP-Adam.
///
/// Fail-closed by construction: the model's clipped sum must cover every parameter, noise
/// is added to all of it, and `step` checks both before touching θ. Non-finite
/// per-sample gradients get clip factor 0 and are counted; non-finite *inputs* are an
/// error naming the record, before anything is charged. Each step's event is charged to
/// the ledger *before* the update is applied, through a [`BudgetFilter`]: a step whose
/// event would take ε past the budget, or that the accountant cannot compose, changes
/// nothing. Every other charge ([`charge`](Self::charge): SA-DPSGD's acceptance tests,
/// resumed steps in the replayed ledger) goes through the same filter.
pub struct PrivacyEngine<M: PrivateModel = Network> {
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
    moments: device::Moments,
    steps: u64,
    nonfinite: u64,
    physical_batch_size: Option<usize>,
    shuffle: ShuffleState,
    /// The noise multiplier the current shuffled epoch was charged at.
    epoch_noise: Option<f64>,
    /// The step the charge periods count from: 0, or a cyclic run's production resume
    /// (which draws new groups and starts a new cycle there).
    period_origin: u64,
    /// The banded noise stream of a run with correlated noise (BandMF).
    correlated: Option<dp_mechanisms::band_mf::CorrelatedNoise>,
    /// This engine's place in a data-parallel group, once it has joined one.
    replica: distributed::Replica,
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
        mut noise: NoiseSource,
    ) -> Result<Self> {
        config.sampler.validate(dataset_size)?;
        let (ledger, max_steps) = match &config.privacy {
            None => (None, None),
            Some(p) => Self::private_ledger(p, config.sampler, dataset_size)?,
        };
        let correlated = match &config.privacy {
            None => None,
            Some(p) => Self::correlated_stream(p, config.sampler, dataset_size)?,
        };
        let fingerprint =
            RunFingerprint::of(&config, &model.architecture(), noise.is_reproducible());
        let moments = device::Moments::initial(&config.optimizer, &model)?;
        let mut shuffle = ShuffleState::default();
        if let crate::sampler::Sampler::CyclicPoisson { groups, .. } = config.sampler {
            shuffle.draw_groups(dataset_size, groups, &mut noise);
        }
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
            physical_batch_size: None,
            shuffle,
            epoch_noise: None,
            period_origin: 0,
            correlated,
            replica: distributed::Replica::Alone,
            #[cfg(feature = "fault-injection")]
            fault: None,
        })
    }

    /// Processes each logical batch in physical slices of at most `size` samples (to bound
    /// memory); the clipped sums are added before the noise, so the step, and its privacy,
    /// are those of the whole logical batch.
    pub fn set_physical_batch_size(&mut self, size: usize) -> Result<()> {
        self.physical_batch_size = Some(validate::at_least_one("physical_batch_size", size)?);
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
        self.config.optimizer.set_learning_rate(lr)
    }

    /// Sets σ from the next step on; the ledger records every step with its own σ and the
    /// budget is enforced on it. Refused for non-private runs, inside a charge period
    /// such as a shuffled epoch ([`Error::EpochBoundary`]: its charge, made at the
    /// period's first step, assumed the σ then in force), and in a run with banded
    /// correlated noise (`engine/correlated.rs`).
    pub fn set_noise_multiplier(&mut self, noise_multiplier: f64) -> Result<()> {
        validate::positive("noise_multiplier", noise_multiplier)?;
        if self.config.privacy.is_none() {
            return Err(Error::NotPrivate {
                operation: "set_noise_multiplier",
            });
        }
        self.check_fixed_sigma(noise_multiplier)?;
        self.check_epoch_charge(noise_multiplier)?;
        if let Some(p) = &mut self.config.privacy {
            p.noise_multiplier = noise_multiplier;
        }
        Ok(())
    }

    /// The configuration in force (after any schedule changes).
    pub fn config(&self) -> &TrainConfig {
        &self.config
    }

    /// The engine's randomness (ChaCha20; OS-seeded in production), for the random
    /// choices of an algorithm that release nothing by themselves (an acceptance draw, a
    /// perturbation of θ before a step). A value computed from private data must be
    /// released through [`release`](Self::release) or
    /// [`release_value`](Self::release_value), which charge the ledger first.
    pub fn noise_source(&mut self) -> &mut NoiseSource {
        &mut self.noise
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

    /// Validates `data` (sizes, labels, finite features: [`TrainingData::validate`]) and
    /// digests it the first time the engine sees it; a resumed engine also checks the
    /// digest against the checkpoint's.
    fn check_data(&mut self, data: &M::Data) -> Result<()> {
        if data.len() != self.dataset_size {
            return Err(Error::DatasetSize {
                expected: self.dataset_size,
                got: data.len(),
            });
        }
        let address = data as *const M::Data as *const () as usize;
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

    /// Replaces the model's parameters (an algorithm's own update, e.g. a perturbation of
    /// θ before a step or the restoring of a saved θ). Nothing is released by setting θ;
    /// what is computed from private data at the new θ still goes through the releases.
    pub fn set_parameters(&mut self, theta: &[f32]) -> Result<()> {
        Ok(self.model.set_parameters(theta)?)
    }
}

impl<M: Classifier> PrivacyEngine<M> {
    /// Test accuracy of the current model.
    pub fn accuracy(&self, data: &Dataset) -> Result<f64> {
        accuracy(&self.model, data)
    }
}
