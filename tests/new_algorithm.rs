//! A new algorithm written outside dp-optim with its public API only: DP-SGD whose step
//! length is chosen each step by a privatised line search. The engine must keep its
//! ledger right: every gradient release and every noisy validation loss is charged.

use candle_core::{Device, Tensor};
use dp_accounting::{Accountant, AccountantKind, DpEvent, OrderGrid};
use dp_mechanisms::{GaussianMechanism, NoiseSource};
use dp_models::data::Dataset;
use dp_models::loss::cross_entropy;
use dp_models::models::{mlp, Activation};
use dp_models::Classifier;
use dp_optim::{
    accuracy, Algorithm, Clipping, GradientNormalisation, Optimizer, PrivacyConfig, PrivacyEngine,
    Result, Sampler, StepReport, TrainConfig,
};

/// DP-SGD with a privatised line search: release the noisy gradient once, try each
/// candidate learning rate, score each by a noisy validation loss on a fresh Poisson
/// batch (losses clipped to [0, C_l], summed: sensitivity C_l under add/remove-one), keep
/// the best, apply it.
struct LineSearchDpSgd {
    candidates: Vec<f64>,
    validation_rate: f64,
    loss_mechanism: GaussianMechanism,
}

impl LineSearchDpSgd {
    /// The clipped loss sum of the model on `batch`.
    fn clipped_loss_sum<M: Classifier>(
        &self,
        model: &M,
        data: &Dataset,
        batch: &[usize],
    ) -> Result<f64> {
        if batch.is_empty() {
            return Ok(0.0);
        }
        let size = data.example_size();
        let features: Vec<f32> = batch
            .iter()
            .flat_map(|&i| data.features[i * size..][..size].iter().copied())
            .collect();
        let labels: Vec<u32> = batch.iter().map(|&i| data.labels[i]).collect();
        let x = Tensor::from_vec(features, (batch.len(), size), &Device::Cpu)?;
        let (losses, _) = cross_entropy(&model.logits(&x)?, &labels, data.classes);
        let bound = self.loss_mechanism.sensitivity();
        Ok(losses.iter().map(|&l| f64::from(l).clamp(0.0, bound)).sum())
    }
}

impl<M: Classifier> Algorithm<M> for LineSearchDpSgd {
    fn step(&mut self, engine: &mut PrivacyEngine<M>, data: &Dataset) -> Result<StepReport> {
        let mut charge = engine.begin_step(data)?;
        let batch = engine.draw_batch(&mut charge)?;
        let clipped = engine.clipped_sum(data, &batch)?;
        let noisy = engine.release(charge, clipped)?;
        let validation = engine.draw_extra_batch(Sampler::Poisson {
            sampling_rate: self.validation_rate,
        });
        let before = engine.snapshot()?;
        let mut best = (f64::INFINITY, self.candidates[0]);
        for &lr in &self.candidates {
            engine.set_learning_rate(lr)?;
            engine.apply_update(&noisy)?;
            let loss = self.clipped_loss_sum(engine.model(), data, validation.indices())?;
            let noisy_loss = engine.release_value(loss, &self.loss_mechanism, &validation)?;
            if noisy_loss < best.0 {
                best = (noisy_loss, lr);
            }
            engine.rollback(before.clone())?;
        }
        engine.set_learning_rate(best.1)?;
        engine.apply_update(&noisy)
    }
}

fn toy_data(n: usize, noise: &mut NoiseSource) -> Dataset {
    let features: Vec<f32> = (0..n * 8).map(|_| noise.uniform() as f32).collect();
    let labels = (0..n).map(|i| u32::from(features[i * 8] > 0.5)).collect();
    Dataset {
        features,
        labels,
        shape: vec![8],
        classes: 2,
    }
}

#[test]
fn a_line_search_algorithm_written_outside_dp_optim_trains_with_a_correct_ledger() -> Result<()> {
    let mut noise = NoiseSource::seeded(7);
    let (train, test) = (toy_data(2000, &mut noise), toy_data(500, &mut noise));
    let model = mlp(8, &[16], 2, Activation::Tanh, &mut noise)?;
    let (q, sigma, q_v, sigma_v) = (0.05, 1.0, 0.05, 1.5);
    let config = TrainConfig {
        sampler: Sampler::Poisson { sampling_rate: q },
        privacy: Some(PrivacyConfig {
            noise_multiplier: sigma,
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
            momentum: 0.0,
        },
        normalisation: GradientNormalisation::ExpectedBatchSize,
    };
    let mut engine = PrivacyEngine::new(model, config, train.len(), noise)?;
    let mut algorithm = LineSearchDpSgd {
        candidates: vec![0.25, 1.0, 4.0],
        validation_rate: q_v,
        loss_mechanism: GaussianMechanism::new(2.0, sigma_v)?,
    };
    let before = accuracy(engine.model(), &test)?;
    let steps = 60u64;
    for _ in 0..steps {
        algorithm.step(&mut engine, &train)?;
    }
    let after = accuracy(engine.model(), &test)?;
    assert!(
        after > 0.85 && after > before,
        "accuracy {before} -> {after}"
    );
    assert_eq!(engine.steps(), steps);

    // The ledger holds every release: 60 sampled Gaussians on the gradient, and three
    // sampled Gaussians on the validation loss per step.
    let mut expected = AccountantKind::Rdp.build(
        dp_accounting::NeighbouringRelation::AddOrRemoveOne,
        &OrderGrid::Opacus,
    )?;
    let gradient = DpEvent::poisson_sampled(q, DpEvent::gaussian(sigma));
    let validation = DpEvent::poisson_sampled(q_v, DpEvent::gaussian(sigma_v));
    for _ in 0..steps {
        expected.compose(&gradient, 1)?;
        expected.compose(&validation, 3)?;
    }
    let (ours, theirs) = (engine.epsilon()?.expect("private"), expected.epsilon(1e-5)?);
    assert!((ours - theirs).abs() <= 1e-9 * theirs, "{ours} vs {theirs}");
    // Leaving out the validation releases would understate ε.
    let mut gradient_only = AccountantKind::Rdp.build(
        dp_accounting::NeighbouringRelation::AddOrRemoveOne,
        &OrderGrid::Opacus,
    )?;
    gradient_only.compose(&gradient, steps)?;
    let without = gradient_only.epsilon(1e-5)?;
    assert!(without < 0.9 * ours, "{without} vs {ours}");
    Ok(())
}
