//! Word2vec with negative sampling on one shared embedding, as the Wide-network paper
//! trains it (`docs/reproduction/wide.md`, "Experiment"), with sparse per-example gradients, and the
//! Secret Sharer canaries that measure what it memorises.
//!
//! Readings where the paper is silent (all documented in `docs/reproduction/wide.md`):
//! a sample is one (target, context) pair with the context within ±window/2 of the
//! target in the stop-word-free, vocabulary-filtered token stream (so 1 + 1 + 8 rows per
//! sample, the paper's "10 rows"), negatives are drawn once per sample from the training
//! split's unigram^0.75 distribution, and `Pr(w | context)` for canaries is the softmax
//! over the vocabulary of `e_w · mean(e_context)`.

use std::collections::HashMap;

use dp_mechanisms::NoiseSource;

use crate::error::{Error, Result};

/// NLTK's English stop-word list (the alphabetic entries; apostrophised forms never reach
/// the vocabulary, see `parse_brown_file`).
pub const STOP_WORDS: &[&str] = &[
    "i",
    "me",
    "my",
    "myself",
    "we",
    "our",
    "ours",
    "ourselves",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
    "he",
    "him",
    "his",
    "himself",
    "she",
    "her",
    "hers",
    "herself",
    "it",
    "its",
    "itself",
    "they",
    "them",
    "their",
    "theirs",
    "themselves",
    "what",
    "which",
    "who",
    "whom",
    "this",
    "that",
    "these",
    "those",
    "am",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "being",
    "have",
    "has",
    "had",
    "having",
    "do",
    "does",
    "did",
    "doing",
    "a",
    "an",
    "the",
    "and",
    "but",
    "if",
    "or",
    "because",
    "as",
    "until",
    "while",
    "of",
    "at",
    "by",
    "for",
    "with",
    "about",
    "against",
    "between",
    "into",
    "through",
    "during",
    "before",
    "after",
    "above",
    "below",
    "to",
    "from",
    "up",
    "down",
    "in",
    "out",
    "on",
    "off",
    "over",
    "under",
    "again",
    "further",
    "then",
    "once",
    "here",
    "there",
    "when",
    "where",
    "why",
    "how",
    "all",
    "any",
    "both",
    "each",
    "few",
    "more",
    "most",
    "other",
    "some",
    "such",
    "no",
    "nor",
    "not",
    "only",
    "own",
    "same",
    "so",
    "than",
    "too",
    "very",
    "s",
    "t",
    "can",
    "will",
    "just",
    "don",
    "should",
    "now",
    "d",
    "ll",
    "m",
    "o",
    "re",
    "ve",
    "y",
    "ain",
    "aren",
    "couldn",
    "didn",
    "doesn",
    "hadn",
    "hasn",
    "haven",
    "isn",
    "ma",
    "mightn",
    "mustn",
    "needn",
    "shan",
    "shouldn",
    "wasn",
    "weren",
    "won",
    "wouldn",
];

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

    fn push(
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
            return Err(Error::InvalidData("no words to draw negatives from".into()));
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
        return Err(Error::InvalidData(format!(
            "the corpus has {} distinct non-stop words, fewer than the vocabulary of {}",
            ranked.len(),
            config.vocabulary
        )));
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
        return Err(Error::InvalidData(format!(
            "the corpus yields {} (target, context) pairs, fewer than the {needed} requested",
            pairs.len()
        )));
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

/// A per-example gradient: the rows it touches (each once) and their values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SparseGradient {
    /// Row ids, distinct.
    pub rows: Vec<u32>,
    /// `rows.len() × dim` values.
    pub values: Vec<f32>,
    dim: usize,
}

impl SparseGradient {
    fn reset(&mut self, dim: usize) {
        self.rows.clear();
        self.values.clear();
        self.dim = dim;
    }

    /// The row's slot, added (zeroed) if absent.
    fn row_mut(&mut self, row: u32) -> &mut [f32] {
        let d = self.dim;
        let slot = match self.rows.iter().position(|&r| r == row) {
            Some(slot) => slot,
            None => {
                self.rows.push(row);
                self.values.resize(self.values.len() + d, 0.0);
                self.rows.len() - 1
            }
        };
        &mut self.values[slot * d..(slot + 1) * d]
    }

