//! `cargo xtask bench sa-dpsgd`: what an SA-DPSGD iteration costs beside a DP-SGD step —
//! the same engine, network and batches, the iteration adding a snapshot of θ, the
//! energy (the new weights' mean cross-entropy on the step's batch: one forward of the
//! fused network) and, when rejected, a rollback. Interleaved, medians of `steps` each.

use std::time::Instant;

use anyhow::Result;
use dp_accounting::{AccountantKind, OrderGrid};
use dp_mechanisms::NoiseSource;
use dp_models::data::Dataset;
use dp_models::models::{mnist_cnn, Activation};
use dp_optim::annealing::{AnnealingConfig, SaDpsgd};
use dp_optim::{
    Clipping, GradientNormalisation, Optimizer, PrivacyConfig, PrivacyEngine, Sampler, TrainConfig,
};

/// Records of the synthetic MNIST-shaped training set.
const RECORDS: usize = 20_000;

/// Times `steps` DP-SGD steps and `steps` SA-DPSGD iterations, alternating, at expected
/// batch `batch` (SA-DPSGD's Table 1 settings: C = 0.1, σ = 1.23, η = 0.5, momentum 0.9).
pub fn run(batch: usize, steps: usize) -> Result<()> {
    anyhow::ensure!(
        batch > 0 && batch <= RECORDS,
        "--batch-size must be in 1..={RECORDS}"
    );
    let mut noise = NoiseSource::seeded(0);
    let data = synthetic(&mut noise);
    let mut plain = engine(batch, &mut noise)?;
    let mut annealed = engine(batch, &mut noise)?;
    let mut sa = SaDpsgd::new(AnnealingConfig::default(), None);
    // One of each untimed: first-touch allocations.
    plain.step(&data)?;
    sa.step_annealed(&mut annealed, &data)?;
    let (mut dp_sgd, mut iteration) = (Vec::new(), Vec::new());
    for _ in 0..steps {
        let start = Instant::now();
        plain.step(&data)?;
        dp_sgd.push(start.elapsed().as_secs_f64());
        let start = Instant::now();
        sa.step_annealed(&mut annealed, &data)?;
        iteration.push(start.elapsed().as_secs_f64());
    }
    let (a, b) = (median(&mut dp_sgd), median(&mut iteration));
    let forward = forward_ms(&annealed, &data, batch, steps)?;
    let snapshot = snapshot_ms(&annealed, steps)?;
    println!(
        "B {batch}: DP-SGD step {:.1} ms, SA-DPSGD iteration {:.1} ms ({:.2}x; +{:.1} ms for the snapshot, the energy forward and rollbacks; {} of {} accepted)",
        a * 1e3,
        b * 1e3,
        b / a,
        (b - a) * 1e3,
        sa.state.accepted,
        sa.state.iterations
    );
    println!(
        "  of which: a forward and cross-entropy of {batch} records {forward:.1} ms, a snapshot of theta and the moments {snapshot:.2} ms (medians)"
    );
    Ok(())
}

/// Median ms of the energy's work alone: the logits of `batch` records and their
/// cross-entropy.
fn forward_ms(engine: &PrivacyEngine, data: &Dataset, batch: usize, steps: usize) -> Result<f64> {
    use dp_models::Classifier;
    let x = candle_core::Tensor::from_vec(
        data.features[..batch * 784].to_vec(),
        (batch, 784),
        &candle_core::Device::Cpu,
    )?;
    let mut times = Vec::new();
    for _ in 0..steps {
        let start = Instant::now();
        let logits = engine.model().logits(&x)?;
        let (losses, _) =
            dp_models::loss::cross_entropy(&logits, &data.labels[..batch], data.classes);
        std::hint::black_box(losses);
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(&mut times))
}

/// Median ms of one `snapshot` (θ and the optimiser moments copied).
fn snapshot_ms(engine: &PrivacyEngine, steps: usize) -> Result<f64> {
    let mut times = Vec::new();
    for _ in 0..steps {
        let start = Instant::now();
        std::hint::black_box(engine.snapshot()?);
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(&mut times))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn synthetic(noise: &mut NoiseSource) -> Dataset {
    Dataset {
        features: (0..RECORDS * 784).map(|_| noise.uniform() as f32).collect(),
        labels: (0..RECORDS).map(|i| (i % 10) as u32).collect(),
        shape: vec![1, 28, 28],
        classes: 10,
    }
}

fn engine(batch: usize, noise: &mut NoiseSource) -> Result<PrivacyEngine> {
    let model = mnist_cnn(Activation::Tanh, noise)?;
    let config = TrainConfig {
        sampler: Sampler::Poisson {
            sampling_rate: batch as f64 / RECORDS as f64,
        },
        privacy: Some(PrivacyConfig {
            noise_multiplier: 1.23,
            max_grad_norm: 0.1,
            clipping: Clipping::Flat,
            delta: 1e-5,
            target_epsilon: None,
            accountant: AccountantKind::RdpClassic,
            orders: OrderGrid::Int2To64,
            correlation: Default::default(),
        }),
        optimizer: Optimizer::Sgd {
            lr: 0.5,
            momentum: 0.9,
        },
        normalisation: GradientNormalisation::ExpectedBatchSize,
    };
    Ok(PrivacyEngine::new(model, config, RECORDS, noise.fork())?)
}
