//! Trains the MNIST CNN with DP-SGD until ε = 3 (classic RDP) would be exceeded: the
//! README's example. Should end near 98% test accuracy after ~40 epochs (about 4 minutes
//! on 2 cores). Needs `DP_DATA_DIR` (or network access for the download).

use dp_accounting::{AccountantKind, OrderGrid};
use dp_mechanisms::NoiseSource;
use dp_models::{
    fused::FusedModel,
    models::{mnist_cnn, Activation},
};
use dp_optim::{
    Clipping, GradientNormalisation, Optimizer, PrivacyConfig, PrivacyEngine, Sampler, TrainConfig,
};

fn main() -> dp_optim::Result<()> {
    let (train, test) = dp_models::data::mnist()?;
    let mut noise = NoiseSource::os_seeded()?;
    let model = FusedModel::new(mnist_cnn(Activation::Tanh)?, &mut noise)?;
    let privacy = PrivacyConfig {
        noise_multiplier: 1.23,
        max_grad_norm: 0.1,
        clipping: Clipping::Flat,
        delta: 1e-5,
        target_epsilon: Some(3.0),
        accountant: AccountantKind::RdpClassic,
        orders: OrderGrid::Int2To64,
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
    loop {
        match engine.step(&train) {
            Ok(_) => {}
            Err(dp_optim::Error::BudgetExhausted { .. }) => break, // the next step would exceed ε = 3
            Err(e) => return Err(e),
        }
    }
    println!(
        "accuracy {:.4}, epsilon {:?}",
        engine.accuracy(&test)?,
        engine.epsilon()?
    );
    Ok(())
}
