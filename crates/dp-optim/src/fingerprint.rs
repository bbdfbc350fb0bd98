//! What a checkpoint must agree with before a run resumes from it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::{NoiseCorrelation, TrainConfig};
use crate::error::{Error, Result};
use crate::optimizer::Optimizer;

/// One setting of a run that a checkpoint records. The names are those of `dp train`'s
/// flags, so that a refused resume names the flag to look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunField {
    /// Private (clipped, noised, accounted) or not (`--no-dp`).
    Dp,
    /// Whether the noise comes from a `--seed` (predictable) or from the OS.
    Seed,
    /// The model's architecture.
    Model,
    /// The training data (record count and SHA-256).
    Dataset,
    /// How batches are drawn, with the batch size or rate.
    Sampling,
    /// The update rule and its hyper-parameters other than the learning rate.
    Optimizer,
    /// The learning rate.
    Lr,
    /// The noise multiplier σ (`Sigma` in checkpoints written before the rename).
    #[serde(rename = "Sigma")]
    NoiseMultiplier,
    /// The clipping norm C, or AUTO-S's γ (`Clip` in checkpoints written before the
    /// rename).
    #[serde(rename = "Clip")]
    MaxGradNorm,
    /// How per-example gradients are bounded.
    Clipping,
    /// δ at which ε is reported and the budget enforced.
    Delta,
    /// The ε budget.
    TargetEpsilon,
    /// The accountant.
    Accountant,
    /// The RDP orders.
    Orders,
    /// What the noisy sum is divided by.
    Normalisation,
    /// How the noise of successive steps is related (independent, or a banded strategy).
    Correlation,
}

impl RunField {
    /// The flag-style name (`noise-multiplier`, `target-epsilon`, …).
    pub fn name(self) -> &'static str {
        match self {
            RunField::Dp => "dp",
            RunField::Seed => "seed",
            RunField::Model => "model",
            RunField::Dataset => "dataset",
            RunField::Sampling => "sampling",
            RunField::Optimizer => "optimizer",
            RunField::Lr => "lr",
            RunField::NoiseMultiplier => "noise-multiplier",
            RunField::MaxGradNorm => "max-grad-norm",
            RunField::Clipping => "clipping",
            RunField::Delta => "delta",
            RunField::TargetEpsilon => "target-epsilon",
            RunField::Accountant => "accountant",
            RunField::Orders => "orders",
            RunField::Normalisation => "normalisation",
            RunField::Correlation => "correlation",
        }
    }

    /// Whether a resume may change this field when asked to: the learning rate is
    /// post-processing of the noisy sums; σ, C and the budget change what later steps
    /// cost, and the ledger records each step's own event (σ is a multiple of the
    /// sensitivity C, so C alone does not change an event) and the budget is enforced on
    /// that ledger. Everything else changes what the ledger is a ledger *of* (the data,
    /// the neighbouring relation, the model the weights belong to) and never may.
    pub fn may_change(self) -> bool {
        matches!(
            self,
            RunField::Lr
                | RunField::NoiseMultiplier
                | RunField::MaxGradNorm
                | RunField::TargetEpsilon
        )
    }
}

/// The settings a run was started with, as text per [`RunField`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFingerprint(pub BTreeMap<RunField, String>);

impl RunFingerprint {
    /// The fingerprint of `config` for `model` (its [`architecture`]) and a noise source
    /// that is `seeded` or not. The dataset is added with [`with_dataset`](Self::with_dataset)
    /// once the engine has seen it.
    ///
    /// [`architecture`]: dp_models::PrivateModel::architecture
    pub fn of(config: &TrainConfig, model: &str, seeded: bool) -> Self {
        use RunField as F;
        let mut map = BTreeMap::new();
        map.insert(F::Seed, if seeded { "--seed" } else { "os entropy" }.into());
        map.insert(F::Model, model.to_string());
        map.insert(F::Sampling, format!("{:?}", config.sampler));
        let (kind, lr) = match config.optimizer {
            Optimizer::Sgd { lr, momentum } => (format!("sgd (momentum {momentum})"), lr),
            Optimizer::Adam {
                lr,
                beta1,
                beta2,
                eps,
            } => (format!("adam (betas {beta1}, {beta2}; eps {eps})"), lr),
            Optimizer::LazyAdam {
                lr,
                beta1,
                beta2,
                eps,
            } => (format!("lazy adam (betas {beta1}, {beta2}; eps {eps})"), lr),
        };
        map.insert(F::Optimizer, kind);
        map.insert(F::Lr, lr.to_string());
        map.insert(F::Normalisation, format!("{:?}", config.normalisation));
        match &config.privacy {
            None => {
                map.insert(F::Dp, "non-private (--no-dp)".into());
            }
            Some(p) => {
                map.insert(F::Dp, "private".into());
                map.insert(F::NoiseMultiplier, p.noise_multiplier.to_string());
                map.insert(F::MaxGradNorm, p.max_grad_norm.to_string());
                map.insert(F::Clipping, format!("{:?}", p.clipping));
                map.insert(F::Delta, p.delta.to_string());
                let target = p.target_epsilon.map_or("none".into(), |e| e.to_string());
                map.insert(F::TargetEpsilon, target);
                map.insert(F::Accountant, p.accountant.name().into());
                map.insert(F::Orders, format!("{:?}", p.orders));
                let correlation = match &p.correlation {
                    NoiseCorrelation::Independent => "independent".into(),
                    NoiseCorrelation::Banded(s) => format!("banded, c = {:?}", s.coefs()),
                };
                map.insert(F::Correlation, correlation);
            }
        }
        RunFingerprint(map)
    }

