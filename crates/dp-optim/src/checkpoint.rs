//! Checkpoints: what a run writes so that it can resume, and the directory that holds one.
//!
//! What a checkpoint reveals (docs/training.md, "What a run releases and what ε covers"):
//! the weights and optimiser moments (post-processing of the noisy sums, covered by ε),
//! the ledger, the step count, the count of non-finite per-sample gradients (not
//! covered by ε), the shuffled sampler's order for the current epoch (the
//! shuffled sampler claims no amplification, so its order is not secret to its
//! accounting), the run's settings and a SHA-256 of the training data. It holds the
//! noise key only for a `--seed` run, whose noise is predictable from the seed anyway:
//! an OS-seeded run's checkpoint has no key and a resumed run draws fresh OS entropy.
//! Files are written with mode 0600 and carry a SHA-256 digest of their contents that
//! loading verifies (integrity against edits and corruption, not authenticity).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use dp_accounting::Ledger;
use dp_mechanisms::NoiseState;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fingerprint::RunFingerprint;
use crate::sampler::ShuffleState;

/// The checkpoint format this version writes and reads.
pub const CHECKPOINT_FORMAT: u32 = 3;

/// A checkpoint: weights, optimizer state, ledger, counters and the run's fingerprint.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Checkpoint {
    /// [`CHECKPOINT_FORMAT`] when written.
    pub format: u32,
    /// The settings and data the run was started with.
    pub fingerprint: RunFingerprint,
    /// θ (internal layout).
    pub theta: Vec<f32>,
    /// Optimizer moments.
    pub moments: Vec<Vec<f32>>,
    /// Steps taken.
    pub steps: u64,
    /// The privacy ledger (`None` for a non-private run).
    pub ledger: Option<Ledger>,
    /// The noise source's state: only for a seeded (reproducible) run.
    pub noise: Option<NoiseState>,
    /// Non-finite per-sample gradients so far (a count of the private data, not covered
    /// by ε; kept so a resumed run reports the same total).
    pub nonfinite_gradients: u64,
    /// The shuffled sampler's epoch state (empty for other samplers).
    #[serde(default)]
    pub shuffle: ShuffleState,
    /// The noise multiplier the current shuffled epoch was charged at (`None` for other
    /// samplers, or before the first charge).
    pub epoch_noise_multiplier: Option<f64>,
    /// The last b − 1 correlated noise vectors of a seeded run with banded noise, newest
    /// first (`None` otherwise: a production resume restarts the stream,
    /// `engine/correlated.rs`).
    #[serde(default)]
    pub correlated_noise: Option<Vec<Vec<f64>>>,
    /// SHA-256 of everything above (integrity, not authenticity: `integrity.rs`), set by
    /// [`save`](Self::save) and verified by [`load`](Self::load).
    pub digest: Option<String>,
}

fn checkpoint_error(path: &Path, reason: impl ToString) -> Error {
    Error::Checkpoint {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

impl Checkpoint {
    /// Reads a checkpoint written by [`Checkpoint::save`].
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| checkpoint_error(path, e))?;
        Self::from_bytes(&bytes, path)
    }

    /// A checkpoint from the bytes [`to_bytes`](Self::to_bytes) wrote, its format and
    /// integrity digest checked; errors name `origin` (a file, or where the bytes came from).
    pub fn from_bytes(bytes: &[u8], origin: &Path) -> Result<Self> {
        #[derive(Deserialize)]
        struct Format {
            format: Option<u32>,
        }
        let unreadable = |e: serde_json::Error| {
            let reason = format!(
                "not a whole checkpoint ({e}): it was truncated or is not a checkpoint; \
                 start a new run or restore a good copy"
            );
            checkpoint_error(origin, reason)
        };
        let format = serde_json::from_slice::<Format>(bytes)
            .map_err(unreadable)?
            .format;
        if format != Some(CHECKPOINT_FORMAT) {
            return Err(checkpoint_error(
                origin,
                format!(
                    "format {} is not {CHECKPOINT_FORMAT} (written by another version); start a new run",
                    format.map_or("1".into(), |f| f.to_string())
                ),
            ));
        }
        let checkpoint: Checkpoint =
            serde_json::from_slice(bytes).map_err(|e| checkpoint_error(origin, e))?;
        let expected = checkpoint.digest()?;
        crate::integrity::verify(checkpoint.digest.as_deref(), &expected)
            .map_err(|reason| checkpoint_error(origin, reason))?;
        Ok(checkpoint)
    }

    /// Its integrity digest: the SHA-256 of everything else it holds (integrity.rs).
    fn digest(&self) -> Result<String> {
        let mut bare = self.clone();
        bare.digest = None;
        crate::integrity::digest(&bare)
    }

    /// The checkpoint as [`save`](Self::save) writes it: JSON with its integrity digest.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut sealed = self.clone();
        sealed.digest = Some(self.digest()?);
        serde_json::to_vec(&sealed).map_err(|e| checkpoint_error(Path::new("(in memory)"), e))
    }

    /// Writes atomically (a temporary file beside `path`, fsync, rename), mode 0600, with
    /// its integrity digest.
    pub fn save(&self, path: &Path) -> Result<()> {
        let json = self.to_bytes()?;
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        let mut options = OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let written = options.open(&tmp).and_then(|mut file| {
            file.write_all(&json)?;
            file.sync_all()
        });
        if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
            let _ = std::fs::remove_file(&tmp);
            return Err(checkpoint_error(path, e));
        }
        Ok(())
    }
}

/// A run's checkpoint directory, locked for as long as this value lives: a second
/// process on the same directory is refused ([`Error::CheckpointLocked`]) instead of
/// interleaving its writes and reusing the first one's state.
#[derive(Debug)]
pub struct CheckpointDir {
    dir: PathBuf,
    _lock: File,
}

impl CheckpointDir {
    /// Creates `dir` if needed and takes its advisory lock (`dir/lock`).
    pub fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| checkpoint_error(dir, e))?;
        let lock_path = dir.join("lock");
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let lock = options
            .open(&lock_path)
            .map_err(|e| checkpoint_error(&lock_path, e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::CheckpointLocked {
                    path: dir.display().to_string(),
                })
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(checkpoint_error(&lock_path, e)),
        }
        let dir = CheckpointDir {
            dir: dir.to_path_buf(),
            _lock: lock,
        };
        if dir.path().is_dir() {
            return Err(checkpoint_error(&dir.path(), "is a directory, not a file"));
        }
        Ok(dir)
    }

    /// The checkpoint file, `dir/checkpoint.json`.
    pub fn path(&self) -> PathBuf {
        self.dir.join("checkpoint.json")
    }

    /// The checkpoint, if one was written.
    pub fn load(&self) -> Result<Option<Checkpoint>> {
        let path = self.path();
        if path.exists() {
            Checkpoint::load(&path).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Writes `checkpoint` atomically, mode 0600.
    pub fn save(&self, checkpoint: &Checkpoint) -> Result<()> {
        checkpoint.save(&self.path())
    }
}
