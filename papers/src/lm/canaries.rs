//! Secret Sharer canaries (Carlini, Liu, Erlingsson, Kos & Song 2019, "The Secret Sharer",
//! §3–4): a fixed prefix followed by a secret of random tokens, inserted into the training
//! set a given number of times. After training, a canary's exposure is
//! `log₂|R| − log₂ rank`, its rank being that of its log-perplexity among all secrets R;
//! here R is estimated by `n` secrets drawn uniformly (§4.2's sampling estimate):
//! `exposure ≈ −log₂((1 + #{candidates with lower loss}) / (n + 1))`, at most
//! `log₂(n + 1)`. A secret the model never saw ranks uniformly: its expected exposure is
//! `1/ln 2 ≈ 1.44` bits.

use anyhow::Result;
use dp_mechanisms::NoiseSource;
use serde::{Deserialize, Serialize};

use super::model::LmModel;
use super::rows::TokenRows;

/// A canary's format: `prefix` then `secret_len` tokens drawn uniformly from the
/// vocabulary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretFormat {
    /// The fixed prefix's token ids.
    pub prefix: Vec<u32>,
    /// Random tokens after it.
    pub secret_len: usize,
    /// Vocabulary size.
    pub vocab: usize,
}

impl SecretFormat {
    /// A fresh sequence of this format.
    pub fn draw(&self, rng: &mut NoiseSource) -> Vec<u32> {
        let mut tokens = self.prefix.clone();
        tokens.extend((0..self.secret_len).map(|_| rng.index_below(self.vocab) as u32));
        tokens
    }

    /// Tokens in a sequence of this format.
    pub fn len(&self) -> usize {
        self.prefix.len() + self.secret_len
    }

    /// Whether sequences are empty (never, for a usable format).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows of `sequences`, scored on the secret only (the prefix's predictions ignored).
    pub fn rows(&self, sequences: &[Vec<u32>]) -> Result<TokenRows> {
        let refs: Vec<&[u32]> = sequences.iter().map(Vec::as_slice).collect();
        let skip = vec![self.prefix.len().saturating_sub(1); refs.len()];
        TokenRows::new(&refs, &skip, self.len(), self.vocab)
    }
}

/// One canary: its tokens and how many times it was inserted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Canary {
    /// Prefix and secret.
    pub tokens: Vec<u32>,
    /// Insertions n_c (0: a control, never inserted).
    pub copies: usize,
}

/// `per_count` canaries for each insertion count of `copies`.
pub fn draw_canaries(
    format: &SecretFormat,
    copies: &[usize],
    per_count: usize,
    rng: &mut NoiseSource,
) -> Vec<Canary> {
    copies
        .iter()
        .flat_map(|&c| std::iter::repeat_n(c, per_count))
        .map(|copies| Canary {
            tokens: format.draw(rng),
            copies,
        })
        .collect()
}

/// A canary's measured exposure.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Exposure {
    /// Insertions.
    pub copies: usize,
    /// Candidates with a lower loss than the canary's.
    pub below: usize,
    /// Candidates drawn.
    pub candidates: usize,
    /// `−log₂((1 + below) / (candidates + 1))` bits.
    pub bits: f64,
}

/// Each canary's exposure under `model` against `candidates` secrets drawn from `rng`
/// (the same candidates for every canary; a candidate equal to a canary is kept: with
/// |R| = V^k it is vanishingly rare).
pub fn exposures(
    model: &LmModel,
    format: &SecretFormat,
    canaries: &[Canary],
    candidates: usize,
    rng: &mut NoiseSource,
    batch: usize,
) -> Result<Vec<Exposure>> {
    let drawn: Vec<Vec<u32>> = (0..candidates).map(|_| format.draw(rng)).collect();
    let mut reference = model.row_losses(&format.rows(&drawn)?, batch)?;
    reference.sort_by(f64::total_cmp);
    let own: Vec<Vec<u32>> = canaries.iter().map(|c| c.tokens.clone()).collect();
    let losses = model.row_losses(&format.rows(&own)?, batch)?;
    Ok(canaries
        .iter()
        .zip(losses)
        .map(|(c, loss)| {
            let below = reference.partition_point(|&r| r < loss);
            Exposure {
                copies: c.copies,
                below,
                candidates,
                bits: exposure_bits(below, candidates),
            }
        })
        .collect())
}

