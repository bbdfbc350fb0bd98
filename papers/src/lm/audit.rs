//! The one-run audit of a language-model run (Steinke, Nasr & Jagielski 2023, "Privacy
//! auditing with one (1) training run"): `m` audit canaries — sequences of the
//! [`SecretFormat`] with a prefix of their own — are each put in the training set once,
//! independently with probability ½. After training, canary j's score is how much its
//! loss fell (initial model minus trained model); the auditor guesses "included" for the
//! highest scores and "excluded" for the lowest ([`dp_optim::audit::guess`], the number of
//! guesses fixed beforehand) and turns the correct guesses into an ε lower bound that
//! holds with the stated confidence for any (ε, δ)-DP algorithm
//! ([`dp_accounting::one_run_epsilon_lower_bound`], their Theorem 3.1). The same outcome
//! is also scored by the f-DP one-run test of Mahloujifar, Melis & Chaudhuri 2024
//! ([`dp_accounting::fdp_one_run_epsilon_lower_bound`], the whole (ε, δ) trade-off curve
//! instead of its point), reported beside it. A correct run's bounds stay below its
//! claimed ε.

use anyhow::Result;
use dp_accounting::{
    fdp_one_run_epsilon_lower_bound, fdp_one_run_mu_lower_bound, one_run_epsilon_lower_bound,
    AuditOutcome,
};
use dp_mechanisms::NoiseSource;
use serde::{Deserialize, Serialize};

use super::canaries::SecretFormat;
use super::model::LmModel;

/// The audit's size.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditConfig {
    /// m: audit canaries, each included with probability ½.
    pub canaries: usize,
    /// r: guesses (half "included", half "excluded"), fixed before training.
    pub guesses: usize,
    /// The probability with which the bound holds.
    pub confidence: f64,
}

/// The audit canaries of one run and which of them were included.
pub struct AuditCanaries {
    /// Their sequences.
    pub sequences: Vec<Vec<u32>>,
    /// Whether each is in the training set.
    pub included: Vec<bool>,
}

impl AuditCanaries {
    /// `config.canaries` sequences of `format`, each included with probability ½.
    pub fn draw(format: &SecretFormat, config: &AuditConfig, rng: &mut NoiseSource) -> Self {
        let sequences = (0..config.canaries).map(|_| format.draw(rng)).collect();
        let included = (0..config.canaries).map(|_| rng.uniform() < 0.5).collect();
        AuditCanaries {
            sequences,
            included,
        }
    }

    /// The included sequences (to insert into the training set).
    pub fn inserted(&self) -> impl Iterator<Item = &Vec<u32>> {
        self.sequences
            .iter()
            .zip(&self.included)
            .filter_map(|(s, &i)| i.then_some(s))
    }
}

/// What the audit found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditResult {
    /// Canaries, guesses and correct guesses.
    pub outcome: AuditOutcome,
    /// Canaries included.
    pub included: usize,
    /// The empirical ε lower bound at the run's δ.
    pub lower_bound: f64,
    /// Its confidence.
    pub confidence: f64,
}

impl AuditResult {
    /// The f-DP test's ε lower bound of the same outcome at `delta` and the same
    /// confidence (computed from the stored outcome, so cached runs have it too).
    pub fn fdp_lower_bound(&self, delta: f64) -> Result<f64> {
        Ok(fdp_one_run_epsilon_lower_bound(
            &self.outcome,
            delta,
            self.confidence,
        )?)
    }

    /// The f-DP test's refused Gaussian hypotheses: no μ-GDP algorithm with μ below the
    /// returned value scores as well (at the same confidence).
    pub fn fdp_mu_lower_bound(&self) -> Result<f64> {
        Ok(fdp_one_run_mu_lower_bound(&self.outcome, self.confidence)?)
    }
}

/// Scores the canaries by their loss drop from `initial` (the losses before training) to
/// `model`, guesses, and bounds ε at `delta`.
pub fn audit(
    model: &LmModel,
    format: &SecretFormat,
    canaries: &AuditCanaries,
    initial: &[f64],
    config: &AuditConfig,
    delta: f64,
    batch: usize,
) -> Result<AuditResult> {
    let after = model.row_losses(&format.rows(&canaries.sequences)?, batch)?;
    let scores: Vec<f64> = initial.iter().zip(&after).map(|(b, a)| b - a).collect();
    let outcome = dp_optim::audit::guess(&scores, &canaries.included, config.guesses);
    Ok(AuditResult {
        lower_bound: one_run_epsilon_lower_bound(&outcome, delta, config.confidence)?,
        outcome,
        included: canaries.included.iter().filter(|&&i| i).count(),
        confidence: config.confidence,
    })
}
