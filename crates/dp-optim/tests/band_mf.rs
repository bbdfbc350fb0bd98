//! BandMF on the engine: the released noise is `C⁻¹z`, the ledger holds one charge per
//! cycle, the configuration must match the theorem, and checkpoints keep the stream
//! only where the noise is predictable anyway.

use dp_mechanisms::band_mf::{amplified_event, BandedToeplitz};
use dp_mechanisms::NoiseSource;
use dp_models::data::Dataset;
use dp_models::models::{mlp, Activation};
use dp_optim::{
    make_private, Algorithm, BandMf, Error, GradientNormalisation, Noise, NoiseCorrelation,
    Optimizer, PrivacyEngine, PrivateSettings, Sampler, TrainConfig,
};

use super::{charges, engine_with, private, toy_data};

const BANDS: usize = 3;

fn config(sampler: Sampler, correlation: NoiseCorrelation, sigma: f64) -> TrainConfig {
    let mut privacy = private(None);
    privacy.noise_multiplier = sigma;
    privacy.correlation = correlation;
    TrainConfig {
        sampler,
        privacy: Some(privacy),
        optimizer: Optimizer::Sgd {
            lr: 0.1,
            momentum: 0.0,
        },
        normalisation: GradientNormalisation::ExpectedBatchSize,
    }
}

fn strategy() -> BandedToeplitz {
    BandMf::strategy(12, BANDS).expect("strategy")
}

fn cyclic() -> Sampler {
    Sampler::CyclicPoisson {
        groups: BANDS,
        sampling_rate: 0.3,
    }
}

/// The released sums of `steps` steps, flat per step.
fn released(e: &mut PrivacyEngine, data: &Dataset, steps: usize) -> Vec<Vec<f32>> {
    (0..steps)
        .map(|_| {
            let mut charge = e.begin_step(data).expect("charge");
            let batch = e.draw_batch(&mut charge).expect("batch");
            let clipped = e.clipped_sum(data, &batch).expect("sum");
            let noisy = e.release(charge, clipped).expect("release");
            e.apply_update(&noisy).expect("update");
            noisy.sum().expect("host")
        })
        .collect()
}

/// With σ = 10⁶ the clipped sums (norm ≤ 1) are below f32's resolution of the noise, so
/// the released sums are the noise: the banded engine's are `C⁻¹` of the independent
/// engine's (the same seed draws the same z, and the strategy has unit column norm),
/// coordinate by coordinate over 8 steps.
#[test]
fn the_released_noise_is_the_strategy_inverse_of_fresh_noise() -> dp_optim::Result<()> {
    let data = toy_data(120, &mut NoiseSource::seeded(21));
    let independent = config(cyclic(), NoiseCorrelation::Independent, 1e6);
    let banded = config(cyclic(), NoiseCorrelation::Banded(strategy()), 1e6);
    let mut a = engine_with(NoiseSource::seeded(22), independent, &data)?;
    let mut b = engine_with(NoiseSource::seeded(22), banded, &data)?;
    let (za, xb) = (released(&mut a, &data, 8), released(&mut b, &data, 8));
    let s = strategy();
    let mut worst = 0.0f64;
    for j in 0..za[0].len() {
        let z: Vec<f64> = za.iter().map(|step| f64::from(step[j])).collect();
        let x = s.solve(&z);
        for (t, want) in x.iter().enumerate() {
            worst = worst.max((f64::from(xb[t][j]) - want).abs() / 1e6);
        }
    }
    assert!(worst < 1e-5, "largest difference {worst} σ");
    Ok(())
}

/// 10 steps over 3 groups are ⌈10/3⌉ = 4 charges of `PoissonSampled(q, Gaussian(σ))`:
/// ε is that of `amplified_event(σ, 10, 3, q)`.
#[test]
fn the_ledger_holds_the_amplified_event() -> dp_optim::Result<()> {
    let data = toy_data(120, &mut NoiseSource::seeded(23));
    let banded = config(cyclic(), NoiseCorrelation::Banded(strategy()), 1.2);
    let mut e = engine_with(NoiseSource::seeded(24), banded, &data)?;
    for _ in 0..10 {
        BandMf.step(&mut e, &data)?;
    }
    let mut expected = dp_accounting::AccountantKind::Rdp.build(
        dp_accounting::NeighbouringRelation::AddOrRemoveOne,
        &dp_accounting::OrderGrid::Opacus,
    )?;
    expected.compose(&amplified_event(1.2, 10, BANDS as u64, 0.3)?, 1)?;
    assert_eq!(charges(&e), 4);
    assert_eq!(e.epsilon()?, Some(expected.epsilon(1e-5)?));
    Ok(())
}

