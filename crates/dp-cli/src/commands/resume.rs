//! `dp train` resuming from its checkpoint: what may change (`--allow-change`), and the
//! refusals in the flags' words.

use anyhow::{bail, Result};
use dp_optim::collective::Collective;
use dp_optim::{CheckpointDir, PrivacyEngine, RunField};

use super::distributed::Group;

use crate::args::{ChangeableField, TrainArgs};
use crate::output::{diag, short};

/// Opens `--checkpoint-dir` (on rank 0 only in a distributed run: the run's checkpoints
/// are rank 0's) and restores `engine` from its checkpoint, if there is one; in a
/// distributed run every rank then joins the group, starting from rank 0's state (resumed
/// or fresh), whatever the number of ranks that wrote the checkpoint. The group's traffic
/// is counted afresh from there. Returns the open directory.
pub(super) fn resume(
    args: &TrainArgs,
    engine: &mut PrivacyEngine,
    group: &mut Option<Group>,
) -> Result<Option<CheckpointDir>> {
    let is_root = group.as_ref().is_none_or(|g| g.rank() == 0);
    let dir = args
        .checkpoint_dir
        .as_deref()
        .filter(|_| is_root)
        .map(|dir| {
            CheckpointDir::open(dir).map_err(|e| {
                anyhow::anyhow!("--checkpoint-dir ({}) cannot be used: {e}", dir.display())
            })
        })
        .transpose()?;
    if let Some(dir) = &dir {
        if let Some(saved) = dir.load()? {
            engine
                .restore_allowing(&saved, &allowed(&args.allow_change))
                .map_err(resume_error)?;
            diag(&format!(
                "resumed from {} at step {}",
                dir.path().display(),
                engine.steps()
            ));
        }
    }
    if let Some(group) = group.as_mut() {
        engine.join_group(group)?;
        group.reset(); // the summary's traffic is the steps', not the join's
    }
    check_spent(args, engine)?;
    Ok(dir)
}

/// A resumed run that has already spent more than the new `--target-epsilon` is an
/// error, not a run that stops at once and exits 0.
fn check_spent(args: &TrainArgs, engine: &PrivacyEngine) -> Result<()> {
    if let (Some(target), Some(spent)) = (args.target_epsilon, engine.epsilon()?) {
        if spent > target {
            bail!(
                "--target-epsilon ({}) is below the epsilon the checkpoint has already spent ({}); the ledger keeps every charge, so the budget must be at least that",
                short(target),
                short(spent)
            );
        }
    }
    Ok(())
}

fn allowed(fields: &[ChangeableField]) -> Vec<RunField> {
    fields
        .iter()
        .map(|f| match f {
            ChangeableField::Lr => RunField::Lr,
            ChangeableField::NoiseMultiplier => RunField::NoiseMultiplier,
            ChangeableField::MaxGradNorm => RunField::MaxGradNorm,
            ChangeableField::TargetEpsilon => RunField::TargetEpsilon,
        })
        .collect()
}

/// A refused resume, in the flags' words where the library's names differ.
fn resume_error(e: dp_optim::Error) -> anyhow::Error {
    match e {
        dp_optim::Error::EpochBoundary {
            step,
            epoch_start,
            next_boundary,
            charged,
            requested,
            ..
        } => anyhow::anyhow!(
            "--noise-multiplier ({}) of a shuffled run can only change at an epoch boundary: \
             the checkpoint is at step {step}, inside the epoch charged at step {epoch_start} \
             with --noise-multiplier {}; resume with --noise-multiplier {} to the next \
             boundary (step {next_boundary}), then change it",
            short(requested),
            short(charged),
            short(charged)
        ),
        other => other.into(),
    }
}
