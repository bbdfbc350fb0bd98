//! The guarantee around the DP step: what a checkpoint holds, what a resume may change,
//! a budget enforced on the ledger (across resumes and extra charges), charges made
//! before release, and the fail-closed checks on the model and the data.

use std::path::PathBuf;

use dp_accounting::{AccountantKind, DpEvent};
use dp_mechanisms::NoiseSource;
use dp_models::data::Dataset;
use dp_models::models::Network;
use dp_models::models::{mlp, Activation};
use dp_models::ClipRule;
use dp_models::{ClippedGradient, PrivateModel};
use dp_optim::annealing::{AnnealingConfig, AnnealingState, EnergySource};
use dp_optim::{
    Checkpoint, CheckpointDir, Error, GradientNormalisation, Optimizer, PrivacyConfig,
    PrivacyEngine, RunField, Sampler, TrainConfig,
};

use super::{engine_with, private, toy_data};

const POISSON: Sampler = Sampler::Poisson {
    sampling_rate: 0.05,
};

fn config(privacy: Option<PrivacyConfig>) -> TrainConfig {
    TrainConfig {
        sampler: POISSON,
        privacy,
        optimizer: Optimizer::Sgd {
            lr: 0.5,
            momentum: 0.9,
        },
        normalisation: GradientNormalisation::ExpectedBatchSize,
    }
}

fn data() -> Dataset {
    toy_data(500, &mut NoiseSource::seeded(70))
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("dp-optim-{name}-{}", std::process::id()))
}

fn trained(
    noise: NoiseSource,
    config: TrainConfig,
    steps: usize,
) -> dp_optim::Result<PrivacyEngine> {
    let data = data();
    let mut e = engine_with(noise, config, &data)?;
    for _ in 0..steps {
        e.step(&data)?;
    }
    Ok(e)
}

fn field_of(result: dp_optim::Result<()>) -> &'static str {
    match result {
        Err(Error::ResumeMismatch { field, .. }) => field,
        other => panic!("expected a refused resume, got {other:?}"),
    }
}

/// An OS-seeded run's checkpoint holds no noise key (a seeded one does), the file is
/// mode 0600, and a resumed OS-seeded run keeps its ledger with fresh entropy. A seeded
/// checkpoint is not silently resumed with OS noise, nor the reverse.
#[test]
fn checkpoints_hold_no_noise_key_in_production_and_are_owner_only() -> dp_optim::Result<()> {
    let path = temp("key.json");
    let os = trained(NoiseSource::os_seeded()?, config(Some(private(None))), 3)?;
    os.save_checkpoint(&path)?;
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
    assert!(json["noise"].is_null(), "no key in an OS-seeded checkpoint");
    assert!(!String::from_utf8_lossy(&std::fs::read(&path).expect("read")).contains("\"key\""));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "checkpoints are owner-only");
    }
    let data = data();
    let mut resumed = engine_with(
        NoiseSource::os_seeded()?,
        config(Some(private(None))),
        &data,
    )?;
    resumed.restore(&Checkpoint::load(&path)?)?;
    assert_eq!((resumed.steps(), resumed.epsilon()?), (3, os.epsilon()?));
    resumed.step(&data)?;
    assert_eq!(resumed.ledger().expect("private").entries[0].count, 4);

    let seeded = trained(NoiseSource::seeded(3), config(Some(private(None))), 3)?;
    let checkpoint = seeded.checkpoint()?;
    assert!(
        checkpoint.noise.is_some(),
        "a --seed run keeps its stream for bit-exact resume"
    );
    let mut os_resume = engine_with(
        NoiseSource::os_seeded()?,
        config(Some(private(None))),
        &data,
    )?;
    assert_eq!(field_of(os_resume.restore(&checkpoint)), "seed");
    let mut seeded_resume =
        engine_with(NoiseSource::seeded(3), config(Some(private(None))), &data)?;
    assert_eq!(field_of(seeded_resume.restore(&os.checkpoint()?)), "seed");
    let _ = std::fs::remove_file(path);
    Ok(())
}

