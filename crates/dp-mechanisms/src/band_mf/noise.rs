//! The correlated noise of a banded strategy, streamed: step t adds
//! `x_t = (z_t − Σ_{1≤j<b} c_j x_{t−j}) / c_0` with fresh `z_t ~ N(0, std² I)`, i.e.
//! `x = C⁻¹ z`, keeping only the last b − 1 noise vectors (O(b·d) memory).

use super::strategy::BandedToeplitz;
use crate::error::{Error, Result};
use crate::noise::NoiseSource;

/// The noise stream of one run: the strategy, the per-coordinate standard deviation of z,
/// and the last b − 1 noise vectors (newest first).
#[derive(Clone, Debug)]
pub struct CorrelatedNoise {
    strategy: BandedToeplitz,
    std: f64,
    history: Vec<Vec<f64>>,
}

impl CorrelatedNoise {
    /// A stream for `strategy` with `z_t ~ N(0, std² I)` (std: the noise multiplier times
    /// the clip norm times the strategy's sensitivity).
    pub fn new(strategy: BandedToeplitz, std: f64) -> Self {
        CorrelatedNoise {
            strategy,
            std,
            history: Vec::new(),
        }
    }

    /// [`new`](Self::new), continuing a stream whose last noise vectors (newest first)
    /// were `history`: at most b − 1 of them, all of one length.
    pub fn with_history(
        strategy: BandedToeplitz,
        std: f64,
        history: Vec<Vec<f64>>,
    ) -> Result<Self> {
        let width = history.first().map_or(0, Vec::len);
        if history.len() >= strategy.bands().max(1) || history.iter().any(|h| h.len() != width) {
            return Err(Error::InvalidParameter {
                name: "history",
                value: history.len() as f64,
                reason: "must hold at most bands - 1 noise vectors of one length",
            });
        }
        Ok(CorrelatedNoise {
            strategy,
            std,
            history,
        })
    }

    /// Steps emitted that the next one still depends on (at most b − 1).
    pub fn remembered(&self) -> usize {
        self.history.len()
    }

    /// The last b − 1 noise vectors, newest first (secret in production: they are the
    /// noise of released steps).
    pub fn history(&self) -> &[Vec<f64>] {
        &self.history
    }

    /// The standard deviation of each coordinate of z.
    pub fn std(&self) -> f64 {
        self.std
    }

    /// The strategy.
    pub fn strategy(&self) -> &BandedToeplitz {
        &self.strategy
    }

    /// Adds this step's noise `x_t` to `buffer` (one entry per coordinate; every call must
    /// pass the same length), drawing `z_t` from `source`.
    pub fn add_next(&mut self, source: &mut NoiseSource, buffer: &mut [f64]) {
        let mut x = vec![0.0; buffer.len()];
        source.add_gaussian_f64(&mut x, self.std);
        let coefs = self.strategy.coefs();
        for (j, past) in self.history.iter().enumerate() {
            let c = coefs[j + 1];
            x.iter_mut().zip(past).for_each(|(v, p)| *v -= c * p);
        }
        let c0 = coefs[0];
        x.iter_mut().for_each(|v| *v /= c0);
        buffer.iter_mut().zip(&x).for_each(|(b, v)| *b += v);
        self.history.insert(0, x);
        self.history.truncate(coefs.len() - 1);
    }
}
