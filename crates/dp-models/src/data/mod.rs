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
pub use brown::{brown, brown_from_tar_gz, load_brown, parse_brown_file, BROWN};
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

use crate::error::Result;

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
