//! Secret Sharer canaries: insertion and exact exposure.

use std::collections::HashMap;

use dp_mechanisms::NoiseSource;

use dp_models::{Error, Result};

use super::corpus::{NoiseDistribution, PairSet};
use super::embedding::SharedEmbedding;

/// A Secret Sharer canary: three words inserted `copies` times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Canary {
    /// c₀ c₁ c₂.
    pub words: [u32; 3],
    /// n_c, how many times the canary is inserted into the training pairs.
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
        let v = model.vocabulary();
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
                return Err(Error::invalid_data(
                    "canaries",
                    format!("canary {i} has a word outside the vocabulary"),
                ));
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