    /// ‖g‖².
    pub fn squared_norm(&self) -> f64 {
        self.values
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum()
    }

    /// Values per row.
    pub fn dim(&self) -> usize {
        self.dim
    }
}

/// One embedding matrix (vocabulary × dim) shared by targets, contexts and negatives.
#[derive(Clone, Debug, PartialEq)]
pub struct SharedEmbedding {
    vocabulary: usize,
    dim: usize,
    weights: Vec<f32>,
}

fn log_sigmoid(x: f64) -> f64 {
    // −softplus(−x), stable for both signs.
    if x >= 0.0 {
        -(-x).exp().ln_1p()
    } else {
        x - x.exp().ln_1p()
    }
}

fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

impl SharedEmbedding {
    /// Weights drawn from N(0, init_std²).
    pub fn new(vocabulary: usize, dim: usize, init_std: f64, rng: &mut NoiseSource) -> Self {
        let mut weights = vec![0.0f32; vocabulary * dim];
        rng.add_gaussian_f32(&mut weights, init_std);
        SharedEmbedding {
            vocabulary,
            dim,
            weights,
        }
    }

    /// From given weights (`vocabulary × dim`, row-major).
    pub fn from_weights(vocabulary: usize, dim: usize, weights: Vec<f32>) -> Result<Self> {
        if weights.len() != vocabulary * dim || dim == 0 {
            return Err(Error::InvalidModel(format!(
                "{} weights for a {vocabulary} × {dim} embedding",
                weights.len()
            )));
        }
        Ok(SharedEmbedding {
            vocabulary,
            dim,
            weights,
        })
    }

    /// Parameters.
    pub fn num_params(&self) -> usize {
        self.weights.len()
    }

    /// Embedding width.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Vocabulary size.
    pub fn vocabulary(&self) -> usize {
        self.vocabulary
    }

    /// The weights.
    pub fn weights(&self) -> &[f32] {
        &self.weights
    }

    /// The weights, to update.
    pub fn weights_mut(&mut self) -> &mut [f32] {
        &mut self.weights
    }

    fn row(&self, word: u32) -> &[f32] {
        let d = self.dim;
        &self.weights[word as usize * d..(word as usize + 1) * d]
    }

    fn dot(&self, a: u32, b: u32) -> f64 {
        self.row(a)
            .iter()
            .zip(self.row(b))
            .map(|(&x, &y)| f64::from(x) * f64::from(y))
            .sum()
    }

