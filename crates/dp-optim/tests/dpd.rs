//! DPD (differentially private dropout): calibration of the per-iteration budget under
//! each reading, the implied dropout rates, the SGLD-form loop and its baselines.

use dp_accounting::{Accountant, AccountantKind, Amplification, OrderGrid};
use dp_mechanisms::NoiseSource;
use dp_models::models::{mlp, Activation};
use dp_models::PrivateModel;
use dp_optim::dpd::{
    dpd_ac_epsilon, dpd_zcdp_epsilon, implied_dropout_rates, DpdBudget, DpdComposition,
    DpdTraining, GaussianCalibration, GaussianDropout, NoisePlacement, PredictiveAverage,
    StepSizeSchedule, ZcdpReading,
};
use dp_optim::{
    accuracy, Algorithm, GradientNormalisation, Optimizer, PrivacyEngine, Sampler, TrainConfig,
};

use super::toy_data;

/// The stand-in experiment's regime: MNIST, S = 600 (ν = 0.01), δ_tot = 1e-5, δ′ = δ_tot/2.
fn budget(
    epsilon_total: f64,
    steps: u64,
    composition: DpdComposition,
    amplification: Amplification,
    gaussian: GaussianCalibration,
) -> DpdBudget {
    DpdBudget {
        epsilon_total,
        delta_total: 1e-5,
        delta_prime: 5e-6,
        steps,
        sampling_rate: 0.01,
        composition,
        amplification,
        gaussian,
    }
}

const COMPOSITIONS: [DpdComposition; 4] = [
    DpdComposition::AC,
    DpdComposition::Advanced { first_order: true },
    DpdComposition::ZCDP,
    DpdComposition::Zcdp {
        reading: ZcdpReading::GaussianNoAmplification,
    },
];

/// Composing the calibrated ε_iter gives back ε_tot to 1e-6 under every reading, never
/// above it; δ_iter follows the paper's bookkeeping and σ the chosen Gaussian bound.
#[test]
fn calibrated_epsilon_iter_composes_to_the_target() -> dp_optim::Result<()> {
    let mut calibrated = 0;
    for composition in COMPOSITIONS {
        for amplification in [Amplification::Tight, Amplification::Loose] {
            for gaussian in [GaussianCalibration::Classic, GaussianCalibration::Analytic] {
                for (epsilon_total, steps) in [(0.5, 1000), (2.0, 500), (1.0, 10_000)] {
                    let b = budget(epsilon_total, steps, composition, amplification, gaussian);
                    let c = match b.calibrate() {
                        Ok(c) => c,
                        // Only the ε ≤ 1 theorems may refuse, and only when ε_iter > 1 is
                        // what the budget needs.
                        Err(e) => {
                            let capped = amplification == Amplification::Loose
                                || gaussian == GaussianCalibration::Classic;
                            assert!(capped, "{composition:?} {amplification:?}: {e}");
                            assert!(b.total_epsilon(1.0 - 1e-9)? <= epsilon_total, "{e}");
                            continue;
                        }
                    };
                    let again = b.total_epsilon(c.epsilon_iter)?;
                    assert!(again <= epsilon_total, "{again} > {epsilon_total}");
                    assert!(
                        (again - epsilon_total).abs() <= 1e-6 * epsilon_total,
                        "{composition:?} {amplification:?} {gaussian:?} ε_tot {epsilon_total}: {again}"
                    );
                    assert_eq!(c.epsilon_total, again);
                    calibrated += 1;
                    let delta_iter = 5e-6 / (steps as f64 * 0.01);
                    assert!((c.delta_iter - delta_iter).abs() <= 1e-18);
                    if gaussian == GaussianCalibration::Classic {
                        let classic = (2.0 * (1.25 / delta_iter).ln()).sqrt() / c.epsilon_iter;
                        assert!((c.paper_sigma - classic).abs() <= 1e-12 * classic);
                    } else {
                        // The analytic Gaussian never needs more noise than the classic bound.
                        let classic = (2.0 * (1.25 / delta_iter).ln()).sqrt() / c.epsilon_iter;
                        assert!(c.epsilon_iter >= 1.0 || c.paper_sigma <= classic);
                    }
                }
            }
        }
    }
    // 48 settings; only those needing ε_iter > 1 under an ε ≤ 1 theorem are refused.
    assert!(calibrated >= 30, "{calibrated}");
    Ok(())
}

