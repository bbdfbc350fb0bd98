//! CIFAR-10 (Krizhevsky 2009) in its binary format: `cifar-10-binary.tar.gz` holds
//! `cifar-10-batches-bin/data_batch_{1..5}.bin` and `test_batch.bin`, each record one
//! label byte and 3,072 pixel bytes (the red, green and blue 32×32 planes).
//!
//! Pixels are scaled to [0, 1] and normalised per channel with the mean (0.485, 0.456,
//! 0.406) and standard deviation (0.229, 0.224, 0.225) that Tramèr & Boneh's code (and so
//! SA-DPSGD) uses (`docs/reproduction/sa-dpsgd.md`, "Experimental setup"); images stay NCHW.

use std::path::Path;

use super::locate::{tar_gz_files, ArchiveFile, DataLocator};
use super::Dataset;
use crate::error::{Error, Result};

/// The canonical archive (University of Toronto).
pub const CIFAR10: ArchiveFile = ArchiveFile {
    dataset: "cifar10",
    name: "cifar-10-binary.tar.gz",
    md5: "c32a1d4ab5d03f1284b67883e8d87530",
    url: "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
};

const RECORD: usize = 1 + 3 * 32 * 32;
const MEAN: [f32; 3] = [0.485, 0.456, 0.406];
const STD: [f32; 3] = [0.229, 0.224, 0.225];
const TRAIN_FILES: [&str; 5] = [
    "data_batch_1.bin",
    "data_batch_2.bin",
    "data_batch_3.bin",
    "data_batch_4.bin",
    "data_batch_5.bin",
];
const TEST_FILE: &str = "test_batch.bin";

/// Parses concatenated CIFAR-10 binary records into a normalised dataset.
pub fn parse_cifar10_records(bytes: &[u8], name: &str) -> Result<Dataset> {
    if bytes.is_empty() || !bytes.len().is_multiple_of(RECORD) {
        return Err(Error::CorruptFile {
            path: name.into(),
            reason: format!(
                "{} bytes is not a whole number of {RECORD}-byte records (truncated file?)",
                bytes.len()
            ),
        });
    }
    let n = bytes.len() / RECORD;
    let mut features = Vec::with_capacity(n * (RECORD - 1));
    let mut labels = Vec::with_capacity(n);
    for (i, record) in bytes.chunks_exact(RECORD).enumerate() {
        if record[0] > 9 {
            return Err(Error::CorruptFile {
                path: name.into(),
                reason: format!("record {i}: label {} is not in 0..=9", record[0]),
            });
        }
        labels.push(u32::from(record[0]));
        for (c, plane) in record[1..].chunks_exact(1024).enumerate() {
            features.extend(
                plane
                    .iter()
                    .map(|&p| (f32::from(p) / 255.0 - MEAN[c]) / STD[c]),
            );
        }
    }
    Ok(Dataset {
        features,
        labels,
        shape: vec![3, 32, 32],
        classes: 10,
    })
}

fn split(files: Vec<(String, Vec<u8>)>, name: &str) -> Result<(Dataset, Dataset)> {
    let find = |wanted: &str| {
        files
            .iter()
            .find(|(path, _)| path.rsplit('/').next() == Some(wanted))
            .map(|(_, bytes)| bytes.as_slice())
            .ok_or_else(|| Error::CorruptFile {
                path: name.into(),
                reason: format!("{wanted} is missing"),
            })
    };
    let mut train = Vec::new();
    for file in TRAIN_FILES {
        train.extend_from_slice(find(file)?);
    }
    Ok((
        parse_cifar10_records(&train, "data_batch_*.bin")?,
        parse_cifar10_records(find(TEST_FILE)?, TEST_FILE)?,
    ))
}

/// (train, test) from the bytes of `cifar-10-binary.tar.gz`.
pub fn cifar10_from_tar_gz(bytes: &[u8], name: &str) -> Result<(Dataset, Dataset)> {
    split(tar_gz_files(bytes, name, |p| p.ends_with(".bin"))?, name)
}

/// (train, test) from an unpacked `cifar-10-batches-bin/` directory.
pub fn cifar10_from_dir(dir: &Path) -> Result<(Dataset, Dataset)> {
    let mut files = Vec::new();
    for file in TRAIN_FILES.iter().chain(&[TEST_FILE]) {
        let path = dir.join(file);
        let bytes = std::fs::read(&path).map_err(|source| Error::Io { path, source })?;
        files.push((file.to_string(), bytes));
    }
    split(files, &dir.display().to_string())
}

/// CIFAR-10 (train 50,000, test 10,000) from `locator`: an unpacked
/// `cifar10/cifar-10-batches-bin/`, else the verified archive (downloaded if allowed).
pub fn load_cifar10(locator: &DataLocator) -> Result<(Dataset, Dataset)> {
    match locator.unpacked_dir(CIFAR10.dataset, "cifar-10-batches-bin") {
        Some(dir) => cifar10_from_dir(&dir),
        None => cifar10_from_tar_gz(&locator.read_archive(&CIFAR10)?, CIFAR10.name),
    }
}

/// CIFAR-10, found through [`DataLocator::from_env`].
pub fn cifar10() -> Result<(Dataset, Dataset)> {
    load_cifar10(&DataLocator::from_env())
}