/// Non-private weights are never resumed into a private run (their true ε is ∞), a
/// private run is never resumed without DP (dropping its ledger), and every other change
/// is refused by name unless it is asked for and keeps the accounting valid.
#[test]
fn a_resume_refuses_a_changed_run_and_names_the_setting() -> dp_optim::Result<()> {
    let data = data();
    let noise = || NoiseSource::seeded(11);
    let saved = trained(noise(), config(Some(private(None))), 2)?.checkpoint()?;
    let plain = trained(noise(), config(None), 2)?.checkpoint()?;
    let refused =
        |config: TrainConfig, checkpoint: &Checkpoint| -> dp_optim::Result<&'static str> {
            Ok(field_of(
                engine_with(noise(), config, &data)?.restore(checkpoint),
            ))
        };
    assert_eq!(refused(config(Some(private(None))), &plain)?, "dp");
    assert_eq!(refused(config(None), &saved)?, "dp");
    let sigma = PrivacyConfig {
        noise_multiplier: 2.0,
        ..private(None)
    };
    assert_eq!(
        refused(config(Some(sigma.clone())), &saved)?,
        "noise-multiplier"
    );
    let adam = TrainConfig {
        optimizer: Optimizer::Adam {
            lr: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        },
        ..config(Some(private(None)))
    };
    assert_eq!(refused(adam, &saved)?, "optimizer");
    let batch = TrainConfig {
        sampler: Sampler::Poisson { sampling_rate: 0.1 },
        ..config(Some(private(None)))
    };
    assert_eq!(refused(batch, &saved)?, "sampling");
    let mut other_model = {
        let mut n = noise();
        let model = mlp(8, &[32], 2, Activation::Tanh, &mut n)?;
        PrivacyEngine::new(model, config(Some(private(None))), data.len(), n)?
    };
    assert_eq!(field_of(other_model.restore(&saved)), "model");

    // Asked for, σ may change: the ledger records each step's own σ.
    let mut new_sigma = engine_with(noise(), config(Some(sigma)), &data)?;
    new_sigma.restore_allowing(&saved, &[RunField::NoiseMultiplier])?;
    assert_eq!(new_sigma.steps(), 2);
    // The optimizer never may, even when asked.
    let mut adam = engine_with(noise(), config(Some(private(None))), &data)?;
    let mut wrong = saved.clone();
    wrong
        .fingerprint
        .0
        .insert(RunField::Optimizer, "adam".into());
    assert_eq!(
        field_of(adam.restore_allowing(&wrong, &[RunField::Optimizer])),
        "optimizer"
    );
    // A checkpoint whose moments do not fit is an error, not a partial update.
    let mut short = saved.clone();
    short.moments[0].truncate(10);
    assert!(matches!(
        engine_with(noise(), config(Some(private(None))), &data)?.restore(&short),
        Err(Error::Checkpoint { .. })
    ));

    // Other data of the same size: refused at the first step, before any charge.
    let mut resumed = engine_with(noise(), config(Some(private(None))), &data)?;
    resumed.restore(&saved)?;
    let other = toy_data(500, &mut NoiseSource::seeded(71));
    assert_eq!(field_of(resumed.step(&other).map(|_| ())), "dataset");
    assert_eq!(resumed.ledger().expect("private").entries[0].count, 2);
    resumed.step(&data)?;
    Ok(())
}

/// A budget at σ = 1, resumed at σ = 3: the budget is enforced on the replayed ledger,
/// so the resumed steps stop before ε passes it (the step limit computed once from step
/// 0 let `dp train --target-epsilon 1.5` reach 1.547 this way).
#[test]
fn the_budget_holds_across_a_resume_with_a_new_sigma() -> dp_optim::Result<()> {
    let data = data();
    let budgeted = |sigma: f64| {
        config(Some(PrivacyConfig {
            noise_multiplier: sigma,
            ..private(Some(3.0))
        }))
    };
    let mut first = engine_with(NoiseSource::seeded(5), budgeted(1.0), &data)?;
    loop {
        match first.step(&data) {
            Ok(_) => {}
            Err(Error::BudgetExceeded { epsilon, .. }) => {
                eprintln!(
                    "stopped at step {} (epsilon would be {epsilon})",
                    first.steps()
                );
                break;
            }
            Err(other) => return Err(other),
        }
    }
    let spent = first.epsilon()?.expect("private");
    assert!(spent <= 3.0 && spent > 2.9, "{spent}");
    let mut resumed = engine_with(NoiseSource::seeded(5), budgeted(3.0), &data)?;
    resumed.restore_allowing(&first.checkpoint()?, &[RunField::NoiseMultiplier])?;
    let mut extra = 0;
    loop {
        match resumed.step(&data) {
            Ok(_) => extra += 1,
            Err(Error::BudgetExceeded {
                epsilon,
                budget_epsilon,
                ..
            }) => {
                assert!(epsilon > budget_epsilon && epsilon.is_finite(), "{epsilon}");
                break;
            }
            Err(e) => return Err(e),
        }
        assert!(resumed.epsilon()?.expect("private") <= 3.0);
        assert!(extra < 100_000, "the budget never stopped the run");
    }
    assert!(extra > 0, "σ = 3 steps are cheap enough to fit a few");
    assert!(resumed.epsilon()?.expect("private") <= 3.0);
    Ok(())
}

