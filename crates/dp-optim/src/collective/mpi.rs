//! The MPI backend (feature `mpi`; rsmpi over the system's MPI library, e.g. Debian's
//! OpenMPI): the processes of one `mpirun` / `srun` job, on one host or many. A process
//! that dies ends the job through the MPI runtime, and one that fails calls
//! [`Collective::abort`] (`MPI_Abort`), so no rank waits for it and none releases from a
//! partial reduction. (A process that returns an error and finalises leaves the others
//! blocked in their next operation: OpenMPI 4.1, tested.)

use mpi::collective::SystemOperation;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, CommunicatorCollectives, Root};

use super::{check_root, Collective};
use crate::error::{Error, Result};

/// This process's place in the MPI job's world communicator.
pub struct MpiWorld {
    world: SimpleCommunicator,
    // Finalises MPI when dropped, after the communicator.
    _universe: Universe,
}

impl MpiWorld {
    /// Initialises MPI (once per process) and joins the job's world.
    pub fn init() -> Result<Self> {
        let universe = mpi::initialize().ok_or_else(|| Error::Collective {
            operation: "init",
            rank: 0,
            reason: "MPI was initialised already in this process".into(),
        })?;
        Ok(MpiWorld {
            world: universe.world(),
            _universe: universe,
        })
    }
}

/// An MPI rank as a `usize` (MPI ranks and sizes are non-negative).
fn index(value: i32) -> usize {
    usize::try_from(value).unwrap_or(0)
}

impl Collective for MpiWorld {
    fn rank(&self) -> usize {
        index(self.world.rank())
    }

    fn world_size(&self) -> usize {
        index(self.world.size())
    }

    fn all_reduce_sum(&mut self, values: &mut [f32]) -> Result<()> {
        let send = values.to_vec();
        self.world
            .all_reduce_into(&send[..], values, SystemOperation::sum());
        Ok(())
    }

    fn broadcast(&mut self, values: &mut [f32], root: usize) -> Result<()> {
        check_root("broadcast", self.rank(), root, self.world_size())?;
        self.world
            .process_at_rank(root as i32)
            .broadcast_into(values);
        Ok(())
    }

    fn broadcast_indices(&mut self, indices: &mut Vec<usize>, root: usize) -> Result<()> {
        check_root("broadcast", self.rank(), root, self.world_size())?;
        let process = self.world.process_at_rank(root as i32);
        let mut len = indices.len() as u64;
        process.broadcast_into(&mut len);
        let mut wide: Vec<u64> = indices.iter().map(|&i| i as u64).collect();
        wide.resize(len as usize, 0);
        process.broadcast_into(&mut wide[..]);
        *indices = wide.into_iter().map(|i| i as usize).collect();
        Ok(())
    }

    fn barrier(&mut self) -> Result<()> {
        self.world.barrier();
        Ok(())
    }

    fn abort(&mut self, code: i32) {
        self.world.abort(code)
    }
}
