//! The batches a step may compute on, as tokens only the engine makes: a step's
//! [`Batch`] is drawn under its [`StepCharge`] (so the amplification the charge was
//! reserved for is that of the batch the clipped sum reads), and an [`ExtraBatch`]
//! carries the sampling scheme a statistic released from it is charged under.
//!
//! Neither can be built outside the engine, so a clipped sum of an index set that the
//! sampler did not draw does not type-check:
//!
//! ```compile_fail
//! # use dp_optim::Batch;
//! let batch = Batch { indices: vec![0, 1, 2], charge: 0 };
//! ```
//!
//! ```compile_fail
//! # fn f(engine: &mut dp_optim::PrivacyEngine, data: &dp_models::data::Dataset) {
//! let sum = engine.clipped_sum(data, &[0usize, 1, 2]);
//! # }
//! ```

use dp_accounting::SamplingScheme;
use dp_models::PrivateModel;

use super::step_tokens::StepCharge;
use super::PrivacyEngine;
use crate::error::{Error, Result};
use crate::sampler::{Sampler, ShuffleState};

/// The batch of one training step, drawn by [`PrivacyEngine::draw_batch`] under that
/// step's charge; [`PrivacyEngine::release`] refuses a sum of any other step's batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    indices: Vec<usize>,
    charge: u64,
}

impl Batch {
    /// A batch of `indices` under the charge `charge` (the engine's own draws, and a
    /// rank's share of its group's draw).
    pub(super) fn new(indices: Vec<usize>, charge: u64) -> Self {
        Batch { indices, charge }
    }

    /// The record indices drawn.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }

    /// The records drawn (a Poisson batch may be empty).
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether no record was drawn.
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// The id of the charge the batch was drawn under.
    pub(super) fn charge(&self) -> u64 {
        self.charge
    }
}

/// A batch drawn outside the training sequence by [`PrivacyEngine::draw_extra_batch`],
/// with the sampling scheme it was drawn by: what
/// [`release_value`](PrivacyEngine::release_value) computes on it is charged as that
/// scheme's amplification of the release's mechanism.
#[derive(Clone, Debug, PartialEq)]
pub struct ExtraBatch {
    indices: Vec<usize>,
    scheme: SamplingScheme,
}

impl ExtraBatch {
    /// The record indices drawn.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }

    /// The scheme the batch was drawn by.
    pub fn scheme(&self) -> &SamplingScheme {
        &self.scheme
    }
}

impl<M: PrivateModel> PrivacyEngine<M> {
    /// The next batch of the training sequence, drawn with the run's sampler under
    /// `charge` (one batch per charge). The sampler's position moves only when the step
    /// is released: a step that fails after its draw leaves the shuffled order where it
    /// was, so permutation and charge boundaries stay together.
    pub fn draw_batch(&mut self, charge: &mut StepCharge) -> Result<Batch> {
        if charge.drawn {
            return Err(Error::InvalidSetting {
                name: "draw_batch",
                value: "a second draw".into(),
                reason: "is refused: a step charge covers one batch (begin a new step)".into(),
            });
        }
        let mut shuffle = self.shuffle.clone();
        let mut indices = Vec::new();
        let sampler = self.config.sampler;
        sampler.draw(
            self.dataset_size,
            self.steps - self.period_origin,
            &mut self.noise,
            &mut shuffle,
            &mut indices,
        );
        charge.drawn = true;
        charge.shuffle = Some(shuffle);
        Ok(Batch {
            indices,
            charge: charge.id,
        })
    }

    /// A batch drawn with `sampler` outside the training sequence (a shuffled sampler
    /// starts a fresh permutation). What is computed on it must be released through
    /// [`release_value`](Self::release_value) or charged separately.
    pub fn draw_extra_batch(&mut self, sampler: Sampler) -> ExtraBatch {
        let mut indices = Vec::new();
        let mut shuffle = ShuffleState::default();
        sampler.draw(
            self.dataset_size,
            self.steps,
            &mut self.noise,
            &mut shuffle,
            &mut indices,
        );
        ExtraBatch {
            indices,
            scheme: sampler.scheme(self.dataset_size),
        }
    }
}
