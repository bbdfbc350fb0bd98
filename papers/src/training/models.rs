//! The model a run trains: one of dp-models' zoo, built here, or one a paper registers
//! (`crate::paper_model`), which builds its own and trains through [`ModelRun`].

use std::ops::Range;

use anyhow::{Context, Result};
use dp_mechanisms::NoiseSource;
use dp_models::data::Dataset;
use dp_models::models::{
    adult_mlp, cifar10_cnn, gdp_mnist_cnn, imdb_embedding_average, mlp, mnist_cnn, Activation,
};
use dp_models::{data::ImdbOptions, Classifier};

use super::{LoadedData, Run, RunResult};
use crate::config::ModelChoice;

/// What a paper's model trains a run with: the run's seeded noise (the model's
/// initialisation draws from it first, then the training), its data, and
/// [`Self::execute`].
pub struct ModelRun<'a> {
    pub(super) runner: &'a Run<'a>,
    /// The run's noise source.
    pub noise: NoiseSource,
    /// The training set (truncated in the smoke profile).
    pub train: &'a Dataset,
    /// The test set (likewise).
    pub test: &'a Dataset,
    /// The table's data as loaded (e.g. MovieLens's user and item counts).
    pub data: &'a LoadedData,
}

impl ModelRun<'_> {
    /// Trains the run with `model`: `physical_batch` bounds the examples processed at once
    /// (`None`: the engine's default), `layers` are the parameter ranges of its layers
    /// (for per-layer clipping; empty where the model has none to give).
    pub fn execute<M: Classifier>(
        self,
        model: M,
        physical_batch: Option<usize>,
        layers: Vec<Range<usize>>,
    ) -> Result<RunResult> {
        let (train, test) = (self.train, self.test);
        self.runner
            .execute(model, self.noise, train, test, physical_batch, layers)
    }
}

/// Builds the run's model, `choice`, and trains the run with it.
pub(super) fn train_model(mut cx: ModelRun<'_>, choice: ModelChoice) -> Result<RunResult> {
    let noise = &mut cx.noise;
    let activation = match choice {
        ModelChoice::MnistCnnTanh | ModelChoice::Cifar10CnnTanh => Activation::Tanh,
        _ => Activation::Relu,
    };
    let model = match choice {
        ModelChoice::MnistCnnTanh | ModelChoice::MnistCnnRelu => mnist_cnn(activation, noise)?,
        ModelChoice::Cifar10CnnTanh | ModelChoice::Cifar10CnnRelu => {
            cifar10_cnn(activation, noise)?
        }
        ModelChoice::GdpMnistCnn => gdp_mnist_cnn(noise)?,
        ModelChoice::MnistMlp1000 => mlp(784, &[1000], 10, activation, noise)?,
        ModelChoice::AdultMlp => adult_mlp(noise)?,
        ModelChoice::ImdbEmbeddingAverage => {
            let model = imdb_embedding_average(ImdbOptions::GDP_PAPER.num_words, 16, 16, noise)?;
            // Bounds the (B, T, T) ghost-norm buffer of the embedding.
            return cx.execute(model, Some(64), Vec::new());
        }
        ModelChoice::Paper(name) => {
            let paper = crate::paper_model::find(name)
                .with_context(|| format!("no paper registers the model `{name}`"))?;
            return (paper.train)(cx);
        }
    };
    let layers = model.taps().layer_ranges();
    cx.execute(model, None, layers)
}
