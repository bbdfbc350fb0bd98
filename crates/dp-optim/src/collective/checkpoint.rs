//! One rank's checkpoint on every rank of a group: a data-parallel run resumes from the
//! checkpoint its root wrote, whatever the number of ranks then and now, without the
//! other ranks reading a file (on another host they may not see it).

use std::path::Path;

use super::Collective;
use crate::checkpoint::Checkpoint;
use crate::error::Result;

/// Bytes per broadcast word.
const WORD: usize = std::mem::size_of::<usize>();

/// `root`'s `checkpoint` (or its absence) on every rank of `group`; the other ranks'
/// arguments are ignored. Sent as the bytes a checkpoint file holds, so every rank checks
/// its format and integrity digest as it would a file's.
pub fn broadcast_checkpoint(
    group: &mut dyn Collective,
    checkpoint: Option<&Checkpoint>,
    root: usize,
) -> Result<Option<Checkpoint>> {
    let mut words = match (group.rank() == root, checkpoint) {
        (true, Some(c)) => to_words(&c.to_bytes()?),
        _ => Vec::new(),
    };
    group.broadcast_indices(&mut words, root)?;
    if words.is_empty() {
        return Ok(None);
    }
    let origin = format!("the checkpoint broadcast by rank {root}");
    Checkpoint::from_bytes(&from_words(&words), Path::new(&origin)).map(Some)
}

/// The byte count, then the bytes packed little-endian into words.
fn to_words(bytes: &[u8]) -> Vec<usize> {
    std::iter::once(bytes.len())
        .chain(bytes.chunks(WORD).map(|chunk| {
            let mut word = [0u8; WORD];
            word[..chunk.len()].copy_from_slice(chunk);
            usize::from_le_bytes(word)
        }))
        .collect()
}

/// The inverse of [`to_words`] (a count larger than the words carry is cut to them).
fn from_words(words: &[usize]) -> Vec<u8> {
    let Some((&len, rest)) = words.split_first() else {
        return Vec::new();
    };
    let mut bytes: Vec<u8> = rest.iter().flat_map(|w| w.to_le_bytes()).collect();
    bytes.truncate(len);
    bytes
}

#[cfg(test)]
mod tests {
    use super::{from_words, to_words};

    #[test]
    fn bytes_survive_the_words_at_every_length() {
        for len in 0..20 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            assert_eq!(from_words(&to_words(&bytes)), bytes, "length {len}");
        }
    }
}
