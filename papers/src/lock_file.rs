//! Work that one process at a time does, among `--jobs` workers sharing a run cache: the
//! first to create `<name>.lock` (holding its process id) does the work, the others wait
//! for the lock to go and then find the work's result.

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

/// An exclusive lock, released (its file removed) when dropped.
#[derive(Debug)]
pub struct LockFile {
    path: PathBuf,
}

impl LockFile {
    /// Takes the lock at `path`, waiting (polling every `poll`) while a live process holds
    /// it. A lock whose process is gone (killed before it could remove its file) is taken
    /// over: where `/proc` tells which processes live; elsewhere such a lock must be
    /// removed by hand, and the wait says which file.
    pub fn acquire(path: &Path, poll: Duration) -> Result<Self> {
        let mut told = false;
        loop {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
            {
                Ok(mut file) => {
                    write!(file, "{}", std::process::id())
                        .with_context(|| format!("writing {}", path.display()))?;
                    return Ok(Self {
                        path: path.to_path_buf(),
                    });
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    if holder_is_gone(path) {
                        // Another waiter may remove it first: either way it is gone.
                        let _ = std::fs::remove_file(path);
                        continue;
                    }
                    if !told {
                        println!("  waiting for {} (another worker holds it)", path.display());
                        told = true;
                    }
                    std::thread::sleep(poll);
                }
                Err(e) => return Err(e).with_context(|| format!("creating {}", path.display())),
            }
        }
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether the lock's holder has certainly exited: its id is readable and `/proc` exists
/// without an entry for it. A lock being written (no id yet) is not gone.
fn holder_is_gone(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    let Ok(pid) = text.trim().parse::<u32>() else {
        return false;
    };
    let proc = Path::new("/proc");
    proc.join("self").exists() && !proc.join(pid.to_string()).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lock path of this test's own (tests run in parallel threads of one process).
    fn scratch(test: &str) -> PathBuf {
        let path =
            std::env::temp_dir().join(format!("dp-papers-lock-{test}-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        path
    }

    #[test]
    fn a_lock_is_exclusive_until_dropped() -> Result<()> {
        let path = scratch("exclusive");
        let held = LockFile::acquire(&path, Duration::from_millis(5))?;
        assert_eq!(
            std::fs::read_to_string(&path)?,
            std::process::id().to_string()
        );
        let waiter = {
            let path = path.clone();
            std::thread::spawn(move || LockFile::acquire(&path, Duration::from_millis(5)))
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished(), "the lock was taken twice");
        drop(held);
        let second = waiter.join().expect("the waiter ran")?;
        assert!(path.exists());
        drop(second);
        assert!(!path.exists());
        Ok(())
    }

    #[test]
    fn a_dead_holders_lock_is_taken_over() -> Result<()> {
        if !Path::new("/proc/self").exists() {
            return Ok(());
        }
        let path = scratch("dead-holder");
        // A process id above Linux's pid_max (2^22) never names a live process.
        std::fs::write(&path, "4194305")?;
        let lock = LockFile::acquire(&path, Duration::from_millis(5))?;
        assert_eq!(
            std::fs::read_to_string(&path)?,
            std::process::id().to_string()
        );
        drop(lock);
        Ok(())
    }
}
