//! `cargo xtask bench distributed`: the same `dp train` run as one process on two threads
//! and as `mpirun -np 2` ranks of one thread each, alternating — on this machine the same
//! two cores either way, so it measures the data-parallel protocol's overhead, not a
//! speed-up — with rank 0's collective traffic per step (operations, bytes, seconds).
//! Needs MPI (Debian's openmpi-bin and libopenmpi-dev, libclang-dev for the bindings):
//! it builds `dp` with the `mpi` feature first.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// The run: one epoch of MNIST's first `limit` records, the CNN, B 256, σ 1.
fn run_args(limit: usize) -> Vec<String> {
    format!("train --model mnist-cnn --dataset mnist --limit {limit} --epochs 1 --batch-size 256 --noise-multiplier 1 --max-grad-norm 1 --seed 5 --json")
        .split_whitespace()
        .map(String::from)
        .collect()
}

pub fn run(repeats: usize, limit: usize) -> Result<()> {
    let dp = build_dp()?;
    let args = run_args(limit);
    let (mut single, mut ranks) = (Vec::new(), Vec::new());
    let mut traffic = Value::Null;
    for _ in 0..repeats {
        let one = summary(Command::new(&dp).args(&args).env("RAYON_NUM_THREADS", "2"))?;
        single.push(rate(&one)?);
        let mut mpirun = Command::new("mpirun");
        if is_root() {
            mpirun.arg("--allow-run-as-root");
        }
        mpirun
            .args(["-np", "2", "-x", "RAYON_NUM_THREADS=1"])
            .arg(&dp)
            .args(&args)
            .args(["--distributed", "mpi"]);
        let two = summary(&mut mpirun)?;
        if (two["steps"].clone(), two["epsilon"].clone())
            != (one["steps"].clone(), one["epsilon"].clone())
        {
            bail!("the two runs differ in steps or epsilon: {one} / {two}");
        }
        ranks.push(rate(&two)?);
        traffic = two["collective_per_step"].clone();
    }
    println!("dp train, MNIST CNN, {limit} records, 1 epoch, B 256 (seconds include the epoch's test evaluation); {repeats} alternating runs each, medians");
    println!(
        "1 rank × 2 threads   {:>9.0} samples/s",
        median(&mut single)
    );
    println!(
        "2 ranks × 1 thread   {:>9.0} samples/s (mpirun -np 2)",
        median(&mut ranks)
    );
    println!(
        "rank 0 per step (last run): {:.1} collective operations, {:.0} bytes, {:.2} ms",
        traffic["operations"].as_f64().unwrap_or(f64::NAN),
        traffic["bytes"].as_f64().unwrap_or(f64::NAN),
        1e3 * traffic["seconds"].as_f64().unwrap_or(f64::NAN)
    );
    Ok(())
}

/// `cargo build --release -p dp-cli --features mpi`; the binary's path.
fn build_dp() -> Result<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("the workspace root")?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(root)
        .args([
            "build",
            "--release",
            "-q",
            "-p",
            "dp-cli",
            "--features",
            "mpi",
        ])
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("building dp with the mpi feature failed (is MPI installed? apt-get install openmpi-bin libopenmpi-dev libclang-dev)");
    }
    Ok(root.join("target/release/dp"))
}

/// The last line of a run's output (its JSON summary).
fn summary(command: &mut Command) -> Result<Value> {
    let out = command.output().context("running dp train")?;
    if !out.status.success() {
        bail!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8(out.stdout)?;
    let last = text.lines().last().context("no summary")?;
    Ok(serde_json::from_str(last)?)
}

/// Samples per second of a summary: the expected batch (B) times the steps, over seconds.
fn rate(summary: &Value) -> Result<f64> {
    let steps = summary["steps"].as_f64().context("steps")?;
    let seconds = summary["seconds"].as_f64().context("seconds")?;
    Ok(256.0 * steps / seconds)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Whether this process runs as root (OpenMPI then needs `--allow-run-as-root`).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .is_some_and(|l| l.split_whitespace().nth(1) == Some("0"))
    })
}
