//! The IDX format of MNIST and Fashion-MNIST.

use std::path::Path;

use super::locate::{DataLocator, DatasetFile};
use super::Dataset;
use crate::error::{Error, Result};

/// MNIST (LeCun, Cortes, Burges) files.
pub const MNIST: [DatasetFile; 4] = [
    DatasetFile {
        dataset: "mnist",
        names: &["train-images-idx3-ubyte", "train-images.idx3-ubyte"],
        sha256: "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
        url: "https://ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz",
    },
    DatasetFile {
        dataset: "mnist",
        names: &["train-labels-idx1-ubyte", "train-labels.idx1-ubyte"],
        sha256: "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
        url: "https://ossci-datasets.s3.amazonaws.com/mnist/train-labels-idx1-ubyte.gz",
    },
    DatasetFile {
        dataset: "mnist",
        names: &["t10k-images-idx3-ubyte", "t10k-images.idx3-ubyte"],
        sha256: "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
        url: "https://ossci-datasets.s3.amazonaws.com/mnist/t10k-images-idx3-ubyte.gz",
    },
    DatasetFile {
        dataset: "mnist",
        names: &["t10k-labels-idx1-ubyte", "t10k-labels.idx1-ubyte"],
        sha256: "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
        url: "https://ossci-datasets.s3.amazonaws.com/mnist/t10k-labels-idx1-ubyte.gz",
    },
];

/// Fashion-MNIST (Xiao, Rasul, Vollgraf 2017) files.
pub const FASHION_MNIST: [DatasetFile; 4] = [
    DatasetFile {
        dataset: "fashion-mnist",
        names: &["train-images-idx3-ubyte"],
        sha256: "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
        url:
            "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/train-images-idx3-ubyte.gz",
    },
    DatasetFile {
        dataset: "fashion-mnist",
        names: &["train-labels-idx1-ubyte"],
        sha256: "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
        url:
            "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/train-labels-idx1-ubyte.gz",
    },
    DatasetFile {
        dataset: "fashion-mnist",
        names: &["t10k-images-idx3-ubyte"],
        sha256: "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
        url: "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/t10k-images-idx3-ubyte.gz",
    },
    DatasetFile {
        dataset: "fashion-mnist",
        names: &["t10k-labels-idx1-ubyte"],
        sha256: "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
        url: "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/t10k-labels-idx1-ubyte.gz",
    },
];

fn big_endian_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Parses an IDX3 image file into `(count, rows, cols, pixels)` with pixels scaled to
/// [0, 1] (ToTensor's scaling).
pub fn parse_images(bytes: &[u8], path: &Path) -> Result<(usize, usize, usize, Vec<f32>)> {
    let corrupt = |reason: String| Error::CorruptFile {
        path: path.into(),
        reason,
    };
    if bytes.len() < 16 {
        return Err(corrupt(format!(
            "{} bytes is too short for an IDX3 header",
            bytes.len()
        )));
    }
    let magic = big_endian_u32(bytes, 0);
    if magic != 2051 {
        return Err(corrupt(format!(
            "magic number {magic}, expected 2051 (IDX3 unsigned bytes)"
        )));
    }
    let (n, rows, cols) = (
        big_endian_u32(bytes, 4) as usize,
        big_endian_u32(bytes, 8) as usize,
        big_endian_u32(bytes, 12) as usize,
    );
    let expected = n
        .checked_mul(rows)
        .and_then(|x| x.checked_mul(cols))
        .and_then(|x| x.checked_add(16));
    if expected != Some(bytes.len()) {
        return Err(corrupt(format!(
            "header says {n}×{rows}×{cols} images but the file has {} bytes (truncated?)",
            bytes.len()
        )));
    }
    Ok((
        n,
        rows,
        cols,
        bytes[16..].iter().map(|&b| f32::from(b) / 255.0).collect(),
    ))
}

/// Parses an IDX1 label file.
pub fn parse_labels(bytes: &[u8], path: &Path) -> Result<Vec<u32>> {
    let corrupt = |reason: String| Error::CorruptFile {
        path: path.into(),
        reason,
    };
    if bytes.len() < 8 {
        return Err(corrupt(format!(
            "{} bytes is too short for an IDX1 header",
            bytes.len()
        )));
    }
    let magic = big_endian_u32(bytes, 0);
    if magic != 2049 {
        return Err(corrupt(format!(
            "magic number {magic}, expected 2049 (IDX1 unsigned bytes)"
        )));
    }
    let n = big_endian_u32(bytes, 4) as usize;
    if bytes.len() != n + 8 {
        return Err(corrupt(format!(
            "header says {n} labels but the file has {} bytes (truncated?)",
            bytes.len()
        )));
    }
    Ok(bytes[8..].iter().map(|&b| u32::from(b)).collect())
}

/// Loads train and test splits of an IDX dataset (MNIST or Fashion-MNIST).
pub fn load_idx(locator: &DataLocator, files: &[DatasetFile; 4]) -> Result<(Dataset, Dataset)> {
    let split = |images: &DatasetFile, labels: &DatasetFile| -> Result<Dataset> {
        let name = Path::new(images.names[0]);
        let (n, rows, cols, pixels) = parse_images(&locator.read(images)?, name)?;
        let targets = parse_labels(&locator.read(labels)?, Path::new(labels.names[0]))?;
        if targets.len() != n {
            return Err(Error::CorruptFile {
                path: name.into(),
                reason: format!("{n} images but {} labels", targets.len()),
            });
        }
        Ok(Dataset {
            features: pixels,
            labels: targets,
            shape: vec![1, rows, cols],
            classes: 10,
        })
    };
    Ok((split(&files[0], &files[1])?, split(&files[2], &files[3])?))
}
