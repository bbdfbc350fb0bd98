//! A checkpoint's integrity digest: SHA-256 over everything else it holds (settings,
//! weights, moments, steps, ledger, noise state, counters, the shuffled sampler's state),
//! written by [`Checkpoint::save`] and verified by [`Checkpoint::load`], and the check
//! that the step count is one the ledger pays for.
//!
//! This is **integrity, not authenticity**: it catches a checkpoint that was edited by
//! hand, truncated or corrupted (a ledger emptied, a count or σ lowered, `steps` changed,
//! weights swapped), but whoever can write the file can also recompute the digest. A
//! checkpoint is only as trustworthy as the directory it lives in (mode 0600, its own
//! lock); sign it with a key outside the run for authenticity (docs/training.md).

use sha2::{Digest, Sha256};

use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};

/// The SHA-256 (hex) of `checkpoint` serialised without its digest.
pub(crate) fn digest(checkpoint: &Checkpoint) -> Result<String> {
    let mut bare = checkpoint.clone();
    bare.digest = None;
    let bytes = serde_json::to_vec(&bare).map_err(|e| Error::Checkpoint {
        path: "(in memory)".into(),
        reason: e.to_string(),
    })?;
    Ok(Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Refuses a checkpoint whose digest is missing or does not match its contents.
pub(crate) fn verify(checkpoint: &Checkpoint) -> std::result::Result<(), String> {
    let expected = digest(checkpoint).map_err(|e| e.to_string())?;
    match &checkpoint.digest {
        None => Err("it has no integrity digest (written by another version?)".into()),
        Some(found) if *found == expected => Ok(()),
        Some(_) => Err(
            "its contents do not match its integrity digest: it was edited, truncated or \
             corrupted since it was written; start a new run or restore a good copy"
                .into(),
        ),
    }
}
