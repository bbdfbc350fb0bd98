//! A new kind of table touches only its paper's directory: the fixture paper of
//! `papers/tests/fixtures/papers/toy/` declares the kind `toy-squares` in its own
//! `mod.rs`; build.rs declares that module (under test) and gathers its `TABLE_KINDS`;
//! the harness loads, reports, writes and summarises the table, and no file of `src/`
//! or `build/` names it.

use std::path::{Path, PathBuf};

use anyhow::Result;

use dp_mechanisms::NoiseSource;
use dp_models::data::Dataset;
use dp_models::nn::{ModuleClassifier, Sequential};

use crate::args::{test_args, Profile};
use crate::config::{Algorithm, ModelChoice, RunConfig, TrainingTable};
use crate::paper_algorithm;
use crate::training::{run_cached, LoadedData};

#[test]
fn a_fixture_papers_own_kind_of_table_runs_through_the_harness() -> Result<()> {
    let out = std::env::temp_dir().join(format!("dp-papers-fixture-{}", std::process::id()));
    let outcome = crate::run::run_paper("toy", &test_args("toy", Profile::Smoke, 1, out.clone()))?;
    assert_eq!(outcome.shows, ["squares: 2 squares"]);
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("toy/squares.json"))?)?;
    assert_eq!(written["rows"], serde_json::json!([["2", "4"], ["3", "9"]]));
    assert!(out.join("toy/squares.md").is_file());
    std::fs::remove_dir_all(&out)?;
    Ok(())
}

/// The fixture paper's training-table algorithm is known by name: a run config naming it
/// reads, the scheduler costs it by its factor, its column joins a table once, and the
/// harness builds it for a run.
#[test]
fn a_fixture_papers_own_algorithm_is_found_by_name() -> Result<()> {
    let run: RunConfig = serde_json::from_str(
        r#"{"label": "a", "sigma": 1.0, "epochs": 1, "algorithm": "toy-sgd"}"#,
    )?;
    let algorithm = run.algorithm.expect("the run names its algorithm");
    assert_eq!(algorithm, Algorithm::Paper("toy-sgd"));
    assert_eq!(serde_json::to_string(&algorithm)?, r#""toy-sgd""#);
    assert_eq!(paper_algorithm::cost_factor(algorithm), 2);
    let columns = paper_algorithm::extra_columns([Algorithm::DpSgd, algorithm, algorithm]);
    assert_eq!(
        columns.iter().map(|c| c.heading).collect::<Vec<_>>(),
        ["toy steps"]
    );
    type Model = ModuleClassifier<Sequential>;
    assert!(paper_algorithm::table_algorithm::<Model>(algorithm, &run).is_some());
    assert!(paper_algorithm::table_algorithm::<Model>(Algorithm::DpSgd, &run).is_none());
    Ok(())
}

/// A training table of the fixture paper's model and algorithm trains through the
/// harness's run driver: the run ends with the algorithm's column read (its steps).
#[test]
fn a_fixture_papers_own_model_and_algorithm_train_a_run() -> Result<()> {
    let table: TrainingTable = serde_json::from_value(serde_json::json!({
        "dataset": "adult", "model": "toy-mlp", "algorithm": "toy-sgd", "lr": 0.1,
        "batch_size": 20, "clip": 1.0, "delta": 1e-5, "realised_batch_normalisation": false,
        "stop_max_mu": null, "metric": "accuracy", "runs": [],
        "smoke": {"train_examples": 100, "test_examples": 20, "epochs": 1}
    }))?;
    assert_eq!(table.model, ModelChoice::Paper("toy-mlp"));
    let run: RunConfig = serde_json::from_str(r#"{"label": "a", "sigma": 1.0, "epochs": 2}"#)?;
    let data = LoadedData {
        train: separable(100, 1),
        test: separable(20, 2),
        movielens: None,
    };
    let dir = std::env::temp_dir().join(format!("dp-papers-toy-run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (result, cached) = run_cached(&dir, "toy", &table, &run, Profile::Full, 1, &data)?;
    std::fs::remove_dir_all(&dir)?;
    assert!(!cached);
    assert_eq!(result.epochs.len(), 2);
    let steps = paper_algorithm::extra_columns([table.algorithm])[0].reading;
    assert_eq!(
        steps(&result.epochs[1]),
        Some(result.epochs[1].steps as f64)
    );
    Ok(())
}

/// `n` examples of 4 features in {0, 1}, the label the first feature.
fn separable(n: usize, seed: u64) -> Dataset {
    let mut noise = NoiseSource::seeded(seed);
    let features: Vec<f32> = (0..n * 4)
        .map(|_| f32::from(noise.uniform() < 0.5))
        .collect();
    let labels = (0..n).map(|i| features[i * 4] as u32).collect();
    Dataset {
        features,
        labels,
        shape: vec![4],
        classes: 2,
    }
}

/// The files of `dir` (recursively) with extension `rs`.
fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, found)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    Ok(())
}

#[test]
fn no_shared_file_names_the_fixture_paper() -> Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("build.rs")];
    rust_files(&root.join("src"), &mut files)?;
    rust_files(&root.join("build"), &mut files)?;
    let this = root.join("src/fixture_paper_test.rs");
    for file in files.iter().filter(|f| **f != this) {
        let text = std::fs::read_to_string(file)?;
        for name in [
            "toy::",
            "mod toy",
            "toy-squares",
            "Squares",
            "toy-sgd",
            "toy-mlp",
        ] {
            assert!(
                !text.contains(name),
                "{} names the fixture paper ({name})",
                file.display()
            );
        }
    }
    Ok(())
}
