//! Sparse DP-SGD on word2vec: noise only where selected, reproducible selections, and the
//! step's privacy event.

use dp_accounting::{Accountant, AccountantKind, NeighbouringRelation, OrderGrid};
use dp_mechanisms::NoiseSource;
use dp_models::word2vec::{NoiseDistribution, PairSet, SharedEmbedding};
use dp_optim::wide::{CoordinateSelection, WideConfig, WideMethod, WideTrainer};

fn pairs(n: usize, vocabulary: u32, rng: &mut NoiseSource) -> PairSet {
    let noise = NoiseDistribution::from_counts(&vec![1; vocabulary as usize]).expect("counts");
    let mut set = PairSet {
        negatives_per_sample: 8,
        ..PairSet::default()
    };
    for _ in 0..n {
        let t = (rng.uniform() * f64::from(vocabulary)) as u32 % vocabulary;
        let c = (t + 1) % vocabulary;
        set.targets.push(t);
        set.contexts.push(c);
        for _ in 0..8 {
            set.negatives.push(noise.draw_excluding(t, rng));
        }
    }
    set
}

fn trainer(method: WideMethod, seed: u64, data: &PairSet) -> dp_optim::Result<WideTrainer> {
    let model = SharedEmbedding::new(50, 8, 0.1, &mut NoiseSource::seeded(1));
    WideTrainer::new(
        model,
        WideConfig {
            sampling_rate: 0.05,
            clip: 1.0,
            method,
            lr: 0.01,
        },
        data.len(),
        NoiseSource::seeded(seed),
    )
}

fn sparse(selection: CoordinateSelection) -> WideMethod {
    WideMethod::Sparse {
        noise_multiplier: 0.5,
        fraction: 0.05,
        second_clip: 0.5,
        selection,
    }
}

const SELECTIONS: [CoordinateSelection; 2] = [
    CoordinateSelection::ExponentialTopK { epsilon: 5.0 },
    CoordinateSelection::SparseVector {
        epsilon: 5.0,
        threshold: 0.05,
    },
];

/// The applied gradient is zero off the selected support, and the support has at most k
/// coordinates; dense DP-SGD touches every coordinate.
#[test]
fn noise_lands_only_on_selected_coordinates() -> dp_optim::Result<()> {
    let data = pairs(400, 50, &mut NoiseSource::seeded(2));
    for selection in SELECTIONS {
        let mut t = trainer(sparse(selection), 3, &data)?;
        for _ in 0..5 {
            let step = t.step(&data)?;
            let chosen = t.last_selection();
            assert_eq!(step.updated_coordinates, chosen.len());
            assert!(chosen.len() <= t.selected_per_step());
            let on: std::collections::HashSet<usize> = chosen.iter().copied().collect();
            for (j, &g) in t.last_gradient().iter().enumerate() {
                if !on.contains(&j) {
                    assert_eq!(g, 0.0, "{selection:?}: coordinate {j} off the support");
                }
            }
            assert!(chosen.iter().any(|&j| t.last_gradient()[j] != 0.0));
        }
    }
    let mut dense = trainer(
        WideMethod::DpSgd {
            noise_multiplier: 0.5,
        },
        3,
        &data,
    )?;
    dense.step(&data)?;
    assert!(dense.last_gradient().iter().all(|&g| g != 0.0));
    Ok(())
}

/// The same seed gives the same batches, selections and weights; another seed does not.
#[test]
fn selections_are_reproducible_under_a_seed() -> dp_optim::Result<()> {
    let data = pairs(400, 50, &mut NoiseSource::seeded(4));
    for selection in SELECTIONS {
        let run = |seed| -> dp_optim::Result<(Vec<Vec<usize>>, Vec<f32>)> {
            let mut t = trainer(sparse(selection), seed, &data)?;
            let mut chosen = Vec::new();
            for _ in 0..4 {
                t.step(&data)?;
                chosen.push(t.last_selection());
            }
            Ok((chosen, t.model().weights().to_vec()))
        };
        let (a, b, c) = (run(9)?, run(9)?, run(10)?);
        assert_eq!(a, b);
        assert_ne!(a.0, c.0);
    }
    Ok(())
}

/// Each private step is one Poisson-sampled event: the Gaussian alone for DP-SGD (exact
/// RDP), Gaussian ∘ selection for sparse steps (general bound, so more ε than the noise
/// alone); non-private training has none.
#[test]
fn step_events_compose_noise_and_selection() -> dp_optim::Result<()> {
    let data = pairs(400, 50, &mut NoiseSource::seeded(5));
    assert!(trainer(WideMethod::NonPrivate, 1, &data)?
        .step_event()?
        .is_none());
    let epsilon = |method| -> dp_optim::Result<f64> {
        let event = trainer(method, 1, &data)?.step_event()?.expect("private");
        let mut a = AccountantKind::RdpClassic
            .build(NeighbouringRelation::AddOrRemoveOne, &OrderGrid::Int2To64)?;
        a.compose(&event, 200)?;
        Ok(a.epsilon(1e-5)?)
    };
    let noise_only = epsilon(WideMethod::DpSgd {
        noise_multiplier: 0.5,
    })?;
    for selection in SELECTIONS {
        let with_selection = epsilon(sparse(selection))?;
        assert!(
            with_selection > noise_only,
            "{selection:?}: {with_selection} <= {noise_only}"
        );
        assert!(with_selection.is_finite());
    }
    Ok(())
}

/// Non-private Adam lowers the training loss on a learnable toy task.
#[test]
fn non_private_training_learns() -> dp_optim::Result<()> {
    let data = pairs(400, 50, &mut NoiseSource::seeded(6));
    let mut t = trainer(WideMethod::NonPrivate, 7, &data)?;
    let before = t.model().mean_loss(&data)?;
    for _ in 0..400 {
        t.step(&data)?;
    }
    let after = t.model().mean_loss(&data)?;
    assert!(after < before - 0.5, "{before} -> {after}");
    Ok(())
}