/// Banded noise without the cyclic sampler, or with fewer groups than bands, is refused
/// at construction; σ is fixed; BandMf refuses an engine with independent noise.
#[test]
fn a_configuration_outside_the_theorem_is_refused() -> dp_optim::Result<()> {
    let data = toy_data(120, &mut NoiseSource::seeded(25));
    let poisson = Sampler::Poisson { sampling_rate: 0.1 };
    let few = Sampler::CyclicPoisson {
        groups: BANDS - 1,
        sampling_rate: 0.3,
    };
    for sampler in [poisson, few] {
        let refused = engine_with(
            NoiseSource::seeded(26),
            config(sampler, NoiseCorrelation::Banded(strategy()), 1.0),
            &data,
        );
        assert!(
            matches!(
                refused,
                Err(Error::InvalidSetting {
                    name: "correlation",
                    ..
                })
            ),
            "{sampler:?}"
        );
    }
    let banded = config(cyclic(), NoiseCorrelation::Banded(strategy()), 1.0);
    let mut e = engine_with(NoiseSource::seeded(27), banded, &data)?;
    assert!(matches!(
        e.set_noise_multiplier(2.0),
        Err(Error::InvalidSetting {
            name: "noise_multiplier",
            ..
        })
    ));
    let mut plain = engine_with(
        NoiseSource::seeded(27),
        config(cyclic(), NoiseCorrelation::Independent, 1.0),
        &data,
    )?;
    assert!(BandMf.step(&mut plain, &data).is_err());
    assert_eq!(plain.steps(), 0);
    Ok(())
}

/// A seeded run's checkpoint keeps the stream, and its resume reaches the uninterrupted
/// run's θ exactly; a production checkpoint holds no noise and no groups, and its resume
/// restarts the stream and the cycle.
#[test]
fn checkpoints_keep_the_stream_only_when_seeded() -> dp_optim::Result<()> {
    let data = toy_data(120, &mut NoiseSource::seeded(28));
    let banded = || config(cyclic(), NoiseCorrelation::Banded(strategy()), 1.0);
    let mut whole = engine_with(NoiseSource::seeded(29), banded(), &data)?;
    let mut first = engine_with(NoiseSource::seeded(29), banded(), &data)?;
    for _ in 0..5 {
        whole.step(&data)?;
        first.step(&data)?;
    }
    let saved = first.checkpoint()?;
    assert_eq!(
        saved.correlated_noise.as_ref().map(Vec::len),
        Some(BANDS - 1)
    );
    let mut resumed = engine_with(NoiseSource::seeded(29), banded(), &data)?;
    resumed.restore(&saved)?;
    for _ in 0..4 {
        whole.step(&data)?;
        resumed.step(&data)?;
    }
    assert_eq!(
        dp_models::PrivateModel::parameters(resumed.model())?,
        dp_models::PrivateModel::parameters(whole.model())?
    );

    let mut production = engine_with(NoiseSource::os_seeded()?, banded(), &data)?;
    for _ in 0..5 {
        production.step(&data)?;
    }
    let saved = production.checkpoint()?;
    assert!(saved.correlated_noise.is_none());
    let mut restarted = engine_with(NoiseSource::os_seeded()?, banded(), &data)?;
    restarted.restore(&saved)?;
    restarted.step(&data)?;
    let charged = charges(&restarted);
    // 5 steps over 3 groups were 2 cycles; the resume draws new groups and starts a
    // third cycle, charged at its first step.
    assert_eq!(charged, 3);
    Ok(())
}

/// `make_private` with bands > 1 trains BandMF: the cyclic sampler at the same expected
/// batch, the optimised strategy, and the calibrated σ meets the target.
#[test]
fn make_private_trains_band_mf() -> dp_optim::Result<()> {
    let data = toy_data(300, &mut NoiseSource::seeded(30));
    let mut noise = NoiseSource::seeded(31);
    let model = mlp(8, &[16], 2, Activation::Tanh, &mut noise)?;
    let sgd = Optimizer::Sgd {
        lr: 0.5,
        momentum: 0.0,
    };
    let settings = PrivateSettings {
        batch_size: 30,
        epochs: 2,
        max_grad_norm: 1.0,
        noise: Noise::TargetEpsilon(4.0),
        delta: 1e-4,
        optimizer: sgd,
        bands: 5,
        ..PrivateSettings::default()
    };
    let mut training = make_private(model, &data, &settings, noise)?;
    let config = training.engine().config().clone();
    assert_eq!(
        config.sampler,
        Sampler::CyclicPoisson {
            groups: 5,
            sampling_rate: 0.5
        }
    );
    let banded = config.privacy.as_ref().map(|p| &p.correlation);
    assert!(matches!(banded, Some(NoiseCorrelation::Banded(s)) if s.bands() == 5));
    training.fit(&data, &mut ())?;
    assert_eq!(training.engine().steps(), 20);
    assert!(training.engine().epsilon()?.expect("private") <= 4.0);
    Ok(())
}