    /// Adds the training data: its record count and digest.
    pub fn with_dataset(mut self, records: usize, digest: &str) -> Self {
        self.0.insert(
            RunField::Dataset,
            format!("{records} records, sha256 {digest}"),
        );
        self
    }

    /// Refuses to resume a run with fingerprint `run` from a checkpoint with this one,
    /// unless every differing field is in `allowed` and [may change](RunField::may_change).
    /// A field only one side knows (the dataset before the first step) is not compared.
    pub fn check_resume(&self, run: &RunFingerprint, allowed: &[RunField]) -> Result<()> {
        for (&field, saved) in &self.0 {
            let Some(now) = run.0.get(&field) else {
                continue;
            };
            if saved == now || (allowed.contains(&field) && field.may_change()) {
                continue;
            }
            let (checkpoint, run) = where_they_differ(saved, now);
            return Err(Error::ResumeMismatch {
                field: field.name(),
                checkpoint,
                run,
                hint: hint(field, saved),
            });
        }
        Ok(())
    }
}

/// Two settings short enough for a one-line message. A long one (a model's architecture
/// runs to kilobytes) is shown around the first character where the two differ, with
/// its length, so the message says what changed.
fn where_they_differ(saved: &str, now: &str) -> (String, String) {
    const MOST: usize = 80;
    const BEFORE: usize = 24;
    let (a, b): (Vec<char>, Vec<char>) = (saved.chars().collect(), now.chars().collect());
    if a.len() <= MOST && b.len() <= MOST {
        return (saved.to_string(), now.to_string());
    }
    let first = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let start = first.saturating_sub(BEFORE);
    let window = |text: &[char]| {
        let end = (start + MOST).min(text.len());
        let lead = if start > 0 { "…" } else { "" };
        let tail = if end < text.len() { "…" } else { "" };
        let middle: String = text[start..end].iter().collect();
        format!("{lead}{middle}{tail} ({} characters)", text.len())
    };
    (window(&a), window(&b))
}

fn hint(field: RunField, saved: &str) -> String {
    match field {
        RunField::Dp if saved == "private" => {
            "resuming a private run without DP would drop its ledger; start a new run instead"
                .into()
        }
        RunField::Dp => "the checkpoint holds weights trained without noise, so no finite \
            epsilon covers them; start the private run from fresh weights"
            .into(),
        RunField::Seed if saved == "--seed" => "the checkpoint's noise is predictable from \
            its seed; resume with the same --seed, or start a fresh run for production"
            .into(),
        RunField::Seed => "an OS-seeded checkpoint holds no noise key, so a --seed resume \
            cannot be bit-exact; resume without --seed"
            .into(),
        f if f.may_change() => format!(
            "pass --allow-change {} to resume with the new value (the ledger keeps every step)",
            f.name()
        ),
        _ => "this cannot change under a checkpoint; start a new run".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::where_they_differ;

    #[test]
    fn a_long_setting_is_shown_where_it_changed() {
        let saved = format!("{}Tanh{}", "x".repeat(500), "y".repeat(500));
        let now = format!("{}Relu{}", "x".repeat(500), "y".repeat(500));
        let (a, b) = where_they_differ(&saved, &now);
        assert!(a.contains("Tanh") && b.contains("Relu"), "{a} / {b}");
        assert!(
            a.starts_with('…') && a.ends_with("… (1004 characters)"),
            "{a}"
        );
        assert!(a.chars().count() < 120, "{a}");
        let short = where_they_differ("0.1", "0.2");
        assert_eq!(short, ("0.1".into(), "0.2".into()));
    }
}
