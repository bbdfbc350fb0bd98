//! One DP-SGD step split over the ranks of a [`Collective`], with the privacy of one
//! process: the batch is the one process's batch, the noise is added once.
//!
//! Rank 0 draws the batch with the run's sampler exactly as a single process does and
//! broadcasts its record indices; each rank sums the clipped gradients of its share of
//! the batch (every `world`-th record, from its rank); the sums are all-reduced in rank
//! order; rank 0 releases the total through the step's Gaussian mechanism, from the run's
//! one noise stream, and broadcasts the noisy sum; every rank then commits the same charge
//! to its ledger and applies the same update. The released value is the single process's
//! noisy sum of the same batch with the clipped per-example gradients added in another
//! order, so the guarantee is that process's (the sampler's amplification of the Gaussian
//! mechanism, e.g. Mironov, Talwar & Zhang 2019 for Poisson sampling); what the ranks
//! exchange before the release are clipped sums, which never leave the group. A rank that
//! fails before the noisy sum is broadcast ends the step on every rank with an error and
//! no update; only rank 0's ledger and checkpoints are the run's.
//!
//! Before its first data-parallel step an engine joins the group: rank 0's state (a
//! checkpoint of it: θ, moments, ledger, counters) is broadcast and every other rank
//! restores from it, so the replicas start from rank 0's θ whatever their own
//! initialisation (an OS-seeded run initialises each rank differently). A rank other than
//! 0 is then a follower: its sampler state and noise stream are not the run's, so it
//! refuses to write a checkpoint.

use dp_models::PrivateModel;

use super::batch::Batch;
use super::device::{Gradient, Moments};
use super::step_tokens::ClippedSum;
use super::{PrivacyEngine, StepReport};
use crate::collective::{broadcast_checkpoint, Collective};
use crate::error::{Error, Result};

/// Who adds a release's noise: this engine, from its noise stream, or another rank of a
/// data-parallel group, whose noisy sum this engine received (it then only checks, commits
/// and counts the release).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NoiseBy {
    ThisEngine,
    AnotherRank,
}

/// The rank that draws the batch and the noise.
const ROOT: usize = 0;

/// An engine's place in a data-parallel group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Replica {
    /// Not (yet) in a group.
    Alone,
    /// Rank 0: the run's sampler, noise, ledger and checkpoints.
    Root,
    /// Another rank, started from rank 0's state.
    Follower,
}

impl<M: PrivateModel> PrivacyEngine<M> {
    /// One data-parallel DP-SGD step of this rank of `group` on `data` (every rank holds
    /// the whole dataset and an engine of the same configuration and model). Any sampler:
    /// rank 0 alone holds the sampler's state (a shuffled epoch's permutation) and draws,
    /// every rank charges what one process charges at the same step (a shuffled epoch once,
    /// at its start). Refused for models that keep their parameters on a device (not yet
    /// supported). After an error, end the group with [`Collective::abort`] so that no
    /// other rank waits for this one.
    pub fn step_distributed(
        &mut self,
        data: &M::Data,
        group: &mut dyn Collective,
    ) -> Result<StepReport> {
        self.check_distributable()?;
        if self.replica == Replica::Alone {
            self.join_group(group)?;
        }
        let (rank, world) = (group.rank(), group.world_size());
        let mut charge = self.begin_step(data)?;
        let mut indices = if rank == ROOT {
            self.draw_batch(&mut charge)?.indices().to_vec()
        } else {
            charge.drawn = true;
            Vec::new()
        };
        group.broadcast_indices(&mut indices, ROOT)?;
        let share = Batch::new(
            indices.iter().copied().skip(rank).step_by(world).collect(),
            charge.id,
        );
        let local = self.clipped_sum(data, &share)?;
        let total = all_reduced(local, indices.len(), group)?;
        let noisy = if rank == ROOT {
            let noisy = self.release(charge, total)?;
            let mut values = noisy.sum()?;
            group.broadcast(&mut values, ROOT)?;
            noisy
        } else {
            let mut values = vec![0.0f32; self.model.num_params()];
            group.broadcast(&mut values, ROOT)?;
            let received = ClippedSum {
                sum: Gradient::Host(values),
                ..total
            };
            self.release_on(charge, received, None, NoiseBy::AnotherRank)?
        };
        self.apply_update(&noisy)
    }

    /// Makes every rank of `group` a replica of rank 0: its state (a checkpoint of it)
    /// broadcast and restored by the others, which then hold rank 0's θ, moments, ledger and
    /// step count. Every rank calls it at the same point; [`step_distributed`]
    /// (Self::step_distributed) calls it before its first step if it was not called, so
    /// call it earlier only to read the joined state (e.g. a resumed step count) first.
    /// Resume a run by restoring rank 0 alone, then joining.
    pub fn join_group(&mut self, group: &mut dyn Collective) -> Result<()> {
        if group.rank() == ROOT {
            broadcast_checkpoint(group, Some(&self.checkpoint()?), ROOT)?;
            self.replica = Replica::Root;
            return Ok(());
        }
        let root = broadcast_checkpoint(group, None, ROOT)?.ok_or_else(|| Error::Collective {
            operation: "broadcast",
            rank: group.rank(),
            reason: "rank 0 sent no state to start from".into(),
        })?;
        self.restore_state(&root, &[])?;
        self.replica = Replica::Follower;
        Ok(())
    }

    /// A follower's refusal to write a checkpoint (its sampler state and noise stream are
    /// not the run's: a resume from it could redraw records inside a charged epoch).
    pub(super) fn check_checkpointable(&self) -> Result<()> {
        if self.replica == Replica::Follower {
            return Err(Error::InvalidSetting {
                name: "checkpoint",
                value: "a rank other than 0 of a data-parallel group".into(),
                reason: "holds neither the run's sampler state nor its noise stream; \
                         checkpoint rank 0"
                    .into(),
            });
        }
        Ok(())
    }

    /// Refuses what a data-parallel step does not support yet.
    fn check_distributable(&self) -> Result<()> {
        if matches!(self.moments, Moments::Device(_)) {
            return Err(Error::InvalidSetting {
                name: "model",
                value: "parameters on a device".into(),
                reason:
                    "are not supported by data-parallel steps yet (sums are reduced on the host)"
                        .into(),
            });
        }
        Ok(())
    }
}

/// `local` summed over the ranks, with the batch's loss sum and non-finite count, for a
/// batch of `batch_size` records in all.
fn all_reduced(
    local: ClippedSum,
    batch_size: usize,
    group: &mut dyn Collective,
) -> Result<ClippedSum> {
    let Gradient::Host(mut values) = local.sum else {
        return Err(Error::UnprotectedParameter(
            "a data-parallel step needs a host sum".into(),
        ));
    };
    let p = values.len();
    values.extend([local.loss_sum as f32, local.nonfinite as f32]);
    group.all_reduce_sum(&mut values)?;
    let (loss_sum, nonfinite) = (f64::from(values[p]), values[p + 1] as usize);
    values.truncate(p);
    Ok(ClippedSum {
        sum: Gradient::Host(values),
        batch_size,
        loss_sum,
        nonfinite,
        ..local
    })
}
