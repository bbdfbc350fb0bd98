//! The one trait every accountant implements.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::event::{DpEvent, NeighbouringRelation};
use crate::ledger::Ledger;

/// How far an accountant's ε can be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Guarantee {
    /// The reported ε is a proven upper bound on the true privacy loss.
    UpperBound,
    /// The reported ε is an asymptotic approximation (the GDP central limit theorem) and
    /// may be *below* the true value. Never use it alone to claim a guarantee.
    Asymptotic,
}

/// An (ε, δ) answer with the detail behind it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrivacyReport {
    /// The accountant that produced it (`rdp`, `rdp-classic`, `pld`, `gdp`, …).
    pub accountant: String,
    /// The ε the accountant certifies at `delta` (the smallest it can show).
    pub epsilon: f64,
    /// The δ that `epsilon` is stated at.
    pub delta: f64,
    /// The optimal Rényi order, where one applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order: Option<f64>,
    /// Whether ε is a bound or an approximation.
    pub guarantee: Guarantee,
    /// Things the user should know (optimal order on the grid's edge, asymptotic answer).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub warnings: Vec<String>,
}

/// A privacy accountant: composes [`DpEvent`]s and converts the result to (ε, δ).
///
/// Contract (tested for every accountant in `tests/contract.rs`):
/// * `supports` is a dry run: it inspects the whole tree and mutates nothing;
/// * `compose` first validates and checks support for the whole tree, so an error leaves
///   the accountant unchanged; an unsupported event at any depth is an error, never
///   silently ignored;
/// * composing `event` with `count = k` equals composing it `k` times;
/// * an empty accountant reports ε = 0.
pub trait Accountant {
    /// Short name used in reports (`rdp`, `pld`, …).
    fn name(&self) -> &'static str;

    /// The neighbouring relation this accountant was built for.
    fn relation(&self) -> NeighbouringRelation;

    /// Whether this accountant can compose `event` (dry run, no state change).
    fn supports(&self, event: &DpEvent) -> Result<()>;

    /// Composes `event`, repeated `count` times, into the running total.
    fn compose(&mut self, event: &DpEvent, count: u64) -> Result<()>;

    /// The events composed so far.
    fn ledger(&self) -> &Ledger;

    /// ε at `target_delta`, with the optimal order and warnings.
    fn epsilon_report(&self, target_delta: f64) -> Result<PrivacyReport>;

    /// The smallest δ for which the composition is (`target_epsilon`, δ)-DP.
    fn delta(&self, target_epsilon: f64) -> Result<f64>;

    /// ε at `target_delta`.
    fn epsilon(&self, target_delta: f64) -> Result<f64> {
        Ok(self.epsilon_report(target_delta)?.epsilon)
    }

    /// Whether ε is a proven bound or an approximation.
    fn guarantee(&self) -> Guarantee {
        Guarantee::UpperBound
    }
}

/// Refuses a Poisson-sampled `event` unless the accountant's `relation` is add/remove:
/// amplification by Poisson subsampling is a statement about adding or removing a record.
pub(crate) fn poisson_relation(
    accountant: &'static str,
    relation: NeighbouringRelation,
    event: &DpEvent,
) -> Result<()> {
    match relation {
        NeighbouringRelation::AddOrRemoveOne => Ok(()),
        NeighbouringRelation::ReplaceOne => Err(unsupported(
            accountant,
            event,
            "Poisson subsampling is accounted under add-or-remove-one neighbours",
        )),
    }
}

/// Builds the [`Error::Unsupported`] for `accountant` and `event`.
pub(crate) fn unsupported(accountant: &'static str, event: &DpEvent, reason: &str) -> Error {
    Error::Unsupported {
        accountant,
        event: event.to_string(),
        reason: reason.to_string(),
    }
}

/// Validates a target δ (must be in (0, 1)).
pub(crate) fn check_target_delta(target_delta: f64) -> Result<f64> {
    Ok(crate::validate::open_unit("target_delta", target_delta)?)
}

/// Validates a target ε (finite, ≥ 0).
pub(crate) fn check_target_epsilon(target_epsilon: f64) -> Result<f64> {
    Ok(crate::validate::non_negative(
        "target_epsilon",
        target_epsilon,
    )?)
}
