//! Data-parallel steps over in-process ranks: the single process's batches, noise, ledger
//! and θ (within summation order), identical on every rank; a rank that leaves ends the
//! others' step before anything is released.

use dp_mechanisms::NoiseSource;
use dp_optim::collective::{Collective, ThreadGroup};
use dp_optim::{Checkpoint, Error, Sampler};

use super::{engine, private, toy_data};

const SEED: u64 = 7;
const STEPS: usize = 6;

/// The tests' sampler.
const POISSON: Sampler = Sampler::Poisson {
    sampling_rate: 0.05,
};

/// θ, ε and the step count after `STEPS` steps of one process.
fn single_process() -> (Vec<f32>, f64, u64) {
    let data = toy_data(400, &mut NoiseSource::seeded(3));
    let mut e = engine(SEED, POISSON, Some(private(None)), &data).expect("engine");
    for _ in 0..STEPS {
        e.step(&data).expect("step");
    }
    let theta = dp_models::PrivateModel::parameters(e.model()).expect("θ");
    (theta, e.epsilon().expect("ε").expect("private"), e.steps())
}

/// Each rank of a group of `world` runs `steps` data-parallel steps (stopping early on an
/// error); θ, ε, steps and the first error, by rank.
fn ranks(world: usize, steps: impl Fn(usize) -> usize + Copy + Send + 'static) -> Vec<RankRun> {
    resumed_ranks(world, None, POISSON, steps)
}

/// [`ranks`], each rank's engine created with the seed `seed(rank)` (its θ initialised and
/// its noise drawn from it).
fn seeded_ranks(world: usize, seed: impl Fn(usize) -> u64 + Copy + Send + 'static) -> Vec<RankRun> {
    group_run(world, None, POISSON, seed, |_| STEPS)
}

/// [`ranks`] with `sampler`, rank 0 first resuming from `from` (the others start from
/// rank 0's state when they join).
fn resumed_ranks(
    world: usize,
    from: Option<Checkpoint>,
    sampler: Sampler,
    steps: impl Fn(usize) -> usize + Copy + Send + 'static,
) -> Vec<RankRun> {
    group_run(world, from, sampler, |_| SEED, steps)
}

/// The ranks of a group of `world`, each with an engine of seed `seed(rank)`, rank 0
/// restored from `from`, running `steps(rank)` data-parallel steps.
fn group_run(
    world: usize,
    from: Option<Checkpoint>,
    sampler: Sampler,
    seed: impl Fn(usize) -> u64 + Copy + Send + 'static,
    steps: impl Fn(usize) -> usize + Copy + Send + 'static,
) -> Vec<RankRun> {
    let handles: Vec<_> = ThreadGroup::ranks(world)
        .expect("group")
        .into_iter()
        .map(|mut group| {
            let from = from.clone().filter(|_| group.rank() == 0);
            std::thread::spawn(move || {
                let data = toy_data(400, &mut NoiseSource::seeded(3));
                let rank_seed = seed(group.rank());
                let mut e = engine(rank_seed, sampler, Some(private(None)), &data).expect("engine");
                if let Some(checkpoint) = &from {
                    e.restore(checkpoint).expect("restore");
                }
                let mut error = None;
                for _ in 0..steps(group.rank()) {
                    if let Err(err) = e.step_distributed(&data, &mut group) {
                        error = Some(err);
                        break;
                    }
                }
                RankRun {
                    theta: dp_models::PrivateModel::parameters(e.model()).expect("θ"),
                    epsilon: e.epsilon().expect("ε").expect("private"),
                    steps: e.steps(),
                    error,
                    checkpoint: e.checkpoint(),
                }
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("rank"))
        .collect()
}

struct RankRun {
    theta: Vec<f32>,
    epsilon: f64,
    steps: u64,
    error: Option<Error>,
    /// Rank 0's checkpoint, or the other ranks' refusal.
    checkpoint: dp_optim::Result<Checkpoint>,
}

/// Every run of `runs` ended without error at the single process's steps and ε, with θ
/// within 1e-5 of its largest entry and identical on every rank.
fn assert_single_process_run(runs: &[RankRun], single: &(Vec<f32>, f64, u64), what: &str) {
    let (theta, epsilon, steps) = single;
    let scale = theta.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    for (rank, run) in runs.iter().enumerate() {
        assert!(run.error.is_none(), "{what} rank {rank}: {:?}", run.error);
        assert_eq!(
            (run.steps, run.epsilon),
            (*steps, *epsilon),
            "{what} rank {rank}"
        );
        let worst = run
            .theta
            .iter()
            .zip(theta)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            worst <= 1e-5 * scale,
            "{what} rank {rank}: θ off by {worst}"
        );
        let bits = |t: &[f32]| t.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&run.theta),
            bits(&runs[0].theta),
            "{what}: identical on every rank"
        );
    }
}