    fn check(&self, pairs: &PairSet, i: usize) -> Result<()> {
        let v = self.vocabulary as u32;
        let ok = pairs.targets[i] < v
            && pairs.contexts[i] < v
            && pairs.negatives_of(i).iter().all(|&n| n < v);
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidData(format!(
                "sample {i} names a word outside the vocabulary of {v}"
            )))
        }
    }

    /// `−log σ(e_t·e_c) − Σₙ log σ(−e_t·e_n)` of sample `i`.
    pub fn example_loss(&self, pairs: &PairSet, i: usize) -> Result<f64> {
        self.check(pairs, i)?;
        let t = pairs.targets[i];
        let mut loss = -log_sigmoid(self.dot(t, pairs.contexts[i]));
        for &n in pairs.negatives_of(i) {
            loss -= log_sigmoid(-self.dot(t, n));
        }
        Ok(loss)
    }

    /// Mean loss over `pairs`.
    pub fn mean_loss(&self, pairs: &PairSet) -> Result<f64> {
        let mut total = 0.0;
        for i in 0..pairs.len() {
            total += self.example_loss(pairs, i)?;
        }
        Ok(total / pairs.len().max(1) as f64)
    }

    /// The gradient of sample `i`'s loss, touching only its rows (a repeated word's
    /// contributions are summed into its one row); returns the loss.
    ///
    /// With `s_c = σ(e_t·e_c)` and `s_n = σ(e_t·e_n)`: `∂/∂e_t = −(1 − s_c)e_c + Σ s_n e_n`,
    /// `∂/∂e_c = −(1 − s_c)e_t`, `∂/∂e_n = s_n e_t`.
    pub fn example_gradient(
        &self,
        pairs: &PairSet,
        i: usize,
        out: &mut SparseGradient,
    ) -> Result<f64> {
        self.check(pairs, i)?;
        out.reset(self.dim);
        let (t, c) = (pairs.targets[i], pairs.contexts[i]);
        let positive = self.dot(t, c);
        let pull = (1.0 - sigmoid(positive)) as f32;
        let mut loss = -log_sigmoid(positive);
        let (et, ec) = (self.row(t).to_vec(), self.row(c).to_vec());
        out.row_mut(t)
            .iter_mut()
            .zip(&ec)
            .for_each(|(g, &x)| *g -= pull * x);
        out.row_mut(c)
            .iter_mut()
            .zip(&et)
            .for_each(|(g, &x)| *g -= pull * x);
        for &n in pairs.negatives_of(i) {
            let score = self.dot(t, n);
            loss -= log_sigmoid(-score);
            let push = sigmoid(score) as f32;
            let en = self.row(n).to_vec();
            out.row_mut(t)
                .iter_mut()
                .zip(&en)
                .for_each(|(g, &x)| *g += push * x);
            out.row_mut(n)
                .iter_mut()
                .zip(&et)
                .for_each(|(g, &x)| *g += push * x);
        }
        Ok(loss)
    }

    /// `log Pr(word | context)`: log-softmax over the vocabulary of `e_w · mean(e_ctx)`.
    pub fn log_probability(&self, word: u32, context: &[u32]) -> Result<f64> {
        if context.is_empty() || word as usize >= self.vocabulary {
            return Err(Error::InvalidData(
                "a word and a non-empty context are needed".into(),
            ));
        }
        let mut mean = vec![0.0f64; self.dim];
        for &c in context {
            if c as usize >= self.vocabulary {
                return Err(Error::InvalidData(format!(
                    "context word {c} outside the vocabulary"
                )));
            }
            for (m, &x) in mean.iter_mut().zip(self.row(c)) {
                *m += f64::from(x) / context.len() as f64;
            }
        }
        let logits: Vec<f64> = (0..self.vocabulary as u32)
            .map(|w| {
                self.row(w)
                    .iter()
                    .zip(&mean)
                    .map(|(&x, m)| f64::from(x) * m)
                    .sum()
            })
            .collect();
        let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let log_sum = logits.iter().map(|l| (l - max).exp()).sum::<f64>().ln() + max;
        Ok(logits[word as usize] - log_sum)
    }
}

/// A Secret Sharer canary: three words inserted `copies` times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Canary {
    /// c₀ c₁ c₂.
    pub words: [u32; 3],
    /// n_c.
    pub copies: usize,
}

/// `count` canaries of three words drawn uniformly from the vocabulary, each to be
/// inserted `copies` times.
pub fn random_canaries(
    vocabulary: usize,
    count: usize,
    copies: usize,
    rng: &mut NoiseSource,
) -> Vec<Canary> {
    let mut draw = || ((rng.uniform() * vocabulary as f64) as u32).min(vocabulary as u32 - 1);
    (0..count)
        .map(|_| Canary {
            words: [draw(), draw(), draw()],
            copies,
        })
        .collect()
}

/// Inserts each canary's samples `copies` times into `train`: the phrase `c₀ c₁ c₂` read
/// as a stream gives the (target, context) pairs of every ordered pair of distinct
/// positions within ±window/2 (all six for window ≥ 4), each with fresh negatives. The
/// canary's neighbours in the text are not modelled (it is inserted as its own sentence).
pub fn insert_canaries(
    train: &mut PairSet,
    canaries: &[Canary],
    window: usize,
    noise: &NoiseDistribution,
    rng: &mut NoiseSource,
) {
    let half = (window / 2).max(1);
    for canary in canaries {
        for _ in 0..canary.copies {
            for i in 0..3usize {
                for j in 0..3usize {
                    if i != j && i.abs_diff(j) <= half {
                        train.push(canary.words[i], canary.words[j], noise, rng);
                    }
                }
            }
        }
    }
}