/// SA-DPSGD's privatised acceptance tests are charges like any other: under a budget the
/// run stops with ε within it (they were charged outside the step limit before).
#[test]
fn extra_charges_count_against_the_budget() -> dp_optim::Result<()> {
    let data = data();
    let mut e = engine_with(
        NoiseSource::seeded(8),
        config(Some(private(Some(2.0)))),
        &data,
    )?;
    let planned = e.max_steps().expect("budget");
    let annealing = AnnealingConfig {
        energy: EnergySource::Privatised {
            sampling_rate: 0.05,
            clip: 1.0,
            noise_multiplier: 1.0,
        },
        ..AnnealingConfig::default()
    };
    let mut state = AnnealingState::default();
    let stopped = loop {
        match crate::anneal(&mut e, &data, &annealing, &mut state) {
            Ok(_) => assert!(e.epsilon()?.expect("private") <= 2.0),
            Err(Error::BudgetExceeded { .. }) => break e.steps(),
            Err(other) => return Err(other),
        }
    };
    assert!(e.epsilon()?.expect("private") <= 2.0);
    assert!(
        stopped < planned,
        "the tests' charges used part of the budget: {stopped} vs {planned}"
    );
    // A refused extra charge leaves no trace.
    let before = e.epsilon()?;
    assert!(matches!(
        e.charge(&DpEvent::gaussian(0.01)),
        Err(Error::BudgetExceeded { .. })
    ));
    assert_eq!(e.epsilon()?, before);
    Ok(())
}

/// A step whose charge the accountant cannot compose changes nothing: neither θ nor the
/// step count nor the ledger (the update used to be applied before the charge). Here PLD
/// refuses σ = 0.008, whose privacy loss spans more grid points than its limit.
#[test]
fn a_failing_charge_releases_nothing() -> dp_optim::Result<()> {
    let data = data();
    let pld = PrivacyConfig {
        accountant: AccountantKind::Pld,
        ..private(None)
    };
    let mut e = engine_with(NoiseSource::seeded(9), config(Some(pld)), &data)?;
    e.step(&data)?;
    e.set_noise_multiplier(0.008)?;
    let theta = e.model().parameters()?;
    let (steps, ledger) = (e.steps(), e.ledger().cloned());
    assert!(matches!(e.step(&data), Err(Error::Accounting(_))));
    assert_eq!(e.model().parameters()?, theta, "no uncharged update");
    assert_eq!((e.steps(), e.ledger().cloned()), (steps, ledger));
    Ok(())
}

/// A model whose clipped sum misses a parameter is refused before anything is charged.
struct Short(Network);

impl PrivateModel for Short {
    type Data = dp_models::data::Dataset;

    fn num_params(&self) -> usize {
        self.0.num_params()
    }
    fn parameters(&self) -> dp_models::Result<Vec<f32>> {
        self.0.parameters()
    }
    fn set_parameters(&mut self, theta: &[f32]) -> dp_models::Result<()> {
        self.0.set_parameters(theta)
    }
    fn clipped_gradient(
        &self,
        data: &dp_models::data::Dataset,
        batch: &[usize],
        rule: ClipRule,
    ) -> dp_models::Result<ClippedGradient> {
        let mut clipped = self.0.clipped_gradient(data, batch, rule)?.flattened()?;
        if let dp_models::GradientSum::Flat(sum) = &mut clipped.sum {
            sum.pop();
        }
        Ok(clipped)
    }
}