/// `−log₂((1 + below) / (candidates + 1))`.
pub fn exposure_bits(below: usize, candidates: usize) -> f64 {
    ((candidates + 1) as f64 / (below + 1) as f64).log2()
}

/// The largest expected exposure of a canary inserted `copies` times into an (ε, δ)-DP
/// training run, measured against `candidates` secrets:
/// `(kε + 1)/ln 2 + k·e^((k−1)ε)·δ·log₂(n + 1)` for k = `copies`.
///
/// Why: k insertions are a group of k, (kε, k·e^((k−1)ε)δ)-DP (group privacy, Dwork & Roth
/// 2014, Theorem 2.2 for ε; the δ term by the usual induction). Without the canary the
/// model is independent of its secret, so the canary's rank among itself and n candidates
/// is uniform and `P[exposure ≥ x] ≤ 2^(−x)`. Exposure ≥ x is an event of the trained
/// model (and of fresh candidates), so with the canary `P[exposure ≥ x] ≤ e^(kε)·2^(−x) + δₖ`.
/// Integrating `min(1, ·)` over x ∈ [0, log₂(n + 1)] (exposure is at most that) gives the
/// bound. It holds in expectation over training and the draws; the mean of a few canaries
/// can exceed it by chance.
pub fn exposure_bound(epsilon: f64, delta: f64, copies: usize, candidates: usize) -> f64 {
    let k = copies as f64;
    let group_delta = k * ((k - 1.0).max(0.0) * epsilon).exp() * delta;
    let cap = ((candidates + 1) as f64).log2();
    ((k * epsilon + 1.0) / std::f64::consts::LN_2 + group_delta * cap).min(cap)
}

/// The mean exposure of the canaries inserted `copies` times (NaN if none).
pub fn mean_exposure(exposures: &[Exposure], copies: usize) -> f64 {
    let bits: Vec<f64> = exposures
        .iter()
        .filter(|e| e.copies == copies)
        .map(|e| e.bits)
        .collect();
    bits.iter().sum::<f64>() / bits.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposure_is_bits_of_rank() {
        assert_eq!(exposure_bits(0, 1023), 10.0);
        assert_eq!(exposure_bits(1023, 1023), 0.0);
        assert!((exposure_bits(511, 1023) - 1.0).abs() < 1e-12);
    }

    /// ε = 0 (a run that ignores its data) allows only the never-seen level, 1/ln 2 bits;
    /// the bound grows with ε and insertions, and never exceeds the measurable maximum.
    #[test]
    fn exposure_bound_is_the_never_seen_level_at_zero_epsilon() {
        assert!((exposure_bound(0.0, 0.0, 1, 10_000) - std::f64::consts::LOG2_E).abs() < 1e-12);
        assert!((exposure_bound(3.0, 0.0, 1, 10_000) - 4.0 / std::f64::consts::LN_2).abs() < 1e-12);
        assert!(exposure_bound(3.0, 1e-5, 10, 10_000) > exposure_bound(3.0, 1e-5, 1, 10_000));
        assert_eq!(exposure_bound(3.0, 1e-5, 100, 10_000), 10_001f64.log2());
    }

    #[test]
    fn canaries_follow_the_format() {
        let format = SecretFormat {
            prefix: vec![7, 8],
            secret_len: 3,
            vocab: 50,
        };
        let mut rng = NoiseSource::seeded(1);
        let c = draw_canaries(&format, &[0, 1, 10], 2, &mut rng);
        assert_eq!(c.len(), 6);
        assert!(c
            .iter()
            .all(|c| c.tokens.len() == 5 && c.tokens[..2] == [7, 8]));
        assert_eq!(
            c.iter().map(|c| c.copies).collect::<Vec<_>>(),
            [0, 0, 1, 1, 10, 10]
        );
        assert_ne!(c[0].tokens, c[1].tokens);
        let e = [
            Exposure {
                copies: 1,
                below: 0,
                candidates: 3,
                bits: 2.0,
            },
            Exposure {
                copies: 1,
                below: 1,
                candidates: 3,
                bits: 1.0,
            },
        ];
        assert_eq!(mean_exposure(&e, 1), 1.5);
        assert!(mean_exposure(&e, 10).is_nan());
    }
}
