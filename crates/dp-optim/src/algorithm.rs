//! The seam between the engine and the algorithms trained with it.

use dp_models::models::Network;
use dp_models::PrivateModel;

use crate::collective::Collective;
use crate::engine::{PrivacyEngine, StepReport};
use crate::error::Result;

/// A private training algorithm: what one iteration does, written with the engine's
/// public steps ([`begin_step`](PrivacyEngine::begin_step),
/// [`draw_batch`](PrivacyEngine::draw_batch), [`clipped_sum`](PrivacyEngine::clipped_sum),
/// [`release`](PrivacyEngine::release), [`apply_update`](PrivacyEngine::apply_update),
/// [`release_value`](PrivacyEngine::release_value), [`charge`](PrivacyEngine::charge),
/// [`snapshot`](PrivacyEngine::snapshot), [`rollback`](PrivacyEngine::rollback)).
///
/// The engine keeps the guarantee: every release goes through a mechanism whose event is
/// charged to the ledger, under the budget, before the released value exists. An
/// algorithm's own state (counters, schedules) is its own; anything it computes from
/// private data and lets out must go through those calls.
///
/// The library's algorithms: [`DpSgd`] (DP-SGD / DP-Adam, NoisySGD / NoisyAdam, AUTO-S
/// by its clip rule), [`crate::annealing::SaDpsgd`] (simulated-annealing acceptance),
/// [`crate::dpd::DpdTraining`] (dropout-as-noise SGLD) and
/// [`crate::dpd::GaussianDropout`] (the non-private weight-dropout baseline) and
/// [`crate::SparseDpSgd`] (noise only on privately selected coordinates).
pub trait Algorithm<M: PrivateModel = Network> {
    /// One iteration on `data`.
    fn step(&mut self, engine: &mut PrivacyEngine<M>, data: &M::Data) -> Result<StepReport>;
}

/// DP-SGD (Abadi et al. 2016): clip each per-example gradient, add Gaussian noise to the
/// sum, apply the configured optimiser ([`PrivacyEngine::step`]). With Adam it is
/// DP-Adam (Bu et al.'s NoisyAdam), with the AUTO-S rule it is Bu et al.'s automatic
/// clipping, with no privacy settings it is the non-private baseline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DpSgd;

impl<M: PrivateModel> Algorithm<M> for DpSgd {
    fn step(&mut self, engine: &mut PrivacyEngine<M>, data: &M::Data) -> Result<StepReport> {
        engine.step(data)
    }
}

/// [`DpSgd`] with each step split over the ranks of `group`
/// ([`PrivacyEngine::step_distributed`]): the single process's run, on every rank.
pub struct DistributedDpSgd<'g> {
    /// The ranks the steps are split over.
    pub group: &'g mut dyn Collective,
}

impl<M: PrivateModel> Algorithm<M> for DistributedDpSgd<'_> {
    fn step(&mut self, engine: &mut PrivacyEngine<M>, data: &M::Data) -> Result<StepReport> {
        engine.step_distributed(data, self.group)
    }
}
