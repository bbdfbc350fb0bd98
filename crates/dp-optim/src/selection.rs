//! Private coordinate selection for sparse DP-SGD: which coordinates of a clipped
//! gradient sum receive noise, chosen by the exponential mechanism's top-k or by the
//! sparse vector technique on the magnitudes `|G_j|`.

use dp_accounting::DpEvent;
use dp_mechanisms::{
    BudgetSplit, Mechanism, NoiseSource, SparseVariant, SparseVector, TopK, TopKMethod,
};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use dp_accounting::validate;

/// How the coordinates that get noise are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum CoordinateSelection {
    /// The exponential mechanism's top-k on |G_j| (one-shot Gumbel, Durfee & Rogers
    /// 2019), ε per step split evenly over the k rounds.
    ExponentialTopK {
        /// ε of one step's whole selection.
        epsilon: f64,
    },
    /// The sparse vector technique (Dwork & Roth Alg. 2, δ = 0) on |G_j| in coordinate
    /// order, cutoff k: the first k coordinates whose noisy magnitude clears the noisy
    /// threshold.
    SparseVector {
        /// ε of one step's run.
        epsilon: f64,
        /// The threshold on |G_j|.
        threshold: f64,
    },
}

impl CoordinateSelection {
    /// The selection's ε per step.
    pub fn epsilon(&self) -> f64 {
        match *self {
            CoordinateSelection::ExponentialTopK { epsilon }
            | CoordinateSelection::SparseVector { epsilon, .. } => epsilon,
        }
    }

    /// The mechanism choosing `k` coordinates of scores with L∞ sensitivity
    /// `sensitivity`.
    pub fn selector(&self, sensitivity: f64, k: usize) -> Result<CoordinateSelector> {
        validate::positive("selection epsilon", self.epsilon())?;
        let mechanism = match *self {
            CoordinateSelection::ExponentialTopK { epsilon } => Selector::TopK(TopK::new(
                sensitivity,
                epsilon,
                k,
                false,
                TopKMethod::OneShotGumbel,
                BudgetSplit::Basic,
            )?),
            CoordinateSelection::SparseVector { epsilon, threshold } => {
                if !threshold.is_finite() {
                    return Err(Error::InvalidParameter {
                        name: "threshold",
                        value: threshold,
                        reason: "must be finite",
                    });
                }
                Selector::Sparse(SparseVector::new(
                    SparseVariant::Sparse,
                    sensitivity,
                    threshold,
                    k,
                    epsilon,
                    0.0,
                )?)
            }
        };
        Ok(CoordinateSelector {
            mechanism,
            sensitivity,
        })
    }
}

/// A built selection mechanism: its event is its privacy claim, its sensitivity what
/// the scores it reads may change by when one example changes.
#[derive(Clone, Debug)]
pub struct CoordinateSelector {
    mechanism: Selector,
    sensitivity: f64,
}

#[derive(Clone, Debug)]
enum Selector {
    TopK(TopK),
    Sparse(SparseVector),
}

impl CoordinateSelector {
    /// The L∞ sensitivity of the scores it is calibrated for.
    pub fn sensitivity(&self) -> f64 {
        self.sensitivity
    }

    /// The coordinates chosen on `scores` (a release: charge [`Mechanism::event`] first).
    pub(crate) fn select(&self, scores: &[f64], noise: &mut NoiseSource) -> Result<Vec<usize>> {
        Ok(match &self.mechanism {
            Selector::TopK(t) => t.select(scores, noise)?,
            Selector::Sparse(s) => s.release_largest_magnitudes(scores, noise)?,
        })
    }
}

impl Mechanism for CoordinateSelector {
    fn event(&self) -> DpEvent {
        match &self.mechanism {
            Selector::TopK(t) => t.event(),
            Selector::Sparse(s) => s.event(),
        }
    }
}
