//! `dp train --distributed mpi` under `mpirun` (feature `mpi`, with the data present):
//! the single process's run on 2 and 3 ranks — the same steps, ε and accuracy, the
//! weights within 1e-5 of each tensor's largest entry — and the flags it refuses.

use std::path::Path;
use std::process::Command;

use super::dp;

const RUN: &str = "train --model mnist-cnn --dataset mnist --limit 4000 --epochs 1 --batch-size 256 --noise-multiplier 1 --max-grad-norm 1 --seed 5 --json";

/// The run's JSON summary, after `launcher` (nothing, or mpirun) ran `dp` with `extra`.
fn summary(launcher: &[&str], extra: &str) -> serde_json::Value {
    let mut args: Vec<String> = launcher.iter().map(|s| s.to_string()).collect();
    args.push(env!("CARGO_BIN_EXE_dp").into());
    args.extend(
        format!("{RUN} {extra}")
            .split_whitespace()
            .map(String::from),
    );
    let out = Command::new(&args[0])
        .args(&args[1..])
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    serde_json::from_str(text.lines().last().expect("a summary")).expect("json")
}

/// The largest difference of two safetensors files' tensors, relative to each tensor's
/// largest entry; the files must hold the same names and shapes.
fn weights_difference(a: &Path, b: &Path) -> f32 {
    let (a, b) = (
        candle_core::safetensors::load(a, &candle_core::Device::Cpu).expect("a"),
        candle_core::safetensors::load(b, &candle_core::Device::Cpu).expect("b"),
    );
    assert_eq!(
        a.keys().collect::<std::collections::BTreeSet<_>>(),
        b.keys().collect(),
        "the same tensors"
    );
    let host = |t: &candle_core::Tensor| -> Vec<f32> {
        t.flatten_all().and_then(|t| t.to_vec1()).expect("host")
    };
    a.iter()
        .map(|(name, ta)| {
            let (x, y) = (host(ta), host(&b[name]));
            assert_eq!(ta.dims(), b[name].dims(), "{name}");
            let scale = x.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-12);
            x.iter()
                .zip(&y)
                .fold(0.0f32, |m, (p, q)| m.max((p - q).abs()))
                / scale
        })
        .fold(0.0, f32::max)
}

#[test]
fn a_distributed_run_is_the_single_process_run() {
    if std::env::var_os("DP_DATA_DIR").is_none() {
        eprintln!("DP_DATA_DIR unset: skipping");
        return;
    }
    let dir = std::env::temp_dir().join(format!("dp-cli-mpi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let single = dir.join("single.st");
    let one = summary(&[], &format!("--save-weights {}", single.display()));
    for ranks in ["2", "3"] {
        let weights = dir.join(format!("ranks{ranks}.st"));
        let mpirun = [
            "mpirun",
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            ranks,
        ];
        let many = summary(
            &mpirun,
            &format!("--distributed mpi --save-weights {}", weights.display()),
        );
        for field in ["steps", "epsilon", "delta", "test_accuracy"] {
            assert_eq!(many[field], one[field], "{ranks} ranks: {field}");
        }
        let difference = weights_difference(&single, &weights);
        assert!(
            difference <= 1e-5,
            "{ranks} ranks: weights differ by {difference}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// What a distributed run cannot do yet is refused before anything runs, naming the flag.
#[test]
fn flags_a_distributed_run_refuses() {
    for (extra, flag) in [
        ("--checkpoint-dir /tmp/none", "--checkpoint-dir"),
        ("--sampling shuffle", "--sampling shuffle"),
    ] {
        let out = dp(&format!("{RUN} --distributed mpi {extra}"));
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag) && err.contains("--distributed"), "{err}");
    }
}
