//! The training tables' models that papers provide. A paper directory with a
//! `table_models.rs` registers its own there (its `MODELS`, gathered by build.rs), so the
//! harness names none; a table config names one by its `name` in `model`, beside
//! dp-models' zoo ([`crate::config::ModelChoice`]).

use anyhow::Result;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::by_name::{self, ByName};
use crate::config::ModelChoice;
use crate::training::{ModelRun, RunResult};

/// A model a paper provides to the training tables.
#[derive(Debug)]
pub struct PaperModel {
    /// Its name in a table config's `model` (kebab-case, unique among all).
    pub name: &'static str,
    /// Builds the model (its initialisation drawn from the run's noise first, as the zoo
    /// models') and trains the run with it ([`ModelRun::execute`]).
    pub train: fn(ModelRun<'_>) -> Result<RunResult>,
}

// `paper_models()`, written by build.rs.
include!(concat!(env!("OUT_DIR"), "/paper_models.rs"));

impl ByName for ModelChoice {
    const WHAT: &'static str = "model";

    fn name(self) -> &'static str {
        match self {
            ModelChoice::GdpMnistCnn => "gdp-mnist-cnn",
            ModelChoice::AdultMlp => "adult-mlp",
            ModelChoice::ImdbEmbeddingAverage => "imdb-embedding-average",
            ModelChoice::MnistCnnTanh => "mnist-cnn-tanh",
            ModelChoice::MnistCnnRelu => "mnist-cnn-relu",
            ModelChoice::Cifar10CnnTanh => "cifar10-cnn-tanh",
            ModelChoice::Cifar10CnnRelu => "cifar10-cnn-relu",
            ModelChoice::MnistMlp1000 => "mnist-mlp1000",
            ModelChoice::Paper(name) => name,
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        Self::OWN
            .into_iter()
            .find(|own| own.name() == name)
            .or_else(|| find(name).map(|m| ModelChoice::Paper(m.name)))
    }

    fn known() -> Vec<&'static str> {
        let own = Self::OWN.into_iter().map(ModelChoice::name);
        own.chain(names()).collect()
    }
}

impl Serialize for ModelChoice {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        by_name::serialize(*self, serializer)
    }
}

impl<'de> Deserialize<'de> for ModelChoice {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        by_name::deserialize(deserializer)
    }
}

/// The registered model named `name`.
pub fn find(name: &str) -> Option<&'static PaperModel> {
    paper_models().into_iter().find(|m| m.name == name)
}

/// Every registered model's name.
pub fn names() -> Vec<&'static str> {
    paper_models().iter().map(|m| m.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zoo_models_read_back_by_name() {
        for own in ModelChoice::OWN {
            assert_eq!(ModelChoice::from_name(own.name()), Some(own));
        }
    }

    #[test]
    fn every_paper_model_has_one_name_apart_from_the_zoos() {
        let mut names = names();
        names.sort_unstable();
        let all = names.len();
        names.dedup();
        assert_eq!(names.len(), all, "{names:?}");
        for name in names {
            assert_eq!(ModelChoice::from_name(name), Some(ModelChoice::Paper(name)));
            assert!(
                !ModelChoice::OWN.iter().any(|own| own.name() == name),
                "{name}"
            );
        }
    }
}
