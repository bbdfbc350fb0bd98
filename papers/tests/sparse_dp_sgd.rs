//! Sparse DP-SGD on word2vec through the engine: noise only where selected, the joint
//! event of selection and noise on the ledger, reproducible selections, and the engine's
//! refusals (a selection its charge does not cover, scores more sensitive than the
//! selector, a sum that is not zero off its support).

use dp_accounting::{
    Accountant, AccountantKind, DpEvent, NeighbouringRelation, OrderGrid, SamplingScheme,
};
use dp_mechanisms::{Mechanism, NoiseSource};
use dp_models::ClipRule;
use dp_optim::{
    Algorithm, Clipping, CoordinateSelection, DpSgd, Error, GradientNormalisation, Optimizer,
    PrivacyConfig, PrivacyEngine, Sampler, SparseDpSgd, TrainConfig,
};
use dp_papers::wide::word2vec::{NoiseDistribution, PairSet, SharedEmbedding};

const Q: f64 = 0.05;
const S1: f64 = 1.0;
const S2: f64 = 0.5;
const SIGMA: f64 = 0.5;

fn pairs(n: usize, vocabulary: u32, rng: &mut NoiseSource) -> PairSet {
    let noise = NoiseDistribution::from_counts(&vec![1; vocabulary as usize]).expect("counts");
    let mut set = PairSet {
        negatives_per_sample: 8,
        ..PairSet::default()
    };
    for _ in 0..n {
        let t = (rng.uniform() * f64::from(vocabulary)) as u32 % vocabulary;
        set.targets.push(t);
        set.contexts.push((t + 1) % vocabulary);
        for _ in 0..8 {
            set.negatives.push(noise.draw_excluding(t, rng));
        }
    }
    set
}

fn config(clip: Option<f64>) -> TrainConfig {
    TrainConfig {
        sampler: Sampler::Poisson { sampling_rate: Q },
        privacy: clip.map(|max_grad_norm| PrivacyConfig {
            noise_multiplier: SIGMA,
            max_grad_norm,
            clipping: Clipping::Flat,
            delta: 1e-5,
            target_epsilon: None,
            accountant: AccountantKind::RdpClassic,
            orders: OrderGrid::Int2To64,
            correlation: Default::default(),
        }),
        optimizer: Optimizer::Adam {
            lr: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        },
        normalisation: GradientNormalisation::RealisedBatchSize,
    }
}

fn engine(clip: Option<f64>, seed: u64, data: &PairSet) -> PrivacyEngine<SharedEmbedding> {
    let model = SharedEmbedding::new(50, 8, 0.1, &mut NoiseSource::seeded(1));
    PrivacyEngine::new(model, config(clip), data.len(), NoiseSource::seeded(seed)).expect("engine")
}

fn sparse(selection: CoordinateSelection) -> SparseDpSgd {
    SparseDpSgd::new(S1, 0.05, selection).expect("sparse")
}

const SELECTIONS: [CoordinateSelection; 2] = [
    CoordinateSelection::ExponentialTopK { epsilon: 5.0 },
    CoordinateSelection::SparseVector {
        epsilon: 5.0,
        threshold: 0.05,
    },
];

/// The released gradient is zero off the selected support, which has at most k
/// coordinates; each step's ledger entry is the sampled composition of the Gaussian and
/// the selection.
#[test]
fn noise_lands_only_on_selected_coordinates() -> dp_optim::Result<()> {
    let data = pairs(400, 50, &mut NoiseSource::seeded(2));
    for selection in SELECTIONS {
        let mut e = engine(Some(S2), 3, &data);
        let algorithm = sparse(selection);
        let selector = algorithm.selector(400)?;
        for _ in 0..5 {
            let mut charge = e.begin_step_with(&data, selector.event())?;
            let batch = e.draw_batch(&mut charge)?;
            let first = ClipRule::Flat { max_grad_norm: S1 };
            let scores = e.clipped_sum_with(&data, &batch, first)?;
            let picked = e.select_coordinates(charge, &scores, &selector)?;
            let chosen = picked.coordinates().to_vec();
            assert!(chosen.len() <= algorithm.selected_per_step(400));
            let clipped = e.clipped_sum_on_support(&data, &batch, first, &chosen)?;
            let noisy = e.release_on_support(picked, clipped)?;
            let on: std::collections::HashSet<usize> = chosen.iter().copied().collect();
            let released = noisy.sum()?;
            for (j, &g) in released.iter().enumerate() {
                assert!(
                    on.contains(&j) || g == 0.0,
                    "{selection:?}: {j} off the support"
                );
            }
            assert!(chosen.iter().any(|&j| released[j] != 0.0));
            e.apply_update(&noisy)?;
        }
        let joint = SamplingScheme::Poisson { sampling_rate: Q }.amplify(DpEvent::Composed {
            events: vec![DpEvent::gaussian(SIGMA), selector.event()],
        })?;
        assert_eq!(e.epsilon()?, Some(epsilon(&joint, 5)?), "{selection:?}");
    }
    Ok(())
}

