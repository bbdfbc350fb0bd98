//! The shuffled sampler's epoch rule under every path: σ changes only at an epoch
//! boundary (a schedule, a resume), and a step that fails after its draw leaves the
//! permutation where it was, so each charged epoch uses every record once.

use dp_mechanisms::NoiseSource;
use dp_optim::{Checkpoint, Error, PrivacyEngine, RunField, Sampler};

use super::{charges, engine, private, toy_data};

const SHUFFLE: Sampler = Sampler::Shuffle { batch_size: 40 };

fn shuffled(seed: u64, sigma: f64, data: &dp_models::data::Dataset) -> PrivacyEngine {
    let mut privacy = private(None);
    privacy.noise_multiplier = sigma;
    engine(seed, SHUFFLE, Some(privacy), data).expect("engine")
}

fn checkpoint_after(steps: usize, data: &dp_models::data::Dataset) -> Checkpoint {
    let mut e = shuffled(61, 2.0, data);
    for _ in 0..steps {
        e.step(data).expect("step");
    }
    e.checkpoint().expect("checkpoint")
}

/// The audit's scenario as a library test: 120 records, B 40 (3 steps an epoch), σ 2 for
/// 4 steps (a fractional epoch), then a resume asking for σ 0.5. Before the fix the
/// resume took it and ran steps 4 and 5 at σ 0.5 under the epoch's σ 2 charge.
#[test]
fn a_resume_inside_a_shuffled_epoch_refuses_a_new_sigma() {
    let data = toy_data(120, &mut NoiseSource::seeded(60));
    let mid = checkpoint_after(4, &data);
    let mut resumed = shuffled(61, 0.5, &data);
    let refused = resumed.restore_allowing(&mid, &[RunField::NoiseMultiplier]);
    match refused {
        Err(Error::EpochBoundary {
            step: 4,
            epoch_start: 3,
            next_boundary: 6,
            charged,
            requested,
            ..
        }) => assert_eq!((charged, requested), (2.0, 0.5)),
        other => panic!("expected EpochBoundary, got {other:?}"),
    }
    // Resumed at the epoch's own σ it finishes the epoch; σ may change at the boundary.
    let mut same = shuffled(61, 2.0, &data);
    same.restore(&mid).expect("same sigma");
    same.step(&data).expect("step 4");
    same.step(&data).expect("step 5");
    same.set_noise_multiplier(0.5).expect("at the boundary");
    same.step(&data).expect("step 6, charged at 0.5");
    let last = same.ledger().expect("private").entries.last().cloned();
    assert_eq!(
        last.map(|e| e.event),
        Some(dp_accounting::DpEvent::gaussian(0.25)),
        "the new epoch is charged at its own sigma (sigma/2 under replace-one)"
    );
}

/// At a boundary the new σ is taken and the next epoch is charged at it.
#[test]
fn a_resume_at_a_shuffled_epoch_boundary_charges_the_new_sigma() -> dp_optim::Result<()> {
    let data = toy_data(120, &mut NoiseSource::seeded(63));
    let boundary = checkpoint_after(3, &data);
    let mut resumed = shuffled(61, 0.5, &data);
    resumed.restore_allowing(&boundary, &[RunField::NoiseMultiplier])?;
    resumed.step(&data)?;
    let events: Vec<_> = resumed.ledger().expect("private").entries.clone();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[1].event, dp_accounting::DpEvent::gaussian(0.25));
    Ok(())
}

/// A schedule's σ change inside an epoch is refused with the same typed error.
#[test]
fn a_sigma_change_inside_a_shuffled_epoch_is_refused() -> dp_optim::Result<()> {
    let data = toy_data(120, &mut NoiseSource::seeded(65));
    let mut e = shuffled(66, 2.0, &data);
    e.step(&data)?;
    assert!(matches!(
        e.set_noise_multiplier(0.5),
        Err(Error::EpochBoundary { step: 1, .. })
    ));
    e.set_noise_multiplier(2.0)?; // the same σ is no change
    Ok(())
}

/// Steps abandoned after their draw (a failed step) do not move the permutation: every
/// charged epoch still uses each record exactly once, and the epochs charged are
/// ⌈steps / 3⌉.
#[test]
fn a_failed_step_after_its_draw_leaves_the_shuffle_where_it_was() -> dp_optim::Result<()> {
    let data = toy_data(120, &mut NoiseSource::seeded(67));
    let mut e = shuffled(68, 1.0, &data);
    let mut epochs: Vec<Vec<u32>> = Vec::new();
    for step in 0..9u64 {
        if step % 2 == 0 {
            let mut failed = e.begin_step(&data)?;
            let drawn = e.draw_batch(&mut failed)?;
            assert_eq!(drawn.len(), 40);
            drop(failed); // the step fails here: nothing released, nothing charged
        }
        let (_, batch) = e.step_with_batch(&data)?;
        if step % 3 == 0 {
            epochs.push(vec![0; 120]);
        }
        let seen = epochs.last_mut().expect("an epoch");
        batch.indices().iter().for_each(|&i| seen[i] += 1);
    }
    for (k, seen) in epochs.iter().enumerate() {
        assert!(seen.iter().all(|&c| c == 1), "epoch {k}: {seen:?}");
    }
    let charged = charges(&e);
    assert_eq!(charged, 3);
    Ok(())
}
