//! `dp train --distributed`: the group of processes a run's steps are split over.

#[cfg(not(feature = "mpi"))]
use anyhow::bail;
#[cfg(feature = "mpi")]
use anyhow::Context;
use anyhow::Result;
use dp_optim::collective::Collective;

use crate::args::{DistributedChoice, TrainArgs};

/// The group of processes `--distributed` names, joined.
pub(super) fn group(args: &TrainArgs) -> Result<Option<Box<dyn Collective>>> {
    match args.distributed {
        None => Ok(None),
        #[cfg(feature = "mpi")]
        Some(DistributedChoice::Mpi) => Ok(Some(Box::new(
            dp_optim::collective::MpiWorld::init().context("--distributed mpi")?,
        ))),
        #[cfg(not(feature = "mpi"))]
        Some(DistributedChoice::Mpi) => {
            bail!("--distributed mpi needs a dp built with the mpi feature (cargo build --release -p dp-cli --features mpi, with an MPI library installed)")
        }
    }
}
