//! The corpus as word2vec samples: vocabulary, (target, context) pairs, negatives.

use std::collections::HashMap;

use dp_mechanisms::NoiseSource;

use dp_models::{Error, Result};

use super::stop_words::STOP_WORDS;

/// How the corpus becomes samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CorpusConfig {
    /// Vocabulary size (most frequent non-stop words).
    pub vocabulary: usize,
    /// Window size: contexts within ±window/2 of the target.
    pub window: usize,
    /// Negatives per sample.
    pub negatives: usize,
    /// Training samples.
    pub train: usize,
    /// Validation samples (public, for tuning, as the paper treats them).
    pub validation: usize,
    /// Test samples.
    pub test: usize,
    /// Seed of the split and the negatives.
    pub seed: u64,
}

impl CorpusConfig {
    /// The paper's sizes: 1,000 words, window 4, 8 negatives, 200K / 100K / 200K.
    pub const WIDE_PAPER: CorpusConfig = CorpusConfig {
        vocabulary: 1000,
        window: 4,
        negatives: 8,
        train: 200_000,
        validation: 100_000,
        test: 200_000,
        seed: 2021,
    };
}

/// Samples: (target, context, negatives).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PairSet {
    /// Target word per sample.
    pub targets: Vec<u32>,
    /// Context word per sample.
    pub contexts: Vec<u32>,
    /// `negatives_per_sample` words per sample, row-major.
    pub negatives: Vec<u32>,
    /// Negatives per sample.
    pub negatives_per_sample: usize,
}

impl PairSet {
    /// Samples.
    pub fn len(&self) -> usize {
        self.targets.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }

    /// The negatives of sample `i`.
    pub fn negatives_of(&self, i: usize) -> &[u32] {
        let k = self.negatives_per_sample;
        &self.negatives[i * k..(i + 1) * k]
    }

    /// The first `n` samples (smoke runs).
    pub fn truncated(&self, n: usize) -> PairSet {
        let n = n.min(self.len());
        let k = self.negatives_per_sample;
        PairSet {
            targets: self.targets[..n].to_vec(),
            contexts: self.contexts[..n].to_vec(),
            negatives: self.negatives[..n * k].to_vec(),
            negatives_per_sample: k,
        }
    }

    pub(super) fn push(
        &mut self,
        target: u32,
        context: u32,
        negatives: &NoiseDistribution,
        rng: &mut NoiseSource,
    ) {
        self.targets.push(target);
        self.contexts.push(context);
        for _ in 0..self.negatives_per_sample {
            self.negatives.push(negatives.draw_excluding(target, rng));
        }
    }
}

/// The unigram^0.75 negative-sampling distribution of the training targets.
#[derive(Clone, Debug, PartialEq)]
pub struct NoiseDistribution {
    cdf: Vec<f64>,
}

impl NoiseDistribution {
    /// From word counts.
    pub fn from_counts(counts: &[u64]) -> Result<Self> {
        let mut total = 0.0;
        let cdf: Vec<f64> = counts
            .iter()
            .map(|&c| {
                total += (c as f64).powf(0.75);
                total
            })
            .collect();
        if total <= 0.0 {
            return Err(Error::invalid_data(
                "corpus",
                "no words to draw negatives from",
            ));
        }
        Ok(NoiseDistribution {
            cdf: cdf.into_iter().map(|c| c / total).collect(),
        })
    }

    /// One draw, redrawn (up to 32 times) while it equals `target`.
    pub fn draw_excluding(&self, target: u32, rng: &mut NoiseSource) -> u32 {
        let mut word = target;
        for _ in 0..32 {
            let u = rng.uniform();
            word = self
                .cdf
                .partition_point(|&c| c <= u)
                .min(self.cdf.len() - 1) as u32;
            if word != target {
                break;
            }
        }
        word
    }
}

/// The corpus as samples.
#[derive(Clone, Debug)]
pub struct Word2VecData {
    /// Words by id (most frequent first).
    pub vocabulary: Vec<String>,
    /// Training samples.
    pub train: PairSet,
    /// Validation samples.
    pub validation: PairSet,
    /// Test samples.
    pub test: PairSet,
    /// The negative-sampling distribution (from the training split).
    pub noise: NoiseDistribution,
}

/// Builds the samples: drop stop words, keep the `vocabulary` most frequent words (ties
/// broken alphabetically), drop the other words from the stream, pair every target with
/// each context within ±window/2 inside its document, shuffle under the seed, split, and
/// draw the negatives.
pub fn build_word2vec_data(
    documents: &[Vec<String>],
    config: &CorpusConfig,
) -> Result<Word2VecData> {
    let stop: std::collections::HashSet<&str> = STOP_WORDS.iter().copied().collect();
    let mut counts: HashMap<&str, u64> = HashMap::new();
    for word in documents.iter().flatten() {
        if !stop.contains(word.as_str()) {
            *counts.entry(word.as_str()).or_default() += 1;
        }
    }
    let mut ranked: Vec<(&str, u64)> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    if ranked.len() < config.vocabulary {
        return Err(Error::invalid_data(
            "corpus",
            format!(
                "the corpus has {} distinct non-stop words, fewer than the vocabulary of {}",
                ranked.len(),
                config.vocabulary
            ),
        ));
    }
    ranked.truncate(config.vocabulary);
    let vocabulary: Vec<String> = ranked.iter().map(|(w, _)| w.to_string()).collect();
    let ids: HashMap<&str, u32> = ranked
        .iter()
        .enumerate()
        .map(|(i, (w, _))| (*w, i as u32))
        .collect();
    let half = (config.window / 2).max(1);
    let mut pairs: Vec<(u32, u32)> = Vec::new();
    for document in documents {
        let stream: Vec<u32> = document
            .iter()
            .filter_map(|w| ids.get(w.as_str()).copied())
            .collect();
        for (i, &target) in stream.iter().enumerate() {
            let lo = i.saturating_sub(half);
            let hi = (i + half).min(stream.len() - 1);
            for (j, &context) in stream.iter().enumerate().take(hi + 1).skip(lo) {
                if j != i {
                    pairs.push((target, context));
                }
            }
        }
    }
    let needed = config.train + config.validation + config.test;
    if pairs.len() < needed {
        return Err(Error::invalid_data(
            "corpus",
            format!(
                "the corpus yields {} (target, context) pairs, fewer than the {needed} requested",
                pairs.len()
            ),
        ));
    }
    let mut rng = NoiseSource::seeded(config.seed);
    shuffle(&mut pairs, &mut rng);
    let mut target_counts = vec![0u64; config.vocabulary];
    for &(t, _) in &pairs[..config.train] {
        target_counts[t as usize] += 1;
    }
    let noise = NoiseDistribution::from_counts(&target_counts)?;
    let mut split = |range: std::ops::Range<usize>| {
        let mut set = PairSet {
            negatives_per_sample: config.negatives,
            ..PairSet::default()
        };
        for &(t, c) in &pairs[range] {
            set.push(t, c, &noise, &mut rng);
        }
        set
    };
    let train = split(0..config.train);
    let validation = split(config.train..config.train + config.validation);
    let test = split(config.train + config.validation..needed);
    Ok(Word2VecData {
        vocabulary,
        train,
        validation,
        test,
        noise,
    })
}

fn shuffle<T>(items: &mut [T], rng: &mut NoiseSource) {
    for i in (1..items.len()).rev() {
        let j = ((rng.uniform() * (i + 1) as f64) as usize).min(i);
        items.swap(i, j);
    }
}
