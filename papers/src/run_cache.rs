//! The run cache: every finished run is one JSON record, `<dir>/<key>.json`, whose key is
//! the first 64 bits (hex) of the SHA-256 of the run's key material — everything that
//! determines the run, serialised as JSON, with a `schema` number raised whenever the
//! material's meaning changes. A run found under its key is read, never trained again;
//! a record that does not parse as the caller's type counts as absent.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::de::DeserializeOwned;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::atomic_file::write_atomically;

/// The finished runs of one directory.
#[derive(Clone, Copy, Debug)]
pub struct RunCache<'a> {
    dir: &'a Path,
}

impl<'a> RunCache<'a> {
    /// The cache in `dir`.
    pub fn new(dir: &'a Path) -> Self {
        RunCache { dir }
    }

    /// The key of a run whose key material is `material`.
    pub fn key(material: &impl Serialize) -> Result<String> {
        let digest = Sha256::digest(serde_json::to_vec(material)?);
        Ok(digest[..8].iter().map(|b| format!("{b:02x}")).collect())
    }

    /// Where the record of `key` lives.
    pub fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    /// The record of `key`, if it is there and parses.
    pub fn get<T: DeserializeOwned>(&self, key: &str) -> Option<T> {
        let text = std::fs::read_to_string(self.path(key)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Writes the record of `key` (atomically: a kill leaves the old file or the new).
    pub fn put<T: Serialize>(&self, key: &str, record: &T) -> Result<()> {
        write_atomically(&self.path(key), &serde_json::to_vec_pretty(record)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys are the first 8 bytes of the SHA-256 of the material's JSON (the committed
    /// caches depend on it), and a record round-trips; an unparsable one is absent.
    #[test]
    fn keys_are_stable_and_records_round_trip() -> Result<()> {
        let material = serde_json::json!({"schema": 1, "lr": 0.5});
        // sha256(b'{"lr":0.5,"schema":1}')[:8], by Python's hashlib.
        assert_eq!(RunCache::key(&material)?, "01a1c5c32b372b61");
        let dir = std::env::temp_dir().join(format!("dp-run-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let cache = RunCache::new(&dir);
        cache.put("k", &vec![1.5f64, 2.0])?;
        assert_eq!(cache.get::<Vec<f64>>("k"), Some(vec![1.5, 2.0]));
        assert_eq!(cache.get::<String>("k"), None);
        assert_eq!(cache.get::<Vec<f64>>("absent"), None);
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
