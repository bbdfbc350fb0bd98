//! `dp train --distributed`: the group of processes a run's steps are split over.

#[cfg(not(feature = "mpi"))]
use anyhow::bail;
#[cfg(feature = "mpi")]
use anyhow::Context;
use anyhow::Result;
use dp_optim::collective::{Collective, Metered};

use crate::args::{DistributedChoice, TrainArgs};
use crate::output::diag;

/// A run's group of processes, its traffic counted for the summary.
pub(super) type Group = Metered<Box<dyn Collective>>;

/// The group of processes `--distributed` names, joined.
pub(super) fn group(args: &TrainArgs) -> Result<Option<Group>> {
    match args.distributed {
        None => Ok(None),
        #[cfg(feature = "mpi")]
        Some(DistributedChoice::Mpi) => Ok(Some(Metered::new(Box::new(
            dp_optim::collective::MpiWorld::init().context("--distributed mpi")?,
        )))),
        #[cfg(not(feature = "mpi"))]
        Some(DistributedChoice::Mpi) => {
            bail!("--distributed mpi needs a dp built with the mpi feature (cargo build --release -p dp-cli --features mpi, with an MPI library installed)")
        }
    }
}

/// The group as the engine's seam takes it.
pub(super) fn seam(group: &mut Option<Group>) -> Option<&mut (dyn Collective + 'static)> {
    group.as_mut().map(|g| g as &mut (dyn Collective + 'static))
}

/// `result`, or — after an error in a distributed run — the error said on this rank and
/// the job ended ([`Collective::abort`]), so that no other rank waits for this one.
pub(super) fn end_on_error<T>(
    result: Result<T>,
    group: Option<&mut (dyn Collective + 'static)>,
) -> Result<T> {
    match (result, group) {
        (Err(e), Some(group)) => {
            let line = format!("{e:#}")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            diag(&format!("error: {line}"));
            group.abort(2);
            Err(e)
        }
        (result, _) => result,
    }
}
