//! The cyclic and truncated Poisson samplers: what they draw, and what the engine charges
//! for them (a cycle of the groups once; the truncated Gaussian's event every step).

use dp_accounting::{DpEvent, SamplingScheme};
use dp_mechanisms::NoiseSource;
use dp_optim::{Checkpoint, Error, PrivacyEngine, RunField, Sampler, ShuffleState};

use super::{charges, engine, private, toy_data};

const CYCLIC: Sampler = Sampler::CyclicPoisson {
    groups: 4,
    sampling_rate: 0.5,
};

/// The groups partition the records, each record's group uniform and independent
/// (4,000 records: every group within 6 σ of 1,000); step t draws only from group t mod
/// b, each of its records with probability q: over 4,000 steps every record of 40 is drawn
/// in ≈ q·1000 of its group's 1000 steps (6-σ bands).
#[test]
fn a_cyclic_sampler_draws_each_group_in_turn_at_its_rate() {
    let mut noise = NoiseSource::seeded(3);
    let mut state = ShuffleState::default();
    state.draw_groups(4000, 4, &mut noise);
    let mut all: Vec<usize> = state.groups.iter().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..4000).collect::<Vec<_>>());
    let sd = (4000.0f64 * 0.25 * 0.75).sqrt();
    assert!(
        state
            .groups
            .iter()
            .all(|g| (g.len() as f64 - 1000.0).abs() < 6.0 * sd),
        "{:?}",
        state.groups.iter().map(Vec::len).collect::<Vec<_>>()
    );

    let (n, b) = (40usize, 4u64);
    let mut state = ShuffleState::default();
    let mut hits = vec![0u32; n];
    let mut batch = Vec::new();
    for step in 0..4000u64 {
        CYCLIC.draw(n, step, &mut noise, &mut state, &mut batch);
        assert!(batch.windows(2).all(|w| w[0] < w[1]), "{batch:?}");
        let group = &state.groups[(step % b) as usize];
        assert!(batch.iter().all(|i| group.contains(i)));
        batch.iter().for_each(|&i| hits[i] += 1);
    }
    let (mean, sd) = (500.0, (1000.0f64 * 0.25).sqrt());
    assert!(
        hits.iter().all(|&h| (f64::from(h) - mean).abs() < 6.0 * sd),
        "{hits:?}"
    );
    assert_eq!(CYCLIC.expected_batch_size(40), 5.0);
    assert_eq!(CYCLIC.steps_per_epoch(40), 8);
}

/// A truncated draw keeps at most B records, a uniform subset of the Poisson draw: with
/// q = 0.5 on 200 records and B = 50 (almost every draw cut), every record is kept about
/// equally often (≈ 50/200 of the steps); a cap the draw never reaches changes nothing
/// (the same stream gives the plain Poisson batch).
#[test]
fn a_truncated_sampler_keeps_a_uniform_subset_of_at_most_the_cap() {
    let truncated = Sampler::TruncatedPoisson {
        sampling_rate: 0.5,
        max_batch_size: 50,
    };
    let mut noise = NoiseSource::seeded(5);
    let mut hits = vec![0u32; 200];
    let mut batch = Vec::new();
    for _ in 0..4000 {
        truncated.draw(200, 0, &mut noise, &mut Default::default(), &mut batch);
        assert!(batch.len() <= 50);
        assert!(batch.windows(2).all(|w| w[0] < w[1]));
        batch.iter().for_each(|&i| hits[i] += 1);
    }
    let mean = f64::from(hits.iter().sum::<u32>()) / 200.0;
    assert!((mean - 1000.0).abs() < 5.0, "mean {mean}");
    assert!(
        hits.iter()
            .all(|&h| (f64::from(h) - mean).abs() < 6.0 * (mean * 0.75).sqrt()),
        "{hits:?}"
    );
    let wide = Sampler::TruncatedPoisson {
        sampling_rate: 0.01,
        max_batch_size: 10_000,
    };
    let plain = Sampler::Poisson {
        sampling_rate: 0.01,
    };
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (mut na, mut nb) = (NoiseSource::seeded(7), NoiseSource::seeded(7));
    for _ in 0..50 {
        wide.draw(10_000, 0, &mut na, &mut Default::default(), &mut a);
        plain.draw(10_000, 0, &mut nb, &mut Default::default(), &mut b);
        assert_eq!(a, b);
    }
}

fn cyclic(seed: u64, sigma: f64, data: &dp_models::data::Dataset) -> PrivacyEngine {
    let mut privacy = private(None);
    privacy.noise_multiplier = sigma;
    engine(seed, CYCLIC, Some(privacy), data).expect("engine")
}

