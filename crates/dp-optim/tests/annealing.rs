//! SA-DPSGD: the acceptance rule, undoing rejected updates, and its two accountants.

use dp_mechanisms::NoiseSource;
use dp_models::models::{mlp, Activation};
use dp_models::PrivateModel;
use dp_optim::annealing::{
    acceptance_probability, annealed_accounting, decide, AnnealingConfig, AnnealingState, Decision,
    EnergySource,
};
use dp_optim::Sampler;

#[test]
fn acceptance_rule_of_equation_3() {
    let config = AnnealingConfig::default(); // Q₀ = 10, μ₀ = 10
    let mut state = AnnealingState::default();
    // No reference yet, or ΔE ≤ 0: always accepted, whatever u.
    assert_eq!(decide(&config, &state, None, 0.999), Decision::Improved);
    assert_eq!(
        decide(&config, &state, Some(-0.3), 0.999),
        Decision::Improved
    );
    assert_eq!(
        decide(&config, &state, Some(0.0), 0.999),
        Decision::Improved
    );
    // τ = 0: temperature 0, probability 1 even uphill.
    assert_eq!(acceptance_probability(5.0, 10.0, 0), 1.0);
    assert_eq!(
        decide(&config, &state, Some(5.0), 0.999),
        Decision::AcceptedUphill
    );
    // τ = 3, ΔE = 0.01: p = exp(−0.3).
    state.accepted = 3;
    let p = (-0.3f64).exp();
    assert!((acceptance_probability(0.01, 10.0, 3) - p).abs() < 1e-15);
    assert_eq!(
        decide(&config, &state, Some(0.01), p - 1e-9),
        Decision::AcceptedUphill
    );
    assert_eq!(
        decide(&config, &state, Some(0.01), p + 1e-9),
        Decision::Rejected
    );
    // μ ≥ μ₀: forced acceptance, even for a huge ΔE.
    state.rejections = 10;
    assert_eq!(decide(&config, &state, Some(1e9), 0.999), Decision::Forced);
    assert!(Decision::Forced.accepted() && !Decision::Rejected.accepted());
}

/// Rejected updates leave θ exactly as it was; accepted ones keep the step; the ledger
/// charges every iteration.
#[test]
fn rejected_updates_are_undone_and_every_iteration_is_charged() -> dp_optim::Result<()> {
    let n = 300;
    let data = super::toy_data(n, &mut NoiseSource::seeded(4));
    let mut noise = NoiseSource::seeded(12);
    let model = mlp(8, &[8], 2, Activation::Tanh, &mut noise)?;
    let training = dp_optim::gdp::NoisyTraining {
        sampling_rate: 0.1,
        noise_multiplier: 4.0, // loud noise: many uphill updates
        clip: 1.0,
        delta: 1e-5,
        normalisation: dp_optim::GradientNormalisation::ExpectedBatchSize,
    };
    let mut engine = dp_optim::PrivacyEngine::new(model, training.noisy_sgd(0.5)?, n, noise)?;
    let config = AnnealingConfig {
        initial_temperature: 100.0,
        max_rejections: 3,
        ..AnnealingConfig::default()
    };
    let mut state = AnnealingState::default();
    let (mut rejected, mut forced) = (0, 0);
    for _ in 0..60 {
        let before = engine.model().parameters()?;
        let step = crate::anneal(&mut engine, &data, &config, &mut state)?;
        let after = engine.model().parameters()?;
        match step.decision {
            Decision::Rejected => {
                rejected += 1;
                assert_eq!(before, after, "a rejected update is undone exactly");
            }
            Decision::Forced => forced += 1,
            _ => {}
        }
        if step.decision.accepted() && step.batch_size > 0 {
            assert_ne!(before, after);
        }
        assert!(state.rejections <= config.max_rejections);
    }
    assert_eq!(state.iterations, 60);
    assert_eq!(state.accepted + rejected, 60);
    assert_eq!(state.forced, forced);
    assert!(
        rejected > 0,
        "loud noise and a hot temperature must reject something"
    );
    assert_eq!(
        engine.steps(),
        60,
        "the ledger charges rejected iterations too"
    );
    let accounting = annealed_accounting(
        &Sampler::Poisson { sampling_rate: 0.1 },
        n,
        4.0,
        1e-5,
        &config,
        &state,
    )?;
    assert!(accounting.all_steps_epsilon > accounting.paper_epsilon);
    assert!(
        !accounting.conservative_is_sound,
        "same-batch energy reads private data"
    );
    let public = AnnealingConfig {
        energy: EnergySource::Public,
        ..config
    };
    let err = crate::anneal(&mut engine, &data, &public, &mut state);
    assert!(
        err.is_err(),
        "public energy without a public set is an error"
    );
    Ok(())
}