#[test]
fn the_clipped_sum_must_cover_every_parameter() -> dp_optim::Result<()> {
    let data = data();
    let mut noise = NoiseSource::seeded(10);
    let model = Short(mlp(8, &[16], 2, Activation::Tanh, &mut noise)?);
    let mut e = PrivacyEngine::new(model, config(Some(private(None))), data.len(), noise)?;
    let theta = e.model().parameters()?;
    assert!(matches!(e.step(&data), Err(Error::UnprotectedParameter(_))));
    assert_eq!(e.model().parameters()?, theta);
    assert!(
        e.ledger().expect("private").entries.is_empty(),
        "nothing charged"
    );
    Ok(())
}

/// Inconsistent data is a typed error naming the record, before any charge; never a
/// panic inside the step or a wrong accuracy.
#[test]
fn bad_data_is_an_error_naming_the_record() -> dp_optim::Result<()> {
    let good = data();
    let mut nan = good.clone();
    nan.features[7 * 8 + 3] = f32::NAN;
    let mut short = good.clone();
    short.features.truncate(good.features.len() - 1);
    let mut label = good.clone();
    label.labels[9] = 5;
    for (bad, needle) in [
        (nan, "record 7"),
        (short, "feature values"),
        (label, "record 9"),
    ] {
        let mut e = engine_with(NoiseSource::seeded(12), config(Some(private(None))), &good)?;
        match e.step(&bad) {
            Err(Error::Models(err)) => assert!(err.to_string().contains(needle), "{err}"),
            other => panic!("expected a data error naming {needle}, got {other:?}"),
        }
        assert!(e.ledger().expect("private").entries.is_empty());
    }
    let e = engine_with(NoiseSource::seeded(12), config(Some(private(None))), &good)?;
    let three_classes = Dataset {
        classes: 3,
        ..good.clone()
    };
    assert!(matches!(
        e.accuracy(&three_classes),
        Err(Error::InvalidSetting {
            name: "classes",
            ..
        })
    ));
    Ok(())
}

/// The GDP CLT's ε is asymptotic: it may report, never enforce, a budget.
#[test]
fn an_asymptotic_accountant_cannot_enforce_a_budget() -> dp_optim::Result<()> {
    let data = data();
    let gdp = PrivacyConfig {
        accountant: AccountantKind::Gdp,
        ..private(Some(3.0))
    };
    match engine_with(NoiseSource::seeded(1), config(Some(gdp.clone())), &data) {
        Err(Error::InvalidSetting {
            name: "accountant",
            reason,
            ..
        }) => assert!(reason.contains("asymptotic"), "{reason}"),
        Err(other) => panic!("expected InvalidSetting, got {other:?}"),
        Ok(_) => panic!("a GDP engine enforced a budget"),
    }
    let report_only = PrivacyConfig {
        target_epsilon: None,
        ..gdp
    };
    assert!(engine_with(NoiseSource::seeded(1), config(Some(report_only)), &data).is_ok());
    Ok(())
}

/// A second writer on a checkpoint directory is refused while the first holds it.
#[test]
fn a_checkpoint_directory_has_one_writer() -> dp_optim::Result<()> {
    let dir = temp("locked");
    let first = CheckpointDir::open(&dir)?;
    assert!(matches!(
        CheckpointDir::open(&dir),
        Err(Error::CheckpointLocked { .. })
    ));
    let writer = trained(NoiseSource::seeded(2), config(Some(private(None))), 1)?;
    first.save(&writer.checkpoint()?)?;
    drop(first);
    let second = CheckpointDir::open(&dir)?;
    assert_eq!(second.load()?.map(|c| c.steps), Some(1));
    drop(second);
    std::fs::remove_file(dir.join("checkpoint.json")).expect("rm");
    std::fs::create_dir_all(dir.join("checkpoint.json")).expect("mkdir");
    assert!(matches!(
        CheckpointDir::open(&dir),
        Err(Error::Checkpoint { .. })
    ));
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}
