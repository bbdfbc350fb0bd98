//! IMDB Large Movie Review (Maas et al. 2011) from the canonical `aclImdb_v1.tar.gz`, as
//! keras-style token-id sequences for the GDP paper's IMDB experiment
//! (`docs/reproduction/gdp.md`, "Experiment settings": 10,000 words, length 256).
//!
//! Tokens: lower-cased, `<br />` removed, split at every character that is not a letter,
//! digit or apostrophe. Ids follow keras's `imdb.load_data` convention: 0 pads, 1 starts a
//! review, 2 is out-of-vocabulary, and word rank r (by training-set frequency, ties by the
//! word) gets id r + 3; `num_words` bounds the ids. Sequences are padded and truncated at
//! the front (keras `pad_sequences` defaults). keras's own `imdb.npz` stores its
//! sequences as pickled NumPy object arrays, which this crate does not unpickle: use the
//! archive (or its unpacked `aclImdb/` directory).

use std::collections::HashMap;
use std::path::Path;

use super::locate::{tar_gz_files, ArchiveFile, DataLocator};
use super::Dataset;
use crate::error::{Error, Result};

/// The canonical archive (Stanford AI Lab).
pub const ACL_IMDB: ArchiveFile = ArchiveFile {
    dataset: "imdb",
    name: "aclImdb_v1.tar.gz",
    md5: "7c2ac02c03563afcf9b574c7e56c153a",
    url: "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
};

/// Vocabulary size and sequence length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImdbOptions {
    /// Ids are < `num_words` (rarer words become the OOV id 2).
    pub num_words: usize,
    /// Every sequence has exactly this length.
    pub max_len: usize,
}

impl ImdbOptions {
    /// The GDP paper's setting: 10,000 words, length 256.
    pub const GDP_PAPER: ImdbOptions = ImdbOptions {
        num_words: 10_000,
        max_len: 256,
    };
}

/// One labelled review: `split` is `train` or `test`, `label` 1 for `pos`.
#[derive(Clone, Debug, PartialEq)]
pub struct Review {
    /// `train` or `test`.
    pub split: String,
    /// The file's path inside the archive (reviews are sorted by it).
    pub path: String,
    /// 1 positive, 0 negative.
    pub label: u32,
    /// The raw text.
    pub text: String,
}

fn review_from_path(path: &str, text: String) -> Option<Review> {
    // aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt; `unsup/` and other files skipped.
    let parts: Vec<&str> = path.trim_start_matches("./").split('/').collect();
    match parts.as_slice() {
        [_, split @ ("train" | "test"), class @ ("pos" | "neg"), file]
            if file.ends_with(".txt") =>
        {
            Some(Review {
                split: (*split).to_string(),
                path: path.to_string(),
                label: u32::from(*class == "pos"),
                text,
            })
        }
        _ => None,
    }
}

/// The labelled reviews of an `aclImdb_v1.tar.gz` archive (gzip-compressed tar bytes).
pub fn reviews_from_tar_gz(bytes: &[u8], name: &str) -> Result<Vec<Review>> {
    let files = tar_gz_files(bytes, name, |p| {
        review_from_path(p, String::new()).is_some()
    })?;
    let mut reviews = Vec::with_capacity(files.len());
    for (path, content) in files {
        let text = String::from_utf8(content).map_err(|_| Error::CorruptFile {
            path: name.into(),
            reason: format!("{path} is not UTF-8 text"),
        })?;
        reviews.extend(review_from_path(&path, text));
    }
    reviews.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(reviews)
}

/// The labelled reviews of an unpacked `aclImdb/` directory.
pub fn reviews_from_dir(root: &Path) -> Result<Vec<Review>> {
    let mut reviews = Vec::new();
    for split in ["train", "test"] {
        for class in ["neg", "pos"] {
            let dir = root.join(split).join(class);
            let entries = std::fs::read_dir(&dir).map_err(|source| Error::Io {
                path: dir.clone(),
                source,
            })?;
            for entry in entries {
                let path = entry
                    .map_err(|source| Error::Io {
                        path: dir.clone(),
                        source,
                    })?
                    .path();
                let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
                    path: path.clone(),
                    source,
                })?;
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                let relative = format!("aclImdb/{split}/{class}/{}", name.unwrap_or_default());
                reviews.extend(review_from_path(&relative, text));
            }
        }
    }
    reviews.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(reviews)
}

/// Lower-cased tokens of a review.
pub fn tokenize(text: &str) -> Vec<String> {
    text.replace("<br />", " ")
        .to_lowercase()
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

/// Word → id (rank + 3) for the `num_words − 3` most frequent training words.
pub fn build_vocabulary(reviews: &[Review], num_words: usize) -> HashMap<String, u32> {
    let mut counts: HashMap<String, u64> = HashMap::new();
    for r in reviews.iter().filter(|r| r.split == "train") {
        for t in tokenize(&r.text) {
            *counts.entry(t).or_default() += 1;
        }
    }
    let mut ranked: Vec<(String, u64)> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked
        .into_iter()
        .take(num_words.saturating_sub(3))
        .enumerate()
        .map(|(rank, (word, _))| (word, rank as u32 + 3))
        .collect()
}

/// `[1, ids…]` padded/truncated at the front to `max_len`, OOV → 2.
pub fn encode(text: &str, vocabulary: &HashMap<String, u32>, max_len: usize) -> Vec<u32> {
    let mut ids = vec![1u32];
    ids.extend(
        tokenize(text)
            .iter()
            .map(|t| vocabulary.get(t).copied().unwrap_or(2)),
    );
    if ids.len() >= max_len {
        ids.split_off(ids.len() - max_len)
    } else {
        let mut padded = vec![0; max_len - ids.len()];
        padded.extend(ids);
        padded
    }
}

/// (train, test) datasets of token ids (stored as `f32`, exact below 2²⁴).
pub fn imdb_datasets(reviews: &[Review], options: ImdbOptions) -> (Dataset, Dataset) {
    let vocabulary = build_vocabulary(reviews, options.num_words);
    let make = |split: &str| {
        let mut features = Vec::new();
        let mut labels = Vec::new();
        for r in reviews.iter().filter(|r| r.split == split) {
            features.extend(
                encode(&r.text, &vocabulary, options.max_len)
                    .into_iter()
                    .map(|id| id as f32),
            );
            labels.push(r.label);
        }
        Dataset {
            features,
            labels,
            shape: vec![options.max_len],
            classes: 2,
        }
    };
    (make("train"), make("test"))
}

/// IMDB (train, test) from `locator`: an unpacked `imdb/aclImdb/` directory, else the
/// verified archive (downloaded if allowed).
pub fn load_imdb(locator: &DataLocator, options: ImdbOptions) -> Result<(Dataset, Dataset)> {
    let reviews = match locator.unpacked_dir(ACL_IMDB.dataset, "aclImdb") {
        Some(dir) => reviews_from_dir(&dir)?,
        None => reviews_from_tar_gz(&locator.read_archive(&ACL_IMDB)?, ACL_IMDB.name)?,
    };
    Ok(imdb_datasets(&reviews, options))
}

/// IMDB (train, test), found through [`DataLocator::from_env`].
pub fn imdb(options: ImdbOptions) -> Result<(Dataset, Dataset)> {
    load_imdb(&DataLocator::from_env(), options)
}
