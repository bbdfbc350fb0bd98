//! The left factor of an outer-product contribution ([`Contribution::Outer`](super::Contribution::Outer)):
//! dense rows, or one-hot rows given by their indices.

use candle_core::Tensor;

use crate::error::Result;

/// The left factor of an outer-product contribution.
#[derive(Clone, Debug)]
pub enum Left {
    /// Dense rows (B, K, out): e.g. a Linear layer's output gradients.
    Dense(Tensor),
    /// One-hot rows given by their indices (B, K) (`u32`) of width `out`: an embedding's
    /// token ids.
    OneHot {
        /// The indices.
        ids: Tensor,
        /// The width (vocabulary size).
        width: usize,
    },
}

impl Left {
    pub(super) fn rows(&self) -> Result<(usize, usize, usize)> {
        Ok(match self {
            Left::Dense(t) => t.dims3()?,
            Left::OneHot { ids, width } => {
                let (b, k) = ids.dims2()?;
                (b, k, *width)
            }
        })
    }
}
