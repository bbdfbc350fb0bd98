//! The study's data for Opacus: the splits as the library's loader built them and the
//! initial weights of each seed, in little-endian binary files.

use std::path::Path;

use anyhow::Result;

use crate::wide::word2vec::PairSet;

/// Writes `<name>.u32`: targets, contexts, then the negatives row-major.
pub fn write_split(dir: &Path, name: &str, pairs: &PairSet) -> Result<()> {
    let words = pairs
        .targets
        .iter()
        .chain(&pairs.contexts)
        .chain(&pairs.negatives);
    let bytes: Vec<u8> = words.flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(dir.join(format!("{name}.u32")), bytes)?;
    Ok(())
}

/// Writes `init-seed<seed>.f32`: the embedding row-major.
pub fn write_weights(dir: &Path, seed: u64, weights: &[f32]) -> Result<()> {
    let bytes: Vec<u8> = weights.iter().flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(dir.join(format!("init-seed{seed}.f32")), bytes)?;
    Ok(())
}