/// The paper's claim for zCDP: a larger per-iteration budget than AC for the same total,
/// in its regime (Z2 reading, both amplification bounds).
#[test]
fn zcdp_allows_a_larger_per_iteration_budget_than_advanced_composition() -> dp_optim::Result<()> {
    for amplification in [Amplification::Tight, Amplification::Loose] {
        for (epsilon_total, steps) in [(0.5, 1000), (2.0, 1000), (2.0, 5000), (1.0, 100)] {
            let calibrate = |composition| {
                budget(
                    epsilon_total,
                    steps,
                    composition,
                    amplification,
                    GaussianCalibration::Analytic,
                )
                .calibrate()
            };
            let ac = calibrate(DpdComposition::AC)?;
            let zcdp = calibrate(DpdComposition::ZCDP)?;
            assert!(
                zcdp.epsilon_iter >= ac.epsilon_iter,
                "{amplification:?} ε_tot {epsilon_total}, T {steps}: zCDP {} < AC {}",
                zcdp.epsilon_iter,
                ac.epsilon_iter
            );
            assert!(zcdp.paper_sigma <= ac.paper_sigma);
        }
    }
    Ok(())
}

/// A budget that needs ε_iter > 1 is refused by the classic Gaussian and the loose
/// amplification (their theorems need ε ≤ 1), and met by the tight/analytic pair.
#[test]
fn budgets_outside_a_theorems_domain_are_refused() -> dp_optim::Result<()> {
    let classic = budget(
        8.0,
        500,
        DpdComposition::AC,
        Amplification::Tight,
        GaussianCalibration::Classic,
    );
    let message = classic
        .calibrate()
        .expect_err("needs eps_iter > 1")
        .to_string();
    assert!(message.contains("classic Gaussian"), "{message}");
    let loose = DpdBudget {
        gaussian: GaussianCalibration::Analytic,
        amplification: Amplification::Loose,
        ..classic
    };
    assert!(loose.calibrate().is_err());
    let sound = DpdBudget {
        gaussian: GaussianCalibration::Analytic,
        ..classic
    };
    let c = sound.calibrate()?;
    assert!(c.epsilon_iter > 1.0 && c.paper_sigma > 0.0);
    // Bad bookkeeping is a typed error, not a NaN.
    let bad = DpdBudget {
        delta_prime: 2e-5,
        ..sound
    };
    assert!(bad.calibrate().is_err());
    Ok(())
}

/// α = 4C²σ²/θ², per layer; θ = 0 is clamped at θ² = 1e-12 and counted.
#[test]
fn implied_dropout_rate_is_four_c_squared_sigma_squared_over_theta_squared() -> dp_optim::Result<()>
{
    let theta = [0.5f32, -2.0, 0.0, 1.0, 0.25];
    let (clip, sigma) = (4.0, 3.0);
    let rates = implied_dropout_rates(&theta, &[0..2, 2..5], clip, sigma)?;
    let v = 4.0 * clip * clip * sigma * sigma;
    assert_eq!(rates.len(), 2);
    assert_eq!((rates[0].count, rates[0].clamped), (2, 0));
    assert!((rates[0].mean - (v / 0.25 + v / 4.0) / 2.0).abs() <= 1e-9 * v);
    assert_eq!(rates[1].clamped, 1);
    assert!((rates[1].median - v / 0.0625).abs() <= 1e-9 * v);
    assert!((rates[1].p90 - v / 1e-12).abs() <= 1e-6 * v / 1e-12);
    let outside = std::slice::from_ref(&(3..9));
    assert!(implied_dropout_rates(&theta, outside, clip, sigma).is_err());
    Ok(())
}

#[test]
fn step_sizes_satisfy_robbins_monro() {
    let ok = StepSizeSchedule {
        initial: 0.5,
        decay_steps: 100.0,
        power: 0.6,
    };
    assert!(ok.validate().is_ok());
    assert_eq!(ok.at(0), 0.5);
    assert!((ok.at(100) - 0.5 * 2f64.powf(-0.6)).abs() < 1e-15);
    for power in [0.5, 0.3, 1.2, f64::NAN] {
        assert!(StepSizeSchedule { power, ..ok }.validate().is_err());
    }
}

