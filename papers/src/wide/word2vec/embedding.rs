//! The shared embedding and its sparse per-example gradients.

use dp_mechanisms::NoiseSource;

use dp_models::{Error, Result};

use super::corpus::PairSet;

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
            return Err(Error::invalid_model(
                "shared embedding",
                format!(
                    "{} weights for a {vocabulary} × {dim} embedding",
                    weights.len()
                ),
            ));
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

    /// e_a · e_b.
    pub fn dot(&self, a: u32, b: u32) -> f64 {
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
            Err(Error::invalid_data(
                "word pairs",
                format!("sample {i} names a word outside the vocabulary of {v}"),
            ))
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
            return Err(Error::invalid_data(
                "word pairs",
                "a word and a non-empty context are needed",
            ));
        }
        let mut mean = vec![0.0f64; self.dim];
        for &c in context {
            if c as usize >= self.vocabulary {
                return Err(Error::invalid_data(
                    "word pairs",
                    format!("context word {c} outside the vocabulary"),
                ));
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