/// Ten steps over 4 groups are 3 charges of `PoissonSampled(q, Gaussian(σ))`, at steps
/// 0, 4 and 8, and ε is that of the 3-fold composition.
#[test]
fn a_cyclic_run_charges_once_per_cycle() -> dp_optim::Result<()> {
    let data = toy_data(120, &mut NoiseSource::seeded(11));
    let mut e = cyclic(12, 1.5, &data);
    let mut counts = Vec::new();
    for _ in 0..10 {
        e.step(&data)?;
        counts.push(charges(&e));
    }
    assert_eq!(counts, vec![1, 1, 1, 1, 2, 2, 2, 2, 3, 3]);
    let step = DpEvent::poisson_sampled(0.5, DpEvent::gaussian(1.5));
    assert!(e
        .ledger()
        .expect("private")
        .entries
        .iter()
        .all(|entry| entry.event == step));
    let mut expected = dp_accounting::AccountantKind::Rdp.build(
        dp_accounting::NeighbouringRelation::AddOrRemoveOne,
        &dp_accounting::OrderGrid::Opacus,
    )?;
    expected.compose(&step, 3)?;
    assert_eq!(e.epsilon()?, Some(expected.epsilon(1e-5)?));
    Ok(())
}

/// σ changes only where a cycle begins, by a schedule or by a resume; at a boundary the
/// next cycle is charged at the new σ.
#[test]
fn sigma_changes_only_between_cycles() -> dp_optim::Result<()> {
    let data = toy_data(120, &mut NoiseSource::seeded(13));
    let mut e = cyclic(14, 2.0, &data);
    e.step(&data)?;
    assert!(matches!(
        e.set_noise_multiplier(0.5),
        Err(Error::EpochBoundary {
            step: 1,
            epoch_start: 0,
            next_boundary: 4,
            ..
        })
    ));
    let mid: Checkpoint = e.checkpoint()?;
    let mut resumed = cyclic(14, 0.5, &data);
    assert!(matches!(
        resumed.restore_allowing(&mid, &[RunField::NoiseMultiplier]),
        Err(Error::EpochBoundary { step: 1, .. })
    ));
    for _ in 1..4 {
        e.step(&data)?;
    }
    e.set_noise_multiplier(0.5)?;
    e.step(&data)?;
    let entries = &e.ledger().expect("private").entries;
    assert_eq!(entries.len(), 2);
    assert_eq!(
        entries[1].event,
        DpEvent::poisson_sampled(0.5, DpEvent::gaussian(0.5))
    );
    Ok(())
}

/// A production checkpoint of a cyclic run does not hold its groups: the resume draws
/// new ones and starts a new cycle at its step, charged there, even mid-cycle (two
/// steps into a 4-step cycle: 1 charge before, 1 at the resume, 1 more 4 steps later).
#[test]
fn a_production_resume_of_a_cyclic_run_starts_a_new_cycle() -> dp_optim::Result<()> {
    let data = toy_data(120, &mut NoiseSource::seeded(17));
    let production = || {
        let model = dp_models::models::mlp(
            8,
            &[16],
            2,
            dp_models::models::Activation::Tanh,
            &mut NoiseSource::seeded(18),
        )?;
        let config = super::engine(18, CYCLIC, Some(private(None)), &data)?
            .config()
            .clone();
        PrivacyEngine::new(model, config, data.len(), NoiseSource::os_seeded()?)
    };
    let mut first = production()?;
    first.step(&data)?;
    first.step(&data)?;
    let saved = first.checkpoint()?;
    let mut resumed = production()?;
    resumed.restore(&saved)?;
    assert_eq!(charges(&resumed), 1);
    let mut counts = Vec::new();
    for _ in 0..5 {
        resumed.step(&data)?;
        counts.push(charges(&resumed));
    }
    assert_eq!(counts, vec![2, 2, 2, 2, 3]);
    Ok(())
}

/// Each step under truncated Poisson sampling charges the truncated Gaussian's event on
/// the dataset with a record added; a joint step, whose composed event has no truncated
/// analysis, is refused before anything is drawn.
#[test]
fn a_truncated_run_charges_the_truncated_gaussian_and_refuses_joint_steps() -> dp_optim::Result<()>
{
    let data = toy_data(120, &mut NoiseSource::seeded(15));
    let sampler = Sampler::TruncatedPoisson {
        sampling_rate: 0.2,
        max_batch_size: 20,
    };
    let mut e = engine(16, sampler, Some(private(None)), &data)?;
    let (_, batch) = e.step_with_batch(&data)?;
    assert!(batch.len() <= 20);
    let scheme = SamplingScheme::TruncatedPoisson {
        dataset_size: 120,
        sampling_rate: 0.2,
        max_batch_size: 20,
    };
    assert_eq!(sampler.scheme(120), scheme);
    let entries = &e.ledger().expect("private").entries;
    assert_eq!(
        entries[0].event,
        DpEvent::TruncatedPoissonGaussian {
            dataset_size: 121,
            sampling_rate: 0.2,
            max_batch_size: 20,
            noise_multiplier: 1.0,
        }
    );
    let joint = e.begin_step_with(&data, DpEvent::gaussian(3.0));
    assert!(
        matches!(joint, Err(Error::Accounting(_))),
        "{:?}",
        joint.err()
    );
    assert_eq!(e.ledger().expect("private").entries.len(), 1);
    Ok(())
}