#[test]
fn ranks_reproduce_the_single_process_run() {
    let single = single_process();
    for world in [1, 2, 3] {
        assert_single_process_run(&ranks(world, |_| STEPS), &single, &format!("world {world}"));
    }
}

/// Ranks initialised from different seeds (as OS-seeded ranks are) start from rank 0's θ:
/// the single process's run with rank 0's seed, identical on every rank.
#[test]
fn ranks_start_from_rank_0s_state() {
    let runs = seeded_ranks(3, |rank| if rank == 0 { SEED } else { 1000 + rank as u64 });
    assert_single_process_run(&runs, &single_process(), "seeds per rank");
}

/// A run checkpointed by rank 0 of two ranks resumes on three, on two and on one rank,
/// every rank from rank 0's checkpoint as broadcast, to the uninterrupted run: the same
/// steps and ε, θ within 1e-5 of its largest entry, identical on every rank.
#[test]
fn rank_0s_checkpoint_resumes_with_any_number_of_ranks() {
    let single = single_process();
    let first = ranks(2, |_| STEPS / 2);
    let saved = first[0]
        .checkpoint
        .as_ref()
        .expect("rank 0's checkpoint")
        .clone();
    assert_eq!(saved.steps, (STEPS / 2) as u64);
    // A follower's state is not the run's: its checkpoint is refused.
    assert!(matches!(
        first[1].checkpoint,
        Err(Error::InvalidSetting {
            name: "checkpoint",
            ..
        })
    ));
    for world in [3, 2, 1] {
        let runs = resumed_ranks(world, Some(saved.clone()), POISSON, |_| STEPS - STEPS / 2);
        assert_single_process_run(&runs, &single, &format!("resumed, world {world}"));
    }
}

#[test]
fn a_rank_that_leaves_ends_the_others_step_before_its_release() {
    let runs = ranks(3, |rank| if rank == 2 { 2 } else { STEPS });
    assert!(runs[2].error.is_none() && runs[2].steps == 2);
    for run in &runs[..2] {
        assert!(
            matches!(&run.error, Some(Error::Collective { reason, .. }) if reason.contains("rank 2 left")),
            "{:?}",
            run.error
        );
        // The failed step released nothing: the ledger holds the two completed steps.
        assert_eq!(run.steps, 2);
    }
}

/// A shuffled run (its epoch charged once, rank 0's permutation) on 2 and 3 ranks, over
/// an epoch boundary and resumed mid-epoch on another number of ranks: the single
/// process's steps, ε and θ.
#[test]
fn a_shuffled_run_on_ranks_is_the_single_process_run() {
    const TOTAL: usize = 15;
    // 400 records in batches of 40: 10 steps an epoch; 15 steps cross a boundary.
    let sampler = Sampler::Shuffle { batch_size: 40 };
    let data = toy_data(400, &mut NoiseSource::seeded(3));
    let mut one = engine(SEED, sampler, Some(private(None)), &data).expect("engine");
    for _ in 0..TOTAL {
        one.step(&data).expect("step");
    }
    let single = (
        dp_models::PrivateModel::parameters(one.model()).expect("θ"),
        one.epsilon().expect("ε").expect("private"),
        TOTAL as u64,
    );
    let first = resumed_ranks(2, None, sampler, |_| 13);
    let saved = first[0]
        .checkpoint
        .as_ref()
        .expect("rank 0's checkpoint")
        .clone();
    for world in [2, 3] {
        let whole = resumed_ranks(world, None, sampler, |_| TOTAL);
        assert_single_process_run(&whole, &single, &format!("shuffled, world {world}"));
        let resumed = resumed_ranks(world, Some(saved.clone()), sampler, |_| TOTAL - 13);
        assert_single_process_run(
            &resumed,
            &single,
            &format!("shuffled, resumed, world {world}"),
        );
    }
}
