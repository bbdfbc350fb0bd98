//! The collective operations data-parallel DP training needs, as a seam with backends:
//! every rank computes the clipped sum of its part of the batch, the sums are all-reduced,
//! and one rank's noisy update is broadcast so that every rank holds the same θ.
//!
//! * [`Collective`] — all-reduce sum, broadcast and barrier over a fixed group of ranks.
//! * [`Solo`] — the group of one (a single process): every operation is the identity.
//! * [`ThreadGroup`] — ranks as threads of one process, for fast tests of the protocol.
//! * `MpiWorld` (feature `mpi`) — the processes of an MPI job, on one host or many.
//! * [`broadcast_checkpoint`] — the root's checkpoint on every rank, to resume a run.
//! * [`Metered`] — any of them with its operations, bytes and time counted.
//!
//! [`ThreadGroup`] sums in rank order (0, 1, …) on every rank, so all ranks hold
//! bit-identical results; MPI's order is the library's (the engine does not rely on it:
//! rank 0's noisy sum is broadcast). A rank that leaves a [`ThreadGroup`] (returns,
//! panics, is dropped) makes every other rank's next operation a typed
//! [`Error::Collective`](crate::Error::Collective) instead of a hang; an MPI process that
//! dies ends the job through the MPI runtime. Either way nothing is released from a
//! partial reduction.

mod checkpoint;
mod metered;
#[cfg(feature = "mpi")]
mod mpi;
mod threads;

#[cfg(feature = "mpi")]
pub use self::mpi::MpiWorld;
pub use checkpoint::broadcast_checkpoint;
pub use metered::{Metered, Traffic};
pub use threads::{ThreadGroup, ThreadRank};

use crate::error::Result;

/// A fixed group of ranks exchanging `f32` buffers and record indices.
pub trait Collective {
    /// This rank, in `0..world_size()`.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn world_size(&self) -> usize;
    /// Replaces `values` on every rank by their element-wise sum over the ranks. Every
    /// rank must pass a buffer of the same length.
    fn all_reduce_sum(&mut self, values: &mut [f32]) -> Result<()>;
    /// Replaces `values` on every rank by `root`'s. Every rank must pass a buffer of the
    /// same length.
    fn broadcast(&mut self, values: &mut [f32], root: usize) -> Result<()>;
    /// Replaces `indices` on every rank by `root`'s (any length: a Poisson batch's size is
    /// only known at `root`).
    fn broadcast_indices(&mut self, indices: &mut Vec<usize>, root: usize) -> Result<()>;
    /// Returns once every rank has called it.
    fn barrier(&mut self) -> Result<()>;
    /// Ends the group after an error on this rank, so that no other rank waits for it:
    /// a [`ThreadGroup`] rank leaves (the others' operations fail); an MPI process calls
    /// `MPI_Abort`, which ends every process of the job with `code` (a process that
    /// merely exits would leave the others blocked in their next operation).
    fn abort(&mut self, code: i32);
}

/// A boxed collective is one (a group chosen at run time, then wrapped, e.g. [`Metered`]).
impl<C: Collective + ?Sized> Collective for Box<C> {
    fn rank(&self) -> usize {
        (**self).rank()
    }

    fn world_size(&self) -> usize {
        (**self).world_size()
    }

    fn all_reduce_sum(&mut self, values: &mut [f32]) -> Result<()> {
        (**self).all_reduce_sum(values)
    }

    fn broadcast(&mut self, values: &mut [f32], root: usize) -> Result<()> {
        (**self).broadcast(values, root)
    }

    fn broadcast_indices(&mut self, indices: &mut Vec<usize>, root: usize) -> Result<()> {
        (**self).broadcast_indices(indices, root)
    }

    fn barrier(&mut self) -> Result<()> {
        (**self).barrier()
    }

    fn abort(&mut self, code: i32) {
        (**self).abort(code)
    }
}

/// The group of one: a single process.
#[derive(Clone, Copy, Debug, Default)]
pub struct Solo;

impl Collective for Solo {
    fn rank(&self) -> usize {
        0
    }

    fn world_size(&self) -> usize {
        1
    }

    fn all_reduce_sum(&mut self, _values: &mut [f32]) -> Result<()> {
        Ok(())
    }

    fn broadcast(&mut self, _values: &mut [f32], root: usize) -> Result<()> {
        check_root("broadcast", 0, root, 1)
    }

    fn broadcast_indices(&mut self, _indices: &mut Vec<usize>, root: usize) -> Result<()> {
        check_root("broadcast", 0, root, 1)
    }

    fn barrier(&mut self) -> Result<()> {
        Ok(())
    }

    fn abort(&mut self, _code: i32) {}
}

/// A typed error unless `root` is a rank of a group of `world` ranks.
pub(crate) fn check_root(
    operation: &'static str,
    rank: usize,
    root: usize,
    world: usize,
) -> Result<()> {
    if root >= world {
        return Err(crate::Error::Collective {
            operation,
            rank,
            reason: format!("root {root} is not a rank of a group of {world}"),
        });
    }
    Ok(())
}
