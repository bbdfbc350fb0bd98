//! An empirical privacy audit of a training run, in one run (Steinke, Nasr & Jagielski
//! 2023, "Privacy auditing with one (1) training run"), with Dirac canaries.
//!
//! `m` canary records are each included in the training set independently with
//! probability ½. Canary `j` is the input `s·e_{d₀+j}` — a coordinate no other record
//! uses — with a random label, so its gradient lives in its own column of a linear
//! model's weights and nothing but the canary itself and the noise moves that column.
//! After training, the auditor scores each canary by how far the model moved its logit
//! for the canary's label (relative to the other classes, against the initial model),
//! guesses "included" for the highest scores and "excluded" for the lowest, and turns
//! the number of correct guesses into a lower bound on ε that holds with the stated
//! confidence for any (ε, δ)-DP training algorithm
//! ([`dp_accounting::one_run_epsilon_lower_bound`]). A correct engine's bound stays
//! below its claimed ε; an engine that adds no noise or skips clipping is caught.

use dp_accounting::{one_run_epsilon_lower_bound, AuditOutcome};
use dp_mechanisms::NoiseSource;
use dp_models::data::Dataset;
use dp_models::models::{mlp, Activation, Network};
use dp_models::Classifier;
use serde::{Deserialize, Serialize};

use crate::config::TrainConfig;
use crate::engine::PrivacyEngine;
use crate::error::{Error, Result};
use dp_accounting::validate;

/// The audit's design: the data around the canaries, the canaries and the guesses.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CanaryAudit {
    /// Ordinary (non-canary) training records.
    pub records: usize,
    /// Their features (the canaries use `canaries` further coordinates).
    pub features: usize,
    /// Classes of the linear model.
    pub classes: usize,
    /// m: canaries, each included with probability ½.
    pub canaries: usize,
    /// r: guesses, half "included" (highest scores), half "excluded" (lowest); fixed
    /// before training, as the theorem requires.
    pub guesses: usize,
    /// The canary input's magnitude `s` (large enough that its gradient is clipped).
    pub scale: f32,
    /// The probability with which the lower bound holds.
    pub confidence: f64,
}

impl Default for CanaryAudit {
    fn default() -> Self {
        CanaryAudit {
            records: 1000,
            features: 10,
            classes: 10,
            canaries: 1000,
            guesses: 200,
            scale: 10.0,
            confidence: 0.95,
        }
    }
}

/// What an audit found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditReport {
    /// ε the engine's ledger claims at `delta`.
    pub claimed_epsilon: f64,
    /// The audited lower bound on ε at `delta`, holding with `confidence`.
    pub lower_bound: f64,
    /// δ ∈ (0, 1) at which the claimed ε is read.
    pub delta: f64,
    /// The confidence of the lower bound.
    pub confidence: f64,
    /// Canaries, guesses and correct guesses.
    pub outcome: AuditOutcome,
    /// Canaries included in the training set.
    pub included: usize,
    /// Training steps taken.
    pub steps: u64,
}

/// The training set with the included canaries, and which canaries were included.
struct CanaryData {
    data: Dataset,
    included: Vec<bool>,
    labels: Vec<u32>,
}

impl CanaryAudit {
    /// The most canaries (and ordinary records) an audit takes: its design matrix holds
    /// (records + canaries) × (features + canaries) floats, 0.8 GB at this size.
    pub const MAX_CANARIES: usize = 10_000;

    fn check(&self) -> Result<()> {
        validate::at_least_one("records", self.records)?;
        if self.canaries > Self::MAX_CANARIES || self.records > Self::MAX_CANARIES {
            return Err(Error::InvalidParameter {
                name: "canaries",
                value: self.canaries.max(self.records) as f64,
                reason: "and records must each be at most 10000 (the design matrix is \
                         (records + canaries) × (features + canaries))",
            });
        }
        validate::at_least_one("features", self.features)?;
        validate::at_least_one("canaries", self.canaries)?;
        validate::at_least_one("guesses", self.guesses)?;
        validate::positive("scale", f64::from(self.scale))?;
        if self.classes < 2 {
            return Err(Error::InvalidParameter {
                name: "classes",
                value: self.classes as f64,
                reason: "must be >= 2",
            });
        }
        if self.guesses > self.canaries {
            return Err(Error::InvalidParameter {
                name: "guesses",
                value: self.guesses as f64,
                reason: "must be at most the number of canaries",
            });
        }
        Ok(())
    }

    fn width(&self) -> usize {
        self.features + self.canaries
    }

    /// Ordinary records (Gaussian features, labels of a random linear teacher) and the
    /// included canaries, shuffled together.
    fn dataset(&self, noise: &mut NoiseSource) -> CanaryData {
        let width = self.width();
        let teacher: Vec<f64> = (0..self.features * self.classes)
            .map(|_| noise.standard_normal())
            .collect();
        let (mut features, mut labels) = (Vec::new(), Vec::new());
        for _ in 0..self.records {
            let x: Vec<f64> = (0..self.features)
                .map(|_| noise.standard_normal())
                .collect();
            let score = |k: usize| -> f64 {
                (0..self.features)
                    .map(|i| x[i] * teacher[k * self.features + i])
                    .sum()
            };
            let label = (0..self.classes)
                .max_by(|&a, &b| score(a).total_cmp(&score(b)))
                .unwrap_or(0);
            let mut row = vec![0.0f32; width];
            row.iter_mut().zip(&x).for_each(|(r, &v)| *r = v as f32);
            features.extend_from_slice(&row);
            labels.push(label as u32);
        }
        let canary_labels: Vec<u32> = (0..self.canaries)
            .map(|_| noise.index_below(self.classes) as u32)
            .collect();
        let included: Vec<bool> = (0..self.canaries).map(|_| noise.uniform() < 0.5).collect();
        for j in (0..self.canaries).filter(|&j| included[j]) {
            features.extend_from_slice(&self.canary_input(j));
            labels.push(canary_labels[j]);
        }
        CanaryData {
            data: Dataset {
                features,
                labels,
                shape: vec![1, 1, width],
                classes: self.classes,
            },
            included,
            labels: canary_labels,
        }
    }

