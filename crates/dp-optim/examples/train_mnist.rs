//! Trains the MNIST CNN with DP-SGD until ε = 3 (classic RDP) would be exceeded: the
//! README's example, through the one training loop (`Trainer`) with an observer that
//! prints each epoch. Should end near 98% test accuracy after ~40 epochs (about 4 minutes
//! on 2 cores). Needs `DP_DATA_DIR` (or network access for the download).

use dp_accounting::{AccountantKind, OrderGrid};
use dp_mechanisms::NoiseSource;
use dp_models::data::Dataset;
use dp_models::models::{mnist_cnn, Activation, Network};
use dp_optim::{
    Clipping, Control, DpSgd, EpochSummary, GradientNormalisation, Observer, Optimizer,
    PrivacyConfig, PrivacyEngine, Sampler, TrainConfig, Trainer,
};

fn main() -> dp_optim::Result<()> {
    let (train, test) = dp_models::data::mnist()?;
    let mut noise = NoiseSource::os_seeded()?;
    let model = mnist_cnn(Activation::Tanh, &mut noise)?;
    let privacy = PrivacyConfig {
        noise_multiplier: 1.23,
        max_grad_norm: 0.1,
        clipping: Clipping::Flat,
        delta: 1e-5,
        target_epsilon: Some(3.0),
        accountant: AccountantKind::RdpClassic,
        orders: OrderGrid::Int2To64,
        correlation: Default::default(),
    };
    let config = TrainConfig {
        sampler: Sampler::Poisson {
            sampling_rate: 512.0 / 60000.0,
        },
        privacy: Some(privacy),
        optimizer: Optimizer::Sgd {
            lr: 0.5,
            momentum: 0.9,
        },
        normalisation: GradientNormalisation::ExpectedBatchSize,
    };
    let mut engine = PrivacyEngine::new(model, config, train.len(), noise)?;
    let steps_per_epoch = engine.config().sampler.steps_per_epoch(train.len()) as u64;
    let trainer = Trainer {
        total_steps: u64::MAX, // until the budget refuses the next step
        steps_per_epoch,
        checkpoints: None,
        schedule: None,
    };
    let outcome = trainer.fit(
        &mut engine,
        &mut DpSgd,
        &train,
        &mut EveryEpoch { test: &test },
    )?;
    assert!(outcome.stopped_by_budget);
    println!(
        "accuracy {:.4}, epsilon {:?}",
        engine.accuracy(&test)?,
        engine.epsilon()?
    );
    Ok(())
}

/// Prints the test accuracy and ε after each epoch.
struct EveryEpoch<'a> {
    test: &'a Dataset,
}

impl Observer<Network, DpSgd> for EveryEpoch<'_> {
    fn epoch_done(
        &mut self,
        engine: &PrivacyEngine,
        _: &DpSgd,
        epoch: &EpochSummary,
    ) -> dp_optim::Result<Control> {
        let eps = engine.epsilon()?.unwrap_or(f64::INFINITY);
        let accuracy = engine.accuracy(self.test)?;
        println!(
            "step {:5}  accuracy {accuracy:.4}  epsilon {eps:.3}",
            epoch.steps
        );
        Ok(Control::Continue)
    }
}
