//! NoisySGD / NoisyAdam as the GDP paper runs them: its accounting values through the
//! engine's own ledger, the μ > 2 stop rule, and division by the realised batch size.

use dp_accounting::Accountant;
use dp_mechanisms::NoiseSource;
use dp_models::models::{mlp, Activation};
use dp_models::PrivateModel;
use dp_optim::gdp::{
    clt_recalibrated_sigma, moments_accountant_epsilon, MuStopRule, NoisyTraining,
};
use dp_optim::{GradientNormalisation, PrivacyEngine};

fn mnist(sigma: f64) -> NoisyTraining {
    NoisyTraining {
        sampling_rate: 256.0 / 60_000.0,
        noise_multiplier: sigma,
        clip: 1.5,
        delta: 1e-5,
        normalisation: GradientNormalisation::RealisedBatchSize,
    }
}

/// Figure 4's caption: σ = 1.3 for 20 epochs and σ = 0.7 for 70 epochs give ε 1.34 and
/// 8.68 under the moments accountant, μ_CLT 0.35 and 1.78, and σ̃ = 1.06 and 0.638.
#[test]
fn figure_4_accounting_through_the_noisy_sgd_config() -> dp_optim::Result<()> {
    for (sigma, epochs, eps, mu, sigma_tilde) in
        [(1.3, 20u64, 1.34, 0.35, 1.06), (0.7, 70, 8.68, 1.78, 0.638)]
    {
        let training = mnist(sigma);
        let config = training.noisy_sgd(0.15)?;
        let privacy = config.privacy.clone().expect("private");
        // The engine's ledger counts whole steps; the authors' T = epochs·n/B is fractional.
        let steps = epochs * 60_000 / 256;
        let scheme = config.sampler.scheme(60_000);
        let mut accountant = privacy
            .accountant
            .build(scheme.relation(), &privacy.orders)?;
        accountant.compose(&scheme.gaussian_step(sigma), steps)?;
        let engine_ma = accountant.epsilon(1e-5)?;
        let t = epochs as f64 * 60_000.0 / 256.0;
        let (ma, _) = moments_accountant_epsilon(training.sampling_rate, sigma, t, 1e-5);
        assert!(
            engine_ma <= ma && ma - engine_ma < 1e-3,
            "{engine_ma} vs {ma}"
        );
        // The caption truncates: 1.3498 → "1.34", 8.6758 → "8.68" (rounded).
        assert!((ma - eps).abs() < 0.01, "σ {sigma}: ε_MA {ma}");
        let tilde = clt_recalibrated_sigma(ma, 1e-5, training.sampling_rate, steps)?;
        assert!((tilde - sigma_tilde).abs() < 0.0051, "σ̃ {tilde}");
        // μ_CLT of the recalibrated run.
        let recalibrated = NoisyTraining {
            noise_multiplier: tilde,
            ..training
        };
        assert!((recalibrated.mu_clt(steps) - mu).abs() < 0.005);
        assert!(!MuStopRule::AUTHORS.should_stop(&training, steps));
    }
    Ok(())
}

/// Adult (n = 29,305, B = 256, σ = 0.55): μ_CLT passes 2 during epoch 18, so the
/// authors' scripts stop after it.
#[test]
fn the_mu_stop_rule_ends_adult_after_epoch_18() {
    let n = 29_305u64;
    let training = NoisyTraining {
        sampling_rate: 256.0 / n as f64,
        noise_multiplier: 0.55,
        clip: 1.0,
        delta: 1e-5,
        normalisation: GradientNormalisation::RealisedBatchSize,
    };
    let steps_per_epoch = (n as f64 / 256.0).round() as u64;
    let first_stop = (1..=20)
        .find(|e| MuStopRule::AUTHORS.should_stop(&training, e * steps_per_epoch))
        .expect("stops within 20 epochs");
    assert_eq!(first_stop, 18);
}

/// With the same seed the batch and the noise are identical, so the two normalisations'
/// updates differ exactly by the factor qn / |I|.
#[test]
fn realised_batch_normalisation_divides_by_the_drawn_batch() -> dp_optim::Result<()> {
    let n = 200;
    let data = super::toy_data(n, &mut NoiseSource::seeded(3));
    let run = |normalisation| -> dp_optim::Result<(Vec<f32>, Vec<f32>, usize)> {
        let training = NoisyTraining {
            sampling_rate: 0.3,
            noise_multiplier: 1.0,
            clip: 1.0,
            delta: 1e-5,
            normalisation,
        };
        let mut noise = NoiseSource::seeded(9);
        let model = mlp(8, &[4], 2, Activation::Tanh, &mut noise)?;
        let before = model.parameters()?;
        let mut engine = PrivacyEngine::new(model, training.noisy_sgd(0.1)?, n, noise)?;
        let report = engine.step(&data)?;
        Ok((before, engine.model().parameters()?, report.batch_size))
    };
    let (before, expected, b) = run(GradientNormalisation::ExpectedBatchSize)?;
    let (before2, realised, b2) = run(GradientNormalisation::RealisedBatchSize)?;
    assert_eq!((&before, b), (&before2, b2));
    assert!(
        b > 0 && b != 60,
        "the drawn batch ({b}) differs from qn = 60"
    );
    let factor = 60.0 / b as f64;
    for ((t0, e), r) in before.iter().zip(&expected).zip(&realised) {
        let (de, dr) = (f64::from(e - t0), f64::from(r - t0));
        assert!(
            (dr - de * factor).abs() <= 1e-5 * (1.0 + de.abs()),
            "{dr} vs {de}·{factor}"
        );
    }
    Ok(())
}