fn dpd(placement: NoisePlacement, sigma: f64) -> DpdTraining {
    DpdTraining {
        calibration: dp_optim::dpd::DpdCalibration {
            epsilon_iter: 0.5,
            delta_iter: 1e-6,
            paper_sigma: sigma,
            epsilon_total: 1.0,
        },
        clip: 1.0,
        sampler: Sampler::FixedSize { batch_size: 20 },
        schedule: StepSizeSchedule {
            initial: 0.4,
            decay_steps: 5.0,
            power: 1.0,
        },
        prior_precision: 0.0,
        placement,
        ledger_delta: 1e-5,
    }
}

/// The ledger holds each step's actual noise: 2σ on the sum by default; with the literal
/// parameter-space placement, 2σ·S/lr_t (more noise here, since lr_t < S).
#[test]
fn the_ledger_records_the_noise_actually_added() -> dp_optim::Result<()> {
    let mut noise = NoiseSource::seeded(3);
    let data = toy_data(200, &mut noise);
    for placement in [NoisePlacement::ClippedSum, NoisePlacement::ParameterUpdate] {
        let mut training = dpd(placement, 1.5);
        let model = mlp(8, &[16], 2, Activation::Tanh, &mut noise)?;
        let mut engine = PrivacyEngine::new(
            model,
            training.train_config()?,
            data.len(),
            NoiseSource::seeded(4),
        )?;
        for _ in 0..6 {
            training.step(&mut engine, &data)?;
        }
        let scheme = training.sampler.scheme(data.len());
        let mut expected =
            AccountantKind::RdpClassic.build(scheme.relation(), &OrderGrid::Int2To64)?;
        for t in 0..6u64 {
            let multiplier = match placement {
                NoisePlacement::ClippedSum => 3.0,
                NoisePlacement::ParameterUpdate => 3.0 * 20.0 / training.schedule.at(t),
            };
            expected.compose(&scheme.gaussian_step(multiplier), 1)?;
        }
        let (ours, theirs) = (engine.epsilon()?.expect("private"), expected.epsilon(1e-5)?);
        assert!(
            (ours - theirs).abs() <= 1e-12 * theirs,
            "{placement:?}: {ours} vs {theirs}"
        );
        // The schedule reached the engine.
        match engine.config().optimizer {
            Optimizer::Sgd { lr, .. } => assert_eq!(lr, training.schedule.at(5)),
            other => panic!("{other:?}"),
        }
    }
    Ok(())
}

/// The prior shrinks θ by (1 − lr_t·λ/N) after the step; λ = 0 leaves it alone.
#[test]
fn the_gaussian_prior_shrinks_the_weights() -> dp_optim::Result<()> {
    let mut noise = NoiseSource::seeded(5);
    let data = toy_data(100, &mut noise);
    let run = |prior_precision: f64| -> dp_optim::Result<Vec<f32>> {
        let mut training = DpdTraining {
            prior_precision,
            ..dpd(NoisePlacement::ClippedSum, 1.0)
        };
        let model = mlp(8, &[4], 2, Activation::Tanh, &mut NoiseSource::seeded(6))?;
        let mut engine = PrivacyEngine::new(
            model,
            training.train_config()?,
            data.len(),
            NoiseSource::seeded(7),
        )?;
        training.step(&mut engine, &data)?;
        Ok(engine.model().parameters()?)
    };
    let (plain, shrunk) = (run(0.0)?, run(50.0)?);
    let factor = (1.0 - 0.4 * 50.0 / 100.0) as f32;
    for (p, s) in plain.iter().zip(&shrunk) {
        assert_eq!(*s, *p * factor);
    }
    Ok(())
}

fn non_private_engine(data_len: usize, seed: u64) -> dp_optim::Result<PrivacyEngine> {
    let model = mlp(
        8,
        &[16],
        2,
        Activation::Tanh,
        &mut NoiseSource::seeded(seed),
    )?;
    let config = TrainConfig {
        sampler: Sampler::FixedSize { batch_size: 20 },
        privacy: None,
        optimizer: Optimizer::Sgd {
            lr: 0.3,
            momentum: 0.0,
        },
        normalisation: GradientNormalisation::ExpectedBatchSize,
    };
    PrivacyEngine::new(model, config, data_len, NoiseSource::seeded(seed + 1))
}

