//! Where dataset files come from: `DP_DATA_DIR`, then a cache directory, then a
//! checksum-verified download.

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result, Searched};

/// One file of a dataset, identified by the SHA-256 of its *uncompressed* content (the
/// gzip bytes differ between mirrors and repackagings; the content does not).
#[derive(Clone, Copy, Debug)]
pub struct DatasetFile {
    /// The dataset's directory name (`mnist`, `fashion-mnist`, …).
    pub dataset: &'static str,
    /// File names to accept, canonical first (each may also appear with `.gz`).
    pub names: &'static [&'static str],
    /// SHA-256 (hex) of the uncompressed content.
    pub sha256: &'static str,
    /// Canonical download URL (gzip-compressed when it ends in `.gz`).
    pub url: &'static str,
}

/// Finds dataset files: `$DP_DATA_DIR/<dataset>/`, then `<cache>/<dataset>/`, then
/// downloads into the cache and verifies the checksum.
#[derive(Clone, Debug)]
pub struct DataLocator {
    data_dir: Option<PathBuf>,
    cache_dir: Option<PathBuf>,
    allow_download: bool,
    /// How errors name the two directories (`$DP_DATA_DIR`, `~/.cache/dp-rs`, …), so
    /// that a message written into a report carries no path of the machine.
    labels: [Option<String>; 2],
}

impl DataLocator {
    /// From the environment: `DP_DATA_DIR`; cache `DP_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/dp-rs`, else `~/.cache/dp-rs`; downloads unless `DP_OFFLINE=1`.
    pub fn from_env() -> Self {
        let env_path = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let (cache_dir, cache_label) = match (
            env_path("DP_CACHE_DIR"),
            env_path("XDG_CACHE_HOME"),
            env_path("HOME"),
        ) {
            (Some(p), _, _) => (Some(p), "$DP_CACHE_DIR"),
            (None, Some(p), _) => (Some(p.join("dp-rs")), "$XDG_CACHE_HOME/dp-rs"),
            (None, None, Some(p)) => (Some(p.join(".cache").join("dp-rs")), "~/.cache/dp-rs"),
            (None, None, None) => (None, ""),
        };
        DataLocator {
            data_dir: env_path("DP_DATA_DIR").map(|p| Self::resolve_data_dir(&p)),
            cache_dir,
            allow_download: std::env::var("DP_OFFLINE").map_or(true, |v| v != "1"),
            labels: [Some("$DP_DATA_DIR".into()), Some(cache_label.into())],
        }
    }

    /// A relative `DP_DATA_DIR` is tried against the current directory and then each of
    /// its ancestors, first existing match wins (unchanged if none exists): `cargo test`
    /// runs each crate's tests in the crate's directory, so the README's
    /// `DP_DATA_DIR=../shared/data`, meant from the workspace root, must still resolve.
    /// Files are checksum-verified whatever directory they come from.
    pub fn resolve_data_dir(path: &Path) -> PathBuf {
        if path.is_absolute() {
            return path.to_path_buf();
        }
        std::env::current_dir()
            .ok()
            .and_then(|cwd| {
                cwd.ancestors()
                    .map(|base| base.join(path))
                    .find(|candidate| candidate.is_dir())
            })
            .unwrap_or_else(|| path.to_path_buf())
    }

    /// Explicit directories (for tests and embedding).
    pub fn new(
        data_dir: Option<PathBuf>,
        cache_dir: Option<PathBuf>,
        allow_download: bool,
    ) -> Self {
        DataLocator {
            data_dir,
            cache_dir,
            allow_download,
            labels: [None, None],
        }
    }

    /// The directories searched for `dataset`: as paths, and as their variables name them
    /// (`$DP_DATA_DIR/<dataset>`, `~/.cache/dp-rs/<dataset>`; paths where none does).
    fn looked_in(&self, dataset: &str) -> Box<Searched> {
        let mut paths = Vec::new();
        let mut named = Vec::new();
        for (dir, label) in [&self.data_dir, &self.cache_dir]
            .into_iter()
            .zip(&self.labels)
        {
            let Some(dir) = dir else { continue };
            let path = dir.join(dataset).display().to_string();
            named.push(
                label
                    .as_ref()
                    .map_or(path.clone(), |l| format!("{l}/{dataset}")),
            );
            paths.push(path);
        }
        if paths.is_empty() {
            let none = "(DP_DATA_DIR unset and no cache directory)".to_string();
            (paths, named) = (vec![none.clone()], vec![none]);
        }
        Box::new(Searched {
            paths: paths.join(", "),
            named: named.join(", "),
        })
    }

