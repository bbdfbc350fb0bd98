//! What a private model's training data must offer the engine: its size, a validation
//! before the first step, and a digest that ties a checkpoint to the data it was made on.

use crate::data::Dataset;
use crate::error::Result;

/// A training set read by example index (`0..len()`): a privacy unit is one index.
pub trait TrainingData {
    /// The number of examples (privacy units).
    fn len(&self) -> usize;

    /// Whether there are no examples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks the data is consistent (sizes, ranges, finite values); the error names the
    /// first bad example.
    fn validate(&self) -> Result<()>;

    /// A digest of the whole content (hex): two sets with the same digest are the same
    /// data. A resumed run checks it against its checkpoint's.
    fn digest(&self) -> String;
}

impl TrainingData for Dataset {
    fn len(&self) -> usize {
        Dataset::len(self)
    }

    fn validate(&self) -> Result<()> {
        Dataset::validate(self)
    }

    fn digest(&self) -> String {
        Dataset::digest(self)
    }
}