/// Gaussian weight dropout: α > 0 changes the update α = 0 gives; the weights stay
/// finite; a private engine is refused (its ledger would not cover the baseline).
#[test]
fn gaussian_dropout_baseline() -> dp_optim::Result<()> {
    let mut noise = NoiseSource::seeded(8);
    let data = toy_data(200, &mut noise);
    let mut zero = non_private_engine(data.len(), 9)?;
    let before = zero.model().parameters()?;
    GaussianDropout { alpha: 0.0 }.step(&mut zero, &data)?;
    let after = zero.model().parameters()?;
    assert_ne!(before, after);
    let mut dropped = non_private_engine(data.len(), 9)?;
    GaussianDropout { alpha: 0.5 }.step(&mut dropped, &data)?;
    assert_ne!(after, dropped.model().parameters()?);
    for p in [&after, &dropped.model().parameters()?] {
        assert!(p.iter().all(|v| v.is_finite()));
    }
    let training = dpd(NoisePlacement::ClippedSum, 1.0);
    let model = mlp(8, &[16], 2, Activation::Tanh, &mut noise)?;
    let mut private = PrivacyEngine::new(
        model,
        training.train_config()?,
        data.len(),
        NoiseSource::seeded(1),
    )?;
    assert!(GaussianDropout { alpha: 0.1 }
        .step(&mut private, &data)
        .is_err());
    Ok(())
}

/// The posterior predictive over one iterate is that iterate's accuracy; over several it
/// is a valid accuracy.
#[test]
fn predictive_average_of_one_iterate_is_its_accuracy() -> dp_optim::Result<()> {
    let mut noise = NoiseSource::seeded(10);
    let data = toy_data(300, &mut noise);
    let mut engine = non_private_engine(data.len(), 11)?;
    for _ in 0..20 {
        engine.step(&data)?;
    }
    let mut average = PredictiveAverage::default();
    assert_eq!(average.accuracy(&data), None);
    average.add(engine.model(), &data)?;
    assert_eq!(
        average.accuracy(&data),
        Some(accuracy(engine.model(), &data)?)
    );
    for _ in 0..3 {
        engine.step(&data)?;
        average.add(engine.model(), &data)?;
    }
    assert_eq!(average.iterates(), 4);
    let a = average.accuracy(&data).expect("iterates");
    assert!((0.0..=1.0).contains(&a));
    Ok(())
}

/// DPD-AC's δ bookkeeping and the order of the three readings' ε (moved here from
/// dp-accounting with the formulas: they are the DPD paper's, not general theorems).
#[test]
fn dpd_accounting_readings() -> dp_optim::Result<()> {
    // DPD-AC: δ_tot = Tνδ_iter + δ′ exactly, as the paper's δ_iter = (δ_tot − δ′)/(Tν).
    let (steps, rate, delta_total) = (10_000u64, 0.01, 1e-5);
    let delta_prime = delta_total / 2.0;
    let delta_iter = (delta_total - delta_prime) / (steps as f64 * rate);
    let (ac_eps, ac_delta) = dpd_ac_epsilon(
        0.5,
        delta_iter,
        steps,
        rate,
        delta_prime,
        Amplification::Loose,
        false,
    )?;
    assert!((ac_delta - delta_total).abs() < 1e-18);
    let z2 = dpd_zcdp_epsilon(
        0.5,
        delta_iter,
        steps,
        rate,
        delta_total,
        ZcdpReading::AmplifiedPureDp,
        Amplification::Loose,
    )?;
    assert!(
        z2 < ac_eps,
        "Z2 allows more per-iteration budget: {z2} vs {ac_eps}"
    );
    let z1 = dpd_zcdp_epsilon(
        0.5,
        delta_iter,
        steps,
        rate,
        delta_total,
        ZcdpReading::GaussianNoAmplification,
        Amplification::Loose,
    )?;
    assert!(z1 > ac_eps, "Z1 ignores amplification and is looser");
    Ok(())
}

/// The paper's σ keeps its serialised name, `sigma`: the run cache's records and keys
/// were written with it.
#[test]
fn the_paper_sigma_is_serialised_as_sigma() {
    let c = dp_optim::dpd::DpdCalibration {
        epsilon_iter: 0.5,
        delta_iter: 1e-6,
        paper_sigma: 1.25,
        epsilon_total: 1.0,
    };
    let json = serde_json::to_value(c).expect("serialised");
    assert_eq!(json["sigma"], 1.25);
    assert_eq!(c.noise_multiplier(), 2.5);
}
