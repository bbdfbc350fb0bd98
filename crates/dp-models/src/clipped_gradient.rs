//! The clipped gradient of one batch: what every per-sample path returns, whichever
//! executor computed it and wherever its parameters live.

use candle_core::Tensor;

use crate::error::{Error, Result};

/// The clipped gradient of one batch: `Σᵢ cᵢ∇ℓᵢ`, with each example's squared norm and
/// loss.
#[derive(Clone, Debug)]
pub struct ClippedGradient {
    /// `Σᵢ cᵢ∇ℓᵢ` of every parameter, in the model's parameter order.
    pub sum: GradientSum,
    /// `‖∇ℓᵢ‖²` per example (NaN or ∞ where not finite; such examples got `cᵢ = 0`).
    pub squared_norms: Vec<f32>,
    /// Per-example losses ℓᵢ (whatever the model's loss is: cross-entropy for a classifier).
    pub losses: Vec<f32>,
}

/// Where a clipped sum lives: flat on the host, or one tensor per parameter on the
/// parameters' device (a network of DP layers keeps it there, so that a GPU run copies
/// nothing to the host but the norms and losses).
#[derive(Clone, Debug)]
pub enum GradientSum {
    /// All parameters' sums, flat, in the model's parameter order.
    Flat(Vec<f32>),
    /// One sum per parameter tensor, by name, in the model's parameter order.
    Tensors(Vec<(String, Tensor)>),
}

impl GradientSum {
    /// The number of values (parameters) the sum covers.
    pub fn len(&self) -> usize {
        match self {
            GradientSum::Flat(v) => v.len(),
            GradientSum::Tensors(ts) => ts.iter().map(|(_, t)| t.elem_count()).sum(),
        }
    }

    /// Whether the sum covers no parameter.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sum flat on the host, in parameter order (tensors are copied from their device).
    pub fn into_flat(self) -> Result<Vec<f32>> {
        match self {
            GradientSum::Flat(v) => Ok(v),
            tensors => tensors.to_flat(),
        }
    }

    /// [`into_flat`](Self::into_flat) without consuming the sum.
    pub fn to_flat(&self) -> Result<Vec<f32>> {
        match self {
            GradientSum::Flat(v) => Ok(v.clone()),
            GradientSum::Tensors(ts) => crate::flat::flatten(ts.iter().map(|(_, t)| t)),
        }
    }

    /// The sum as tensors of the shapes and devices of `like`, in order (a flat sum is
    /// split and copied there); an error unless the sum has exactly those shapes.
    pub fn into_tensors_like(self, like: &[Tensor]) -> Result<Vec<Tensor>> {
        match self {
            GradientSum::Flat(v) => crate::flat::unflatten(&v, like),
            GradientSum::Tensors(ts) => {
                let matches = ts.len() == like.len()
                    && ts
                        .iter()
                        .zip(like)
                        .all(|((_, s), t)| s.shape() == t.shape());
                if !matches {
                    return Err(Error::invalid_model(
                        "clipped sum",
                        format!(
                            "{} tensors do not have the shapes of the {} parameter tensors",
                            ts.len(),
                            like.len()
                        ),
                    ));
                }
                Ok(ts.into_iter().map(|(_, t)| t).collect())
            }
        }
    }

    /// The per-tensor sums by name, when the sum is kept as tensors.
    pub fn tensors(&self) -> Option<&[(String, Tensor)]> {
        match self {
            GradientSum::Flat(_) => None,
            GradientSum::Tensors(ts) => Some(ts),
        }
    }
}

impl From<Vec<f32>> for GradientSum {
    fn from(flat: Vec<f32>) -> Self {
        GradientSum::Flat(flat)
    }
}

impl ClippedGradient {
    /// The same gradient with its sum flat on the host.
    pub fn flattened(self) -> Result<Self> {
        Ok(ClippedGradient {
            sum: GradientSum::Flat(self.sum.into_flat()?),
            ..self
        })
    }
}
