//! The one training loop: epochs, the budget stop, checkpoints written before the
//! observer sees an epoch, observer stops, and an algorithm that never steps.

use dp_mechanisms::NoiseSource;
use dp_models::data::Dataset;
use dp_models::models::Network;
use dp_optim::{
    Algorithm, CheckpointDir, Control, DpSgd, EpochSummary, Error, Observer, PrivacyEngine,
    Sampler, StepReport, Trainer,
};

use super::{engine, private, toy_data};

/// Records what it saw; stops after `stop_after` steps if set.
#[derive(Default)]
struct Recorder<'a> {
    dir: Option<&'a CheckpointDir>,
    epochs: Vec<EpochSummary>,
    steps_seen: u64,
    stop_after: Option<u64>,
}

impl Observer<Network, DpSgd> for Recorder<'_> {
    fn step_done(
        &mut self,
        _: &PrivacyEngine,
        _: &DpSgd,
        _: &StepReport,
    ) -> dp_optim::Result<Control> {
        self.steps_seen += 1;
        Ok(match self.stop_after {
            Some(n) if self.steps_seen >= n => Control::Stop,
            _ => Control::Continue,
        })
    }

    fn epoch_done(
        &mut self,
        engine: &PrivacyEngine,
        _: &DpSgd,
        epoch: &EpochSummary,
    ) -> dp_optim::Result<Control> {
        if let Some(dir) = self.dir {
            // The epoch's checkpoint is on disk before anything of the epoch is shown.
            let saved = dir.load()?.expect("a checkpoint");
            assert_eq!(saved.steps, engine.steps());
        }
        self.epochs.push(*epoch);
        Ok(Control::Continue)
    }
}

#[test]
fn the_trainer_runs_whole_epochs_and_checkpoints_before_showing_them() -> dp_optim::Result<()> {
    let mut noise = NoiseSource::seeded(3);
    let data = toy_data(200, &mut noise);
    let mut e = engine(
        4,
        Sampler::Poisson { sampling_rate: 0.1 },
        Some(private(None)),
        &data,
    )?;
    let scratch = std::env::temp_dir().join(format!("dp-trainer-{}", std::process::id()));
    let dir = CheckpointDir::open(&scratch)?;
    let mut recorder = Recorder {
        dir: Some(&dir),
        ..Recorder::default()
    };
    let trainer = Trainer {
        total_steps: 25,
        steps_per_epoch: 10,
        checkpoints: Some(&dir),
        schedule: None,
    };
    let outcome = trainer.fit(&mut e, &mut DpSgd, &data, &mut recorder)?;
    assert_eq!(outcome.steps, 25);
    assert!(!outcome.stopped_by_budget && !outcome.stopped_by_observer);
    let ends: Vec<u64> = recorder.epochs.iter().map(|s| s.steps).collect();
    assert_eq!(ends, vec![10, 20, 25]);
    assert_eq!(recorder.steps_seen, 25);
    drop(dir);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

#[test]
fn the_budget_and_the_observer_stop_the_trainer() -> dp_optim::Result<()> {
    let mut noise = NoiseSource::seeded(5);
    let data = toy_data(200, &mut noise);
    let trainer = Trainer {
        total_steps: u64::MAX,
        steps_per_epoch: 10,
        checkpoints: None,
        schedule: None,
    };
    // The budget: the run stops before ε would pass 5.
    let mut e = engine(
        6,
        Sampler::Poisson { sampling_rate: 0.1 },
        Some(private(Some(5.0))),
        &data,
    )?;
    let outcome = trainer.fit(&mut e, &mut DpSgd, &data, &mut ())?;
    assert!(outcome.stopped_by_budget);
    assert!(e.epsilon()?.expect("private") <= 5.0);
    let planned = e.max_steps().expect("a budget");
    assert!(
        outcome.steps > 0 && outcome.steps.abs_diff(planned) <= 1,
        "{} vs {planned}",
        outcome.steps
    );
    // The observer: stop after 13 steps, mid-epoch; the epoch is still reported.
    let mut e = engine(
        6,
        Sampler::Poisson { sampling_rate: 0.1 },
        Some(private(None)),
        &data,
    )?;
    let mut recorder = Recorder {
        stop_after: Some(13),
        ..Recorder::default()
    };
    let outcome = trainer.fit(&mut e, &mut DpSgd, &data, &mut recorder)?;
    assert!(outcome.stopped_by_observer);
    assert_eq!(outcome.steps, 13);
    assert_eq!(recorder.epochs.last().map(|s| s.epoch_steps), Some(3));
    Ok(())
}

/// An algorithm that never takes an engine step would loop for ever: refused.
struct Idle;

impl Algorithm for Idle {
    fn step(&mut self, _: &mut PrivacyEngine, _: &Dataset) -> dp_optim::Result<StepReport> {
        Ok(StepReport {
            batch_size: 0,
            mean_loss: f64::NAN,
            nonfinite_gradients: 0,
        })
    }
}

#[test]
fn an_algorithm_that_takes_no_step_is_an_error() -> dp_optim::Result<()> {
    let mut noise = NoiseSource::seeded(7);
    let data = toy_data(100, &mut noise);
    let mut e = engine(8, Sampler::Poisson { sampling_rate: 0.1 }, None, &data)?;
    let trainer = Trainer {
        total_steps: 10,
        steps_per_epoch: 5,
        checkpoints: None,
        schedule: None,
    };
    let result = trainer.fit(&mut e, &mut Idle, &data, &mut ());
    assert!(matches!(result, Err(Error::StepNotTaken)));
    Ok(())
}