    /// The uncompressed, checksum-verified content of `file`.
    pub fn read(&self, file: &DatasetFile) -> Result<Vec<u8>> {
        for dir in [&self.data_dir, &self.cache_dir].into_iter().flatten() {
            let dir = dir.join(file.dataset);
            for name in file.names {
                for candidate in [dir.join(name), dir.join(format!("{name}.gz"))] {
                    if candidate.is_file() {
                        return read_verified(&candidate, file.sha256);
                    }
                }
            }
        }
        let download = match (&self.cache_dir, self.allow_download) {
            (Some(cache), true) => match download_into(file, &cache.join(file.dataset)) {
                Ok(path) => return read_verified(&path, file.sha256),
                Err(e) => format!("download from {} failed: {e}", file.url),
            },
            (_, false) => "downloads are off (DP_OFFLINE=1)".into(),
            (None, true) => "no cache directory to download into".into(),
        };
        Err(Error::DataNotPresent {
            dataset: file.dataset.into(),
            file: file.names[0].into(),
            looked: self.looked_in(file.dataset),
            download,
        })
    }
}

/// Reads `path` (gunzipping `.gz`), and checks the SHA-256 of the content.
pub fn read_verified(path: &Path, sha256_hex: &str) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.into(),
        source,
    })?;
    let content = if path.extension().is_some_and(|e| e == "gz") {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_end(&mut out)
            .map_err(|e| Error::CorruptFile {
                path: path.into(),
                reason: format!("bad gzip data: {e}"),
            })?;
        out
    } else {
        bytes
    };
    let digest = hex(&Sha256::digest(&content));
    if digest != sha256_hex {
        return Err(Error::CorruptFile {
            path: path.into(),
            reason: format!("sha256 of the content is {digest}, expected {sha256_hex} (truncated or corrupt file?)"),
        });
    }
    Ok(content)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Downloads `file.url` into `dir`, verified before it becomes visible under its name.
fn download_into(file: &DatasetFile, dir: &Path) -> std::result::Result<PathBuf, String> {
    let suffix = if file.url.ends_with(".gz") { ".gz" } else { "" };
    let name = format!("{}{suffix}", file.names[0]);
    fetch(file.url, dir, &name, |p| {
        read_verified(p, file.sha256).map(drop)
    })
}

/// A dataset shipped as one archive (`.tar.gz`, `.zip`), verified by the MD5 its publisher
/// lists for the archive as downloaded (no SHA-256 is published for these).
#[derive(Clone, Copy, Debug)]
pub struct ArchiveFile {
    /// The dataset's directory name.
    pub dataset: &'static str,
    /// The archive's file name.
    pub name: &'static str,
    /// MD5 (hex) of the archive's bytes.
    pub md5: &'static str,
    /// Canonical download URL.
    pub url: &'static str,
}

impl DataLocator {
    /// The verified bytes of `archive`: `$DP_DATA_DIR/<dataset>/<name>`, then the cache,
    /// then a download into the cache.
    pub fn read_archive(&self, archive: &ArchiveFile) -> Result<Vec<u8>> {
        for dir in [&self.data_dir, &self.cache_dir].into_iter().flatten() {
            let candidate = dir.join(archive.dataset).join(archive.name);
            if candidate.is_file() {
                return read_md5_verified(&candidate, archive.md5);
            }
        }
        let download = match (&self.cache_dir, self.allow_download) {
            (Some(cache), true) => {
                let dir = cache.join(archive.dataset);
                match fetch(archive.url, &dir, archive.name, |p| {
                    read_md5_verified(p, archive.md5).map(drop)
                }) {
                    Ok(path) => return read_md5_verified(&path, archive.md5),
                    Err(e) => format!("download from {} failed: {e}", archive.url),
                }
            }
            (_, false) => "downloads are off (DP_OFFLINE=1)".into(),
            (None, true) => "no cache directory to download into".into(),
        };
        Err(Error::DataNotPresent {
            dataset: archive.dataset.into(),
            file: archive.name.into(),
            looked: self.looked_in(archive.dataset),
            download,
        })
    }

