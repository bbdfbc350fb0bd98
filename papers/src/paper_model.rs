//! The training tables' models that papers provide. A paper directory with a
//! `table_models.rs` registers its own there (its `MODELS`, gathered by build.rs), so the
//! harness names none; a table config names one by its `name` in `model`, beside
//! dp-models' zoo ([`crate::config::ModelChoice`]).

use anyhow::Result;

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
    /// dp-models' zoo models.
    const OWN: &'static [Self] = &[
        ModelChoice::GdpMnistCnn,
        ModelChoice::AdultMlp,
        ModelChoice::ImdbEmbeddingAverage,
        ModelChoice::MnistCnnTanh,
        ModelChoice::MnistCnnRelu,
        ModelChoice::Cifar10CnnTanh,
        ModelChoice::Cifar10CnnRelu,
        ModelChoice::MnistMlp1000,
    ];

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

    fn registered(name: &str) -> Option<Self> {
        find(name).map(|m| ModelChoice::Paper(m.name))
    }

    fn registered_names() -> Vec<&'static str> {
        paper_models().iter().map(|m| m.name).collect()
    }
}

by_name::serde_by_name!(ModelChoice);

/// The registered model named `name`.
pub fn find(name: &str) -> Option<&'static PaperModel> {
    paper_models().into_iter().find(|m| m.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_are_named_once_and_read_back() {
        by_name::check_names::<ModelChoice>();
    }
}
