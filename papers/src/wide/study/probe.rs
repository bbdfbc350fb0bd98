//! What the study measures at each evaluation point: the losses on fixed subsets of the
//! three splits (outside ε: diagnostics of the reproduction, never released by a
//! private run), and how far the embedding has moved — the per-coordinate drift from its
//! initialisation, the rows' size and the dot products the loss is made of.

use serde::{Deserialize, Serialize};

use crate::wide::word2vec::{PairSet, SharedEmbedding};

/// One evaluation point of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Steps taken.
    pub step: u64,
    /// Mean loss on the training subset.
    pub train_loss: f64,
    /// Mean loss on the validation subset (public: the split the tuning reads).
    pub validation_loss: f64,
    /// Mean loss on the test subset.
    pub test_loss: f64,
    /// √(mean over coordinates of (θ − θ₀)²).
    pub drift_rms: f64,
    /// √(mean over rows of ‖e_w‖²).
    pub row_rms: f64,
    /// Mean e_t·e_c over the test subset's (target, context) pairs.
    pub positive_dot: f64,
    /// √(mean (e_t·e_x)²) over the test subset's pairs, context and negatives alike.
    pub dot_rms: f64,
}

/// The fixed subsets the points are measured on.
pub struct EvalSets {
    /// Training samples (the first `n` of the split).
    pub train: PairSet,
    /// Validation samples.
    pub validation: PairSet,
    /// Test samples.
    pub test: PairSet,
}

impl EvalSets {
    /// The first `n` samples of each split.
    pub fn first(train: &PairSet, validation: &PairSet, test: &PairSet, n: usize) -> Self {
        EvalSets {
            train: train.truncated(n),
            validation: validation.truncated(n),
            test: test.truncated(n),
        }
    }

    /// The point of `model` after `step` steps, started from `initial` weights.
    pub fn measure(
        &self,
        model: &SharedEmbedding,
        initial: &[f32],
        step: u64,
    ) -> dp_models::Result<Point> {
        let w = model.weights();
        let drift: f64 = w
            .iter()
            .zip(initial)
            .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
            .sum();
        let squares: f64 = w.iter().map(|&a| f64::from(a).powi(2)).sum();
        let (mut positive, mut squared_dots, mut dots) = (0.0, 0.0, 0usize);
        let test = &self.test;
        for i in 0..test.len() {
            let (t, c) = (test.targets[i], test.contexts[i]);
            let p = model.dot(t, c);
            positive += p;
            squared_dots += p * p;
            for &n in test.negatives_of(i) {
                squared_dots += model.dot(t, n).powi(2);
            }
            dots += 1 + test.negatives_per_sample;
        }
        Ok(Point {
            step,
            train_loss: model.mean_loss(&self.train)?,
            validation_loss: model.mean_loss(&self.validation)?,
            test_loss: model.mean_loss(&self.test)?,
            drift_rms: (drift / w.len() as f64).sqrt(),
            row_rms: (squares / model.vocabulary() as f64).sqrt(),
            positive_dot: positive / test.len().max(1) as f64,
            dot_rms: (squared_dots / dots.max(1) as f64).sqrt(),
        })
    }
}