fn epsilon(event: &DpEvent, steps: u64) -> dp_optim::Result<f64> {
    let mut a = AccountantKind::RdpClassic
        .build(NeighbouringRelation::AddOrRemoveOne, &OrderGrid::Int2To64)?;
    a.compose(event, steps)?;
    Ok(a.epsilon(1e-5)?)
}

/// The sparse step's joint event costs more than the Gaussian alone, and is finite.
#[test]
fn the_selection_is_charged_beside_the_noise() -> dp_optim::Result<()> {
    let data = pairs(400, 50, &mut NoiseSource::seeded(5));
    let mut dense = engine(Some(S1), 1, &data);
    for _ in 0..20 {
        DpSgd.step(&mut dense, &data)?;
    }
    let noise_only = dense.epsilon()?.expect("private");
    for selection in SELECTIONS {
        let mut e = engine(Some(S2), 1, &data);
        let mut algorithm = sparse(selection);
        for _ in 0..20 {
            algorithm.step(&mut e, &data)?;
        }
        let with_selection = e.epsilon()?.expect("private");
        assert!(with_selection > noise_only && with_selection.is_finite());
        assert_eq!(e.steps(), 20);
    }
    Ok(())
}

/// The same seed gives the same batches, selections and weights; another seed does not.
#[test]
fn selections_are_reproducible_under_a_seed() -> dp_optim::Result<()> {
    let data = pairs(400, 50, &mut NoiseSource::seeded(4));
    for selection in SELECTIONS {
        let run = |seed| -> dp_optim::Result<(Vec<Vec<usize>>, Vec<f32>)> {
            let mut e = engine(Some(S2), seed, &data);
            let mut algorithm = sparse(selection);
            let mut chosen = Vec::new();
            for _ in 0..4 {
                algorithm.step(&mut e, &data)?;
                chosen.push(algorithm.last_selection().to_vec());
            }
            Ok((chosen, e.model().weights().to_vec()))
        };
        let (a, b, c) = (run(9)?, run(9)?, run(10)?);
        assert_eq!(a, b);
        assert_ne!(a.0, c.0);
    }
    Ok(())
}

/// A selection the step's charge was not begun with, scores clipped wider than the
/// selector's sensitivity, scores or a sum of another step's batch, and a dense sum
/// released on a support are all refused.
#[test]
fn the_engine_refuses_uncovered_selections_and_releases() -> dp_optim::Result<()> {
    let data = pairs(400, 50, &mut NoiseSource::seeded(8));
    let algorithm = sparse(SELECTIONS[0]);
    let selector = algorithm.selector(400)?;
    let first = ClipRule::Flat { max_grad_norm: S1 };
    let mut e = engine(Some(S2), 3, &data);
    let mut plain = e.begin_step(&data)?;
    let batch = e.draw_batch(&mut plain)?;
    let scores = e.clipped_sum_with(&data, &batch, first)?;
    assert!(matches!(
        e.select_coordinates(plain, &scores, &selector),
        Err(Error::InvalidSetting {
            name: "selector",
            ..
        })
    ));
    let mut charge = e.begin_step_with(&data, selector.event())?;
    assert!(matches!(
        e.select_coordinates(charge, &scores, &selector),
        Err(Error::UnprotectedParameter(_))
    ));
    let mut charge2 = e.begin_step_with(&data, selector.event())?;
    let batch = e.draw_batch(&mut charge2)?;
    assert!(e.draw_batch(&mut charge2).is_err(), "one batch per charge");
    let wide = e.clipped_sum_with(
        &data,
        &batch,
        ClipRule::Flat {
            max_grad_norm: 2.0 * S1,
        },
    )?;
    assert!(matches!(
        e.select_coordinates(charge2, &wide, &selector),
        Err(Error::UnprotectedParameter(_))
    ));
    charge = e.begin_step_with(&data, selector.event())?;
    let batch = e.draw_batch(&mut charge)?;
    let scores = e.clipped_sum_with(&data, &batch, first)?;
    let selection = e.select_coordinates(charge, &scores, &selector)?;
    let dense = e.clipped_sum(&data, &batch)?;
    assert!(matches!(
        e.release_on_support(selection, dense),
        Err(Error::UnprotectedParameter(_))
    ));
    // Joint steps need a private run.
    let mut open = engine(None, 3, &data);
    assert!(open.begin_step_with(&data, selector.event()).is_err());
    Ok(())
}

/// Non-private Adam lowers the training loss on a learnable toy task.
#[test]
fn non_private_training_learns() -> dp_optim::Result<()> {
    let data = pairs(400, 50, &mut NoiseSource::seeded(6));
    let mut e = engine(None, 7, &data);
    let before = e.model().mean_loss(&data)?;
    for _ in 0..400 {
        DpSgd.step(&mut e, &data)?;
    }
    let after = e.model().mean_loss(&data)?;
    assert!(after < before - 0.5, "{before} -> {after}");
    Ok(())
}