    /// The first existing directory `<root>/<dataset>/<relative>` under the data or
    /// cache directory (for datasets a user has already unpacked).
    pub fn unpacked_dir(&self, dataset: &str, relative: &str) -> Option<PathBuf> {
        [&self.data_dir, &self.cache_dir]
            .into_iter()
            .flatten()
            .map(|d| d.join(dataset).join(relative))
            .find(|p| p.is_dir())
    }
}

/// Reads `path` and checks the MD5 of its bytes.
pub fn read_md5_verified(path: &Path, md5_hex: &str) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.into(),
        source,
    })?;
    let digest = hex(&md5::Md5::digest(&bytes));
    if digest != md5_hex {
        return Err(Error::CorruptFile {
            path: path.into(),
            reason: format!("md5 is {digest}, expected {md5_hex} (truncated or corrupt download?)"),
        });
    }
    Ok(bytes)
}

/// Downloads `url` into `dir/name` through a hidden partial file that `verify` must
/// accept before it is renamed into place.
fn fetch(
    url: &str,
    dir: &Path,
    name: &str,
    verify: impl Fn(&Path) -> Result<()>,
) -> std::result::Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let response = ureq::get(url)
        .timeout(std::time::Duration::from_secs(600))
        .call()
        .map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    response
        .into_reader()
        .take(1 << 31)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    let target = dir.join(name);
    let partial = dir.join(format!(".{name}.partial"));
    std::fs::write(&partial, &bytes).map_err(|e| format!("writing {}: {e}", partial.display()))?;
    verify(&partial).map_err(|e| e.to_string())?;
    std::fs::rename(&partial, &target)
        .map_err(|e| format!("renaming into {}: {e}", target.display()))?;
    Ok(target)
}

/// The files of a gzip-compressed tar archive whose path `keep` accepts, as (path, bytes).
pub(crate) fn tar_gz_files(
    bytes: &[u8],
    name: &str,
    keep: impl Fn(&str) -> bool,
) -> Result<Vec<(String, Vec<u8>)>> {
    let corrupt = |reason: String| Error::CorruptFile {
        path: name.into(),
        reason,
    };
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    let mut files = Vec::new();
    for entry in archive.entries().map_err(|e| corrupt(e.to_string()))? {
        let mut entry = entry.map_err(|e| corrupt(e.to_string()))?;
        let path = entry
            .path()
            .map_err(|e| corrupt(e.to_string()))?
            .to_string_lossy()
            .into_owned();
        if !keep(&path) {
            continue;
        }
        let mut content = Vec::new();
        entry
            .read_to_end(&mut content)
            .map_err(|e| corrupt(format!("{path}: {e}")))?;
        files.push((path, content));
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A "data not present" error names the paths searched (for the user at the
    /// terminal) and, in its portable form (for a committed report), the variables
    /// instead, so that no path of the machine that wrote it is kept.
    #[test]
    fn missing_data_is_reported_without_machine_paths() {
        let root = std::env::temp_dir().join("dp-rs-locate-labels");
        let locator = DataLocator {
            data_dir: Some(root.join("data")),
            cache_dir: Some(root.join("cache")),
            allow_download: false,
            labels: [Some("$DP_DATA_DIR".into()), Some("~/.cache/dp-rs".into())],
        };
        let archive = ArchiveFile {
            dataset: "imdb",
            name: "aclImdb_v1.tar.gz",
            md5: "",
            url: "https://example.invalid/aclImdb_v1.tar.gz",
        };
        let error = locator.read_archive(&archive).expect_err("nothing to find");
        let here = root.join("data").join("imdb").display().to_string();
        assert!(error.to_string().contains(&here), "{error}");
        let portable = error.portable();
        assert!(
            portable.contains("$DP_DATA_DIR/imdb, ~/.cache/dp-rs/imdb"),
            "{portable}"
        );
        assert!(
            !portable.contains(&root.display().to_string()),
            "{portable}"
        );
    }
}
