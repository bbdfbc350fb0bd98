//! `cargo xtask reproduce --jobs 2` (and, with the `mpi` feature, `mpirun -np 2 … --jobs
//! mpi`) gives the tables of `--jobs 1`: the same runs (one
//! training thread per worker instead of all cores in one process) and the same
//! assembly, compared on every table JSON but for wall times and the run header. On the
//! SA-DPSGD paper's smoke profile, whose ablations share runs with Table 1 (one run key,
//! scheduled once, read from the cache by both tables). Needs `DP_DATA_DIR` for data (without it both sides report the
//! tables' data as not present, and still must agree).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn reproduce(out: &Path, jobs: &str) {
    reproduce_under(&[], &["sa-dpsgd"], out, jobs);
}

/// `reproduce` of `selection` (a paper, and `--only` a table) started by `launcher`
/// (nothing, or mpirun and its flags).
fn reproduce_under(launcher: &[&str], selection: &[&str], out: &Path, jobs: &str) {
    let mut command = match launcher.split_first() {
        Some((program, flags)) => {
            let mut c = Command::new(program);
            c.args(flags).arg(env!("CARGO_BIN_EXE_xtask"));
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_xtask")),
    };
    let status = command
        .arg("reproduce")
        .args(selection)
        .args(["--profile", "smoke", "--jobs", jobs])
        .arg("--out")
        .arg(out)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("start xtask");
    assert!(status.success(), "--jobs {jobs}: {status}");
}

/// A table JSON without what legitimately differs between two sittings: the run header,
/// wall times, and the wall column of the tables.
fn without_walls(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let walls: Vec<usize> = match map.get("columns") {
                Some(Value::Array(columns)) => columns
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.as_str().is_some_and(|c| c.starts_with("wall")))
                    .map(|(i, _)| i)
                    .collect(),
                _ => Vec::new(),
            };
            let mut out = serde_json::Map::new();
            for (key, v) in map {
                if matches!(key.as_str(), "header" | "wall_s" | "runs_wall_s") {
                    continue;
                }
                let v = match (key.as_str(), v) {
                    ("rows", Value::Array(rows)) if !walls.is_empty() => Value::Array(
                        rows.into_iter()
                            .map(|row| match row {
                                Value::Array(cells) => Value::Array(
                                    cells
                                        .into_iter()
                                        .enumerate()
                                        .filter(|(i, _)| !walls.contains(i))
                                        .map(|(_, c)| c)
                                        .collect(),
                                ),
                                other => other,
                            })
                            .collect(),
                    ),
                    (_, v) => without_walls(v),
                };
                out.insert(key, v);
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(without_walls).collect()),
        other => other,
    }
}

fn tables(dir: &Path, paper: &str) -> Vec<(String, Value)> {
    let mut found: Vec<(String, Value)> = std::fs::read_dir(dir.join(paper))
        .expect("output directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("read table");
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (
                name,
                without_walls(serde_json::from_str(&text).expect("json")),
            )
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// The same tables of `paper` in `one` and `other` (by name, all but their walls), at
/// least `count` of them.
fn assert_same_tables(one: &Path, other: &Path, paper: &str, count: usize, what: &str) {
    let (a, b) = (tables(one, paper), tables(other, paper));
    assert!(a.len() >= count, "{} tables", a.len());
    assert_eq!(
        a.iter().map(|t| &t.0).collect::<Vec<_>>(),
        b.iter().map(|t| &t.0).collect::<Vec<_>>()
    );
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        assert!(x == y, "{name} differs between --jobs 1 and {what}");
    }
}

#[test]
fn two_jobs_give_the_tables_of_one() {
    let root: PathBuf =
        std::env::temp_dir().join(format!("dp-rs-jobs-test-{}", std::process::id()));
    let (one, two) = (root.join("one"), root.join("two"));
    reproduce(&one, "1");
    reproduce(&two, "2");
    assert_same_tables(&one, &two, "sa-dpsgd", 7, "--jobs 2");
    // The workers ran (each leaves a log).
    let logs = std::fs::read_dir(two.join("sa-dpsgd").join("logs"))
        .expect("worker logs")
        .count();
    assert!(logs > 0);
    // The run's one-page summary, as docs/REPRODUCTION.md: every table and plot linked.
    let page = std::fs::read_to_string(one.join("REPRODUCTION.md")).expect("summary page");
    assert!(page.contains("](./sa-dpsgd/table1-mnist.md)"), "{page}");
    assert!(page.contains(".svg)"), "no plot linked:\n{page}");
    let _ = std::fs::remove_dir_all(&root);
}

/// `mpirun -np 2 xtask reproduce … --jobs mpi`: the runs spread over two ranks, rank 0's
/// tables those of `--jobs 1`, and each rank trained some of them (their logs). On GDP's
/// Adult table (seconds on the smoke profile).
#[cfg(feature = "mpi")]
#[test]
fn two_mpi_ranks_give_the_tables_of_one() {
    let root: PathBuf =
        std::env::temp_dir().join(format!("dp-rs-jobs-mpi-test-{}", std::process::id()));
    let (one, ranks) = (root.join("one"), root.join("ranks"));
    let adult = ["gdp", "--only", "adult"];
    reproduce_under(&[], &adult, &one, "1");
    let mpirun = [
        "mpirun",
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        "2",
    ];
    reproduce_under(&mpirun, &adult, &ranks, "mpi");
    assert_same_tables(&one, &ranks, "gdp", 1, "--jobs mpi on 2 ranks");
    let logs = std::fs::read_dir(ranks.join("gdp").join("logs"))
        .expect("worker logs")
        .count();
    assert!(logs >= 2, "{logs} worker logs");
    let _ = std::fs::remove_dir_all(&root);
}