/// The paper's accountant (τ steps, classic conversion, α ∈ {2..64}) gives ε ≈ 3 for
/// the Tramèr–Boneh settings of its Table 1 (`docs/accounting.md`, "Test vectors"), and the
/// all-steps ε is never below it.
#[test]
fn paper_accountant_reproduces_the_table_1_budgets() -> dp_optim::Result<()> {
    for (n, batch, sigma, epochs, expected) in [
        (60_000usize, 512usize, 1.23, 40u64, 2.994),
        (60_000, 2048, 2.15, 40, 3.003),
        (50_000, 1024, 1.54, 30, 3.005),
    ] {
        let accepted = (n / batch) as u64 * epochs;
        let state = AnnealingState {
            iterations: accepted + accepted / 5,
            accepted,
            ..AnnealingState::default()
        };
        let sampler = Sampler::Poisson {
            sampling_rate: batch as f64 / n as f64,
        };
        let a = annealed_accounting(
            &sampler,
            n,
            sigma,
            1e-5,
            &AnnealingConfig::default(),
            &state,
        )?;
        assert!(
            (a.paper_epsilon - expected).abs() < 5e-4,
            "{} vs {expected}",
            a.paper_epsilon
        );
        assert!(a.all_steps_epsilon >= a.paper_epsilon);
    }
    Ok(())
}

/// The privatised acceptance test is charged to the ledger at every iteration, and the
/// ledger then agrees with the sound all-steps accountant.
#[test]
fn privatised_acceptance_is_charged_and_sound() -> dp_optim::Result<()> {
    let n = 300;
    let data = super::toy_data(n, &mut NoiseSource::seeded(8));
    let mut noise = NoiseSource::seeded(13);
    let model = mlp(8, &[8], 2, Activation::Tanh, &mut noise)?;
    let mut config = dp_optim::gdp::NoisyTraining {
        sampling_rate: 0.1,
        noise_multiplier: 1.5,
        clip: 1.0,
        delta: 1e-5,
        normalisation: dp_optim::GradientNormalisation::ExpectedBatchSize,
    }
    .noisy_sgd(0.3)?;
    if let Some(p) = config.privacy.as_mut() {
        p.orders = dp_accounting::OrderGrid::Int2To64;
    }
    let mut engine = dp_optim::PrivacyEngine::new(model, config, n, noise)?;
    let annealing = AnnealingConfig {
        energy: EnergySource::Privatised {
            sampling_rate: 0.1,
            clip: 0.5,
            noise_multiplier: 2.0,
        },
        ..AnnealingConfig::default()
    };
    let mut state = AnnealingState::default();
    for _ in 0..20 {
        let step = crate::anneal(&mut engine, &data, &annealing, &mut state)?;
        assert!(step.delta_energy.is_some_and(f64::is_finite));
    }
    let sound = annealed_accounting(
        &Sampler::Poisson { sampling_rate: 0.1 },
        n,
        1.5,
        1e-5,
        &annealing,
        &state,
    )?;
    assert!(sound.conservative_is_sound);
    let ledger = engine.epsilon()?.expect("private");
    assert!(
        (ledger - sound.all_steps_epsilon).abs() < 1e-9 * ledger,
        "{ledger} vs {}",
        sound.all_steps_epsilon
    );
    assert!(sound.all_steps_epsilon > sound.paper_epsilon);
    let bad = AnnealingConfig {
        energy: EnergySource::Privatised {
            sampling_rate: 0.1,
            clip: 0.0,
            noise_multiplier: 2.0,
        },
        ..AnnealingConfig::default()
    };
    assert!(crate::anneal(&mut engine, &data, &bad, &mut state).is_err());
    Ok(())
}
