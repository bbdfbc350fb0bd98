//! Files written whole or not at all.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Writes through a temporary file and a rename, so a kill leaves the old file or the new.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    // Unique per process: parallel workers may write the same table.
    let tmp: PathBuf = path.with_extension(format!("{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))
}
