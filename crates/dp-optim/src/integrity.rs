//! A checkpoint's integrity digest: SHA-256 over everything else it holds (settings,
//! weights, moments, steps, ledger, noise state, counters, the shuffled sampler's state),
//! written by [`Checkpoint::save`](crate::checkpoint::Checkpoint::save) and verified by
//! [`Checkpoint::load`](crate::checkpoint::Checkpoint::load).
//!
//! This is **integrity, not authenticity**: it catches a checkpoint that was edited by
//! hand, truncated or corrupted (a ledger emptied, a count or σ lowered, `steps` changed,
//! weights swapped), but whoever can write the file can also recompute the digest. A
//! checkpoint is only as trustworthy as the directory it lives in (mode 0600, its own
//! lock); sign it with a key outside the run for authenticity (docs/training.md).

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The SHA-256 (hex) of `bare` serialised as JSON: a checkpoint with its digest field
/// empty.
pub(crate) fn digest(bare: &impl Serialize) -> Result<String> {
    let bytes = serde_json::to_vec(bare).map_err(|e| Error::Checkpoint {
        path: "(in memory)".into(),
        reason: e.to_string(),
    })?;
    Ok(Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Refuses a digest that is missing (`found`) or is not the one the contents give
/// (`expected`).
pub(crate) fn verify(found: Option<&str>, expected: &str) -> std::result::Result<(), String> {
    match found {
        None => Err("it has no integrity digest (written by another version?)".into()),
        Some(found) if found == expected => Ok(()),
        Some(_) => Err(
            "its contents do not match its integrity digest: it was edited, truncated or \
             corrupted since it was written; start a new run or restore a good copy"
                .into(),
        ),
    }
}