/// Exact Secret Sharer ranks of canaries among every phrase `c₀ c₁′ c₂′` with the same
/// first word and `c₁′ ≠ c₂′` (V(V − 1) phrases, instead of the paper's 10K sample).
///
/// Log-perplexity `P(c) = −log Pr(c₁|c₀) − log Pr(c₂|c₀, c₁)`; the rank of a canary is 1 +
/// the number of reference phrases with a strictly smaller log-perplexity (rank 1 = the
/// most likely phrase), and exposure = log₂|R| − log₂ rank (Carlini et al. 2019, Def. 4).
pub struct CanaryRanker {
    vocabulary: usize,
    /// `E Eᵀ` (vocabulary × vocabulary).
    gram: Vec<f64>,
}

/// Rank and exposure of one canary.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CanaryExposure {
    /// The canary's log-perplexity.
    pub log_perplexity: f64,
    /// 1-based rank among the reference phrases.
    pub rank: u64,
    /// log₂|R| − log₂ rank.
    pub exposure: f64,
}

impl CanaryRanker {
    /// Precomputes the Gram matrix of `model`.
    pub fn new(model: &SharedEmbedding) -> Self {
        let v = model.vocabulary;
        let mut gram = vec![0.0f64; v * v];
        for a in 0..v {
            for b in a..v {
                let d = model.dot(a as u32, b as u32);
                gram[a * v + b] = d;
                gram[b * v + a] = d;
            }
        }
        CanaryRanker {
            vocabulary: v,
            gram,
        }
    }

    /// `log Pr(w | ctx)` for every w, with ctx's logits `Σ_c gram[w, c] / |ctx|`.
    fn log_softmax(&self, context: &[u32]) -> Vec<f64> {
        let v = self.vocabulary;
        let logits: Vec<f64> = (0..v)
            .map(|w| {
                context
                    .iter()
                    .map(|&c| self.gram[w * v + c as usize])
                    .sum::<f64>()
                    / context.len() as f64
            })
            .collect();
        let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let log_sum = logits.iter().map(|l| (l - max).exp()).sum::<f64>().ln() + max;
        logits.into_iter().map(|l| l - log_sum).collect()
    }

    /// All reference log-perplexities for first word `c0`, indexed `c1 * V + c2` (the
    /// diagonal `c1 = c2` is NaN: not a reference phrase).
    pub fn reference_perplexities(&self, c0: u32) -> Vec<f64> {
        let v = self.vocabulary;
        let first = self.log_softmax(&[c0]);
        let mut out = vec![f64::NAN; v * v];
        for c1 in 0..v {
            let second = self.log_softmax(&[c0, c1 as u32]);
            for c2 in 0..v {
                if c1 != c2 {
                    out[c1 * v + c2] = -first[c1] - second[c2];
                }
            }
        }
        out
    }

    /// The canaries' ranks and exposures (canaries sharing a first word share the work).
    pub fn rank(&self, canaries: &[Canary]) -> Result<Vec<CanaryExposure>> {
        let v = self.vocabulary;
        let mut by_first: HashMap<u32, Vec<usize>> = HashMap::new();
        for (i, c) in canaries.iter().enumerate() {
            if c.words.iter().any(|&w| w as usize >= v) {
                return Err(Error::InvalidData(format!(
                    "canary {i} has a word outside the vocabulary"
                )));
            }
            by_first.entry(c.words[0]).or_default().push(i);
        }
        let references = (v * (v - 1)) as f64;
        let mut out = vec![
            CanaryExposure {
                log_perplexity: f64::NAN,
                rank: 0,
                exposure: f64::NAN,
            };
            canaries.len()
        ];
        for (c0, indices) in by_first {
            let table = self.reference_perplexities(c0);
            let first = self.log_softmax(&[c0]);
            for i in indices {
                let [_, c1, c2] = canaries[i].words;
                let second = self.log_softmax(&[c0, c1]);
                let perplexity = -first[c1 as usize] - second[c2 as usize];
                let below = table.iter().filter(|&&p| p < perplexity).count() as u64;
                let rank = below + 1;
                out[i] = CanaryExposure {
                    log_perplexity: perplexity,
                    rank,
                    exposure: references.log2() - (rank as f64).log2(),
                };
            }
        }
        Ok(out)
    }
}
