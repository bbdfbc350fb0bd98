//! Data-parallel DP-SGD over MPI: run under `mpirun -np N` (feature `mpi`). Every rank
//! trains the same MLP on the same synthetic data with `step_distributed`; rank 0 then
//! trains it again alone, in the same process, and checks that the two runs agree: the
//! same steps and ε, θ within 1e-5 of its largest entry. Prints one line per rank and
//! exits non-zero on a mismatch.
//!
//! ```sh
//! cargo build --release -p dp-optim --features mpi --example data_parallel
//! mpirun -np 2 target/release/examples/data_parallel
//! ```

use std::time::Instant;

use dp_accounting::{AccountantKind, OrderGrid};
use dp_mechanisms::NoiseSource;
use dp_models::data::Dataset;
use dp_models::models::{mlp, Activation};
use dp_models::PrivateModel;
use dp_optim::collective::{Collective, MpiWorld};
use dp_optim::{
    Clipping, GradientNormalisation, Optimizer, PrivacyConfig, PrivacyEngine, Sampler, TrainConfig,
};

const STEPS: usize = 40;
const SEED: u64 = 11;

/// 4,000 points of 8 features; the label says whether the first exceeds 1/2.
fn data() -> Dataset {
    let mut noise = NoiseSource::seeded(5);
    let n = 4000;
    let features: Vec<f32> = (0..n * 8).map(|_| noise.uniform() as f32).collect();
    let labels = (0..n).map(|i| u32::from(features[i * 8] > 0.5)).collect();
    Dataset {
        features,
        labels,
        shape: vec![8],
        classes: 2,
    }
}

fn engine(data: &Dataset) -> dp_optim::Result<PrivacyEngine> {
    let mut noise = NoiseSource::seeded(SEED);
    let model = mlp(8, &[32], 2, Activation::Tanh, &mut noise)?;
    let config = TrainConfig {
        sampler: Sampler::Poisson {
            sampling_rate: 0.02,
        },
        privacy: Some(PrivacyConfig {
            noise_multiplier: 1.0,
            max_grad_norm: 1.0,
            clipping: Clipping::Flat,
            delta: 1e-5,
            target_epsilon: None,
            accountant: AccountantKind::Rdp,
            orders: OrderGrid::Opacus,
            correlation: Default::default(),
        }),
        optimizer: Optimizer::Sgd {
            lr: 0.5,
            momentum: 0.9,
        },
        normalisation: GradientNormalisation::ExpectedBatchSize,
    };
    PrivacyEngine::new(model, config, data.len(), noise)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut world = MpiWorld::init()?;
    if let Err(e) = run(&mut world) {
        // No rank may wait for this one.
        eprintln!("rank {}: {e}", world.rank());
        world.abort(1);
    }
    Ok(())
}

fn run(world: &mut MpiWorld) -> Result<(), Box<dyn std::error::Error>> {
    let data = data();
    let mut distributed = engine(&data)?;
    let start = Instant::now();
    for _ in 0..STEPS {
        distributed.step_distributed(&data, world)?;
    }
    let wall = start.elapsed().as_secs_f64();
    let theta = distributed.model().parameters()?;
    let epsilon = distributed.epsilon()?.unwrap_or(f64::NAN);
    println!(
        "rank {} of {}: {} steps in {wall:.3} s, ε = {epsilon:.4}",
        world.rank(),
        world.world_size(),
        distributed.steps()
    );
    if world.rank() != 0 {
        return Ok(());
    }
    let mut alone = engine(&data)?;
    for _ in 0..STEPS {
        alone.step(&data)?;
    }
    let reference = alone.model().parameters()?;
    let scale = reference.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let worst = theta
        .iter()
        .zip(&reference)
        .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    let same_ledger = alone.steps() == distributed.steps() && alone.epsilon()? == Some(epsilon);
    println!(
        "one process: ε = {:.4}; θ differs by at most {:.2e} of its largest entry",
        alone.epsilon()?.unwrap_or(f64::NAN),
        worst / scale
    );
    if !same_ledger || worst > 1e-5 * scale {
        return Err("the data-parallel run is not the single process's".into());
    }
    Ok(())
}
