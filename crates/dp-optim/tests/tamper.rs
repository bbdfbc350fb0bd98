//! Hand-edited, truncated and corrupted checkpoints: each edit the audit tried (ledger
//! emptied, a count 78 → 1, σ → 100, q → 1e-9, steps → 1 / 100 / 2⁶⁴−1, weights of
//! another run) is refused when the file is loaded (its integrity digest), and a
//! checkpoint built in memory whose steps outrun its ledger is refused by the resume.

use dp_mechanisms::NoiseSource;
use dp_optim::{Checkpoint, Error, PrivacyEngine, Sampler};
use serde_json::Value;

use super::{engine, private, toy_data};

const POISSON: Sampler = Sampler::Poisson {
    sampling_rate: 0.05,
};

fn trained(seed: u64, steps: usize) -> (PrivacyEngine, dp_models::data::Dataset) {
    let data = toy_data(200, &mut NoiseSource::seeded(90));
    let mut e = engine(seed, POISSON, Some(private(None)), &data).expect("engine");
    for _ in 0..steps {
        e.step(&data).expect("step");
    }
    (e, data)
}

fn path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "dp-optim-tamper-{name}-{}.json",
        std::process::id()
    ))
}

/// Writes `edit` applied to a saved checkpoint's JSON and loads it back.
fn load_edited(name: &str, edit: impl Fn(&mut Value)) -> dp_optim::Result<Checkpoint> {
    let (e, _) = trained(91, 30);
    let file = path(name);
    e.save_checkpoint(&file).expect("save");
    let mut json: Value =
        serde_json::from_slice(&std::fs::read(&file).expect("read")).expect("json");
    edit(&mut json);
    std::fs::write(&file, serde_json::to_vec(&json).expect("bytes")).expect("write");
    let loaded = Checkpoint::load(&file);
    let _ = std::fs::remove_file(&file);
    loaded
}

/// Sets every field `key` below `value` to `to`; panics if there is none.
fn replace_number(value: &mut Value, key: &str, to: f64) {
    fn walk(v: &mut Value, key: &str, to: f64) -> usize {
        match v {
            Value::Object(map) => map
                .iter_mut()
                .map(|(k, v)| {
                    if k == key {
                        *v = to.into();
                        1
                    } else {
                        walk(v, key, to)
                    }
                })
                .sum(),
            Value::Array(items) => items.iter_mut().map(|v| walk(v, key, to)).sum(),
            _ => 0,
        }
    }
    assert!(walk(value, key, to) > 0, "no {key} in {value}");
}

fn refused(name: &str, edit: impl Fn(&mut Value)) {
    match load_edited(name, edit) {
        Err(Error::Checkpoint { reason, .. }) => {
            assert!(reason.contains("integrity digest"), "{name}: {reason}")
        }
        other => panic!("{name}: expected a refusal, got {other:?}"),
    }
}

#[test]
fn an_untouched_checkpoint_loads_and_resumes() {
    let loaded = load_edited("untouched", |_| {}).expect("loads");
    let data = toy_data(200, &mut NoiseSource::seeded(90));
    let mut e = engine(91, POISSON, Some(private(None)), &data).expect("engine");
    e.restore(&loaded).expect("resumes");
    assert_eq!(e.steps(), 30);
}

#[test]
fn every_edit_the_audit_tried_is_refused_at_load() {
    refused("ledger-emptied", |j| {
        j["ledger"]["entries"] = Value::Array(vec![])
    });
    refused("count", |j| j["ledger"]["entries"][0]["count"] = 1.into());
    // σ and q as the ledger writes them, wherever they sit in the event's JSON.
    refused("sigma", |j| {
        replace_number(&mut j["ledger"], "noise_multiplier", 100.0)
    });
    refused("q", |j| {
        replace_number(&mut j["ledger"], "sampling_rate", 1e-9)
    });
    for steps in [1u64, 100, u64::MAX] {
        refused("steps", |j| j["steps"] = steps.into());
    }
    refused("weights", |j| j["theta"][0] = 123.0.into());
    refused("fingerprint", |j| {
        j["fingerprint"]["dp"] = "non-private (--no-dp)".into()
    });
    refused("digest", |j| j["digest"] = Value::Null);
}

#[test]
fn a_truncated_checkpoint_is_an_error_naming_the_file() {
    let (e, _) = trained(92, 5);
    let file = path("truncated");
    e.save_checkpoint(&file).expect("save");
    let bytes = std::fs::read(&file).expect("read");
    std::fs::write(&file, &bytes[..bytes.len() / 2]).expect("write");
    match Checkpoint::load(&file) {
        Err(Error::Checkpoint { path, reason }) => {
            assert!(path.contains("truncated"));
            assert!(
                reason.contains("truncated or is not a checkpoint"),
                "{reason}"
            );
        }
        other => panic!("expected a checkpoint error, got {other:?}"),
    }
    let _ = std::fs::remove_file(&file);
}

/// Without the file (an in-memory checkpoint, a digest recomputed by whoever edited
/// it), steps that outrun the ledger are still refused by the resume.
#[test]
fn steps_beyond_the_ledger_are_refused_by_the_resume() {
    let (e, data) = trained(93, 30);
    for steps in [31u64, u64::MAX] {
        let mut edited = e.checkpoint().expect("checkpoint");
        edited.steps = steps;
        let mut fresh = engine(93, POISSON, Some(private(None)), &data).expect("engine");
        match fresh.restore(&edited) {
            Err(Error::Checkpoint { reason, .. }) => {
                assert!(reason.contains("charges"), "{reason}")
            }
            other => panic!("steps {steps}: expected a refusal, got {other:?}"),
        }
    }
    let mut emptied = e.checkpoint().expect("checkpoint");
    if let Some(ledger) = &mut emptied.ledger {
        ledger.entries.clear();
    }
    let mut fresh = engine(93, POISSON, Some(private(None)), &data).expect("engine");
    assert!(fresh.restore(&emptied).is_err());
}
