//! Datasets: where their files are found, and their loaders.

mod adult;
mod brown;
mod cifar;
mod idx;
mod imdb;
mod locate;
mod movielens;

pub use adult::{
    adult, load_adult, parse_adult, AdultBinariser, AdultRecord, AdultSplit, ADULT, ADULT_FEATURES,
};
pub use brown::{
    brown, brown_file_text, brown_from_tar_gz, brown_texts, brown_texts_from_tar_gz, load_brown,
    load_brown_texts, parse_brown_file, BrownText, BROWN,
};
pub use cifar::{
    cifar10, cifar10_from_dir, cifar10_from_tar_gz, load_cifar10, parse_cifar10_records, CIFAR10,
};
pub use idx::{load_idx, parse_images, parse_labels, FASHION_MNIST, MNIST};
pub use imdb::{
    build_vocabulary, encode, imdb, imdb_datasets, load_imdb, reviews_from_dir,
    reviews_from_tar_gz, tokenize, ImdbOptions, Review, ACL_IMDB,
};
pub use locate::{read_md5_verified, read_verified, ArchiveFile, DataLocator, DatasetFile};
pub use movielens::{
    load_movielens_1m, movielens_1m, movielens_datasets, parse_ratings, ratings_from_zip,
    MovieLensShape, Rating, MOVIELENS_1M,
};

use candle_core::{Device, Tensor};

use crate::error::{Error, Result};

/// A labelled dataset held in memory: `features` row-major, one example per row.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    /// All examples, `len() × shape.product()` values.
    pub features: Vec<f32>,
    /// One class label per example.
    pub labels: Vec<u32>,
    /// The shape of one example (channels, height, width for images).
    pub shape: Vec<usize>,
    /// The number of classes.
    pub classes: usize,
}

impl Dataset {
    /// The number of examples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether it has no examples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Values per example.
    pub fn example_size(&self) -> usize {
        self.shape.iter().product()
    }

    /// Checks that the dataset is consistent: `features` holds `len() × example_size()`
    /// finite values, `classes ≥ 1` and every label is below `classes`. The error names
    /// the first bad record by its index.
    pub fn validate(&self) -> Result<()> {
        let size = self.example_size();
        if size == 0 || self.features.len() != self.len() * size {
            return Err(Error::invalid_data(
                "dataset",
                format!(
                    "{} feature values for {} records of {size} values each",
                    self.features.len(),
                    self.len()
                ),
            ));
        }
        if self.classes == 0 {
            return Err(Error::invalid_data("dataset", "the dataset has 0 classes"));
        }
        if let Some(i) = self.labels.iter().position(|&y| y as usize >= self.classes) {
            return Err(Error::invalid_data(
                "dataset",
                format!(
                    "record {i} has label {} but there are {} classes",
                    self.labels[i], self.classes
                ),
            ));
        }
        if let Some(j) = self.features.iter().position(|v| !v.is_finite()) {
            return Err(Error::invalid_data(
                "dataset",
                format!(
                    "record {} has a non-finite feature ({}) at position {}",
                    j / size,
                    self.features[j],
                    j % size
                ),
            ));
        }
        Ok(())
    }

    /// SHA-256 of the shape, class count, labels and features (little-endian), in hex: two
    /// datasets with the same digest are the same data.
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut hash = Sha256::new();
        for &d in &self.shape {
            hash.update((d as u64).to_le_bytes());
        }
        hash.update((self.classes as u64).to_le_bytes());
        hash.update((self.len() as u64).to_le_bytes());
        for &y in &self.labels {
            hash.update(y.to_le_bytes());
        }
        for chunk in self.features.chunks(1 << 14) {
            let bytes: Vec<u8> = chunk.iter().flat_map(|v| v.to_le_bytes()).collect();
            hash.update(&bytes);
        }
        hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The examples `batch` (indices into this set) as one `(B, example_size)` tensor on
    /// the CPU, and their labels.
    pub fn gather(&self, batch: &[usize]) -> Result<(Tensor, Vec<u32>)> {
        let size = self.example_size();
        if let Some(&i) = batch.iter().find(|&&i| i >= self.len()) {
            return Err(Error::invalid_data(
                "dataset",
                format!(
                    "example {i} requested from a dataset of {} records",
                    self.len()
                ),
            ));
        }
        let mut features = Vec::with_capacity(batch.len() * size);
        for &i in batch {
            features.extend_from_slice(&self.features[i * size..][..size]);
        }
        let labels = batch.iter().map(|&i| self.labels[i]).collect();
        Ok((
            Tensor::from_vec(features, (batch.len(), size), &Device::Cpu)?,
            labels,
        ))
    }

    /// The first `n` examples (for smoke runs).
    pub fn truncated(&self, n: usize) -> Dataset {
        let n = n.min(self.len());
        Dataset {
            features: self.features[..n * self.example_size()].to_vec(),
            labels: self.labels[..n].to_vec(),
            shape: self.shape.clone(),
            classes: self.classes,
        }
    }
}

/// MNIST (train, test), found through [`DataLocator::from_env`].
pub fn mnist() -> Result<(Dataset, Dataset)> {
    load_idx(&DataLocator::from_env(), &MNIST)
}

/// Fashion-MNIST (train, test), found through [`DataLocator::from_env`].
pub fn fashion_mnist() -> Result<(Dataset, Dataset)> {
    load_idx(&DataLocator::from_env(), &FASHION_MNIST)
}