    fn canary_input(&self, j: usize) -> Vec<f32> {
        let mut row = vec![0.0f32; self.width()];
        row[self.features + j] = self.scale;
        row
    }

    /// The linear model the audit trains (softmax regression on every coordinate).
    pub fn model(&self, noise: &mut NoiseSource) -> Result<Network> {
        Ok(mlp(
            self.width(),
            &[],
            self.classes,
            Activation::Relu,
            noise,
        )?)
    }

    /// Each canary's score: how much the model moved its label's margin over the other
    /// classes' mean on the canary direction alone. `before` and `after` are the logits of
    /// every canary input followed by those of the zero input (the shared bias, which
    /// every record moves, is subtracted out).
    fn scores(&self, before: &[f32], after: &[f32], labels: &[u32]) -> Vec<f64> {
        let k = self.classes;
        let column = |z: &[f32], j: usize, y: usize| {
            let bias = &z[self.canaries * k..][..k];
            let w: Vec<f64> = z[j * k..][..k]
                .iter()
                .zip(bias)
                .map(|(&v, &b)| f64::from(v) - f64::from(b))
                .collect();
            w[y] - w.iter().sum::<f64>() / k as f64
        };
        (0..self.canaries)
            .map(|j| {
                let y = labels[j] as usize;
                column(after, j, y) - column(before, j, y)
            })
            .collect()
    }

    fn canary_logits(&self, model: &Network) -> Result<Vec<f32>> {
        let mut inputs: Vec<f32> = (0..self.canaries)
            .flat_map(|j| self.canary_input(j))
            .collect();
        inputs.resize(inputs.len() + self.width(), 0.0);
        let x = candle_core::Tensor::from_vec(
            inputs,
            (self.canaries + 1, self.width()),
            &candle_core::Device::Cpu,
        )?;
        Ok(model.logits(&x)?)
    }

    /// Builds the data and the model from `noise`, trains `steps` steps with `config`
    /// (after `prepare` has seen the engine, e.g. to set a physical batch size), and
    /// audits the result. The engine draws its own noise from `noise` too.
    pub fn run(
        &self,
        config: TrainConfig,
        steps: u64,
        noise: NoiseSource,
        prepare: impl FnOnce(&mut PrivacyEngine) -> Result<()>,
    ) -> Result<AuditReport> {
        self.run_observed(config, steps, noise, prepare, |_, _| {})
    }

    /// [`run`](Self::run), calling `progress(steps done, steps)` after every step (for a
    /// long audit's progress display).
    pub fn run_observed(
        &self,
        config: TrainConfig,
        steps: u64,
        mut noise: NoiseSource,
        prepare: impl FnOnce(&mut PrivacyEngine) -> Result<()>,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<AuditReport> {
        self.check()?;
        let privacy = config
            .privacy
            .clone()
            .ok_or_else(|| Error::NotPrivate { operation: "audit" })?;
        let canaries = self.dataset(&mut noise);
        let model = self.model(&mut noise)?;
        let before = self.canary_logits(&model)?;
        let n = canaries.data.len();
        let mut engine = PrivacyEngine::new(model, config, n, noise)?;
        prepare(&mut engine)?;
        for done in 1..=steps {
            engine.step(&canaries.data)?;
            progress(done, steps);
        }
        let after = self.canary_logits(engine.model())?;
        let scores = self.scores(&before, &after, &canaries.labels);
        let outcome = guess(&scores, &canaries.included, self.guesses);
        Ok(AuditReport {
            claimed_epsilon: engine.epsilon()?.unwrap_or(f64::INFINITY),
            lower_bound: one_run_epsilon_lower_bound(&outcome, privacy.delta, self.confidence)?,
            delta: privacy.delta,
            confidence: self.confidence,
            outcome,
            included: canaries.included.iter().filter(|&&i| i).count(),
            steps: engine.steps(),
        })
    }
}

/// Guesses from scores: "included" for the `guesses − guesses/2` highest, "excluded" for
/// the `guesses/2` lowest, abstaining on the rest; counts the correct ones.
pub fn guess(scores: &[f64], included: &[bool], guesses: usize) -> AuditOutcome {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let guesses = guesses.min(scores.len());
    let low = guesses / 2;
    let high = guesses - low;
    let correct = order[..high].iter().filter(|&&j| included[j]).count()
        + order[order.len() - low..]
            .iter()
            .filter(|&&j| !included[j])
            .count();
    AuditOutcome {
        canaries: scores.len() as u64,
        guesses: guesses as u64,
        correct: correct as u64,
    }
}
