//! `dp train --mechanism band-mf` and `--sampling truncated-poisson`: what they charge,
//! and one line with exit code 2 for flags that do not go together.

use std::process::Command;

use super::train::{data_dir, fails_naming, succeeds, summary, train};

fn account(args: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_dp"))
        .arg("account")
        .args(args.split_whitespace())
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// BandMF over 4 bands, 2,000 records, B 100: 20 steps in 4 groups sampled at q = 0.2,
/// charged as 5 cycles — exactly `dp account --q 0.2 --steps 5`.
#[test]
fn band_mf_charges_one_poisson_step_per_cycle() {
    let Some(data) = data_dir() else { return };
    let run = "--limit 2000 --epochs 1 --batch-size 100 --noise-multiplier 1 --seed 2 --json";
    let out = succeeds(train(
        &data,
        &format!("{run} --mechanism band-mf --bands 4"),
    ));
    let trained = summary(&out);
    assert_eq!(trained["steps"], 20);
    let expected = account("--q 0.2 --steps 5 --noise-multiplier 1 --delta 1e-5 --json");
    assert_eq!(trained["epsilon"], expected["epsilon"]);
}

/// A truncated Poisson run charges the truncated event every step: its ε is `dp
/// account`'s for the same sampling on the same 2,000 records.
#[test]
fn truncated_poisson_training_charges_what_dp_account_computes() {
    let Some(data) = data_dir() else { return };
    let run = "--limit 2000 --epochs 1 --batch-size 100 --noise-multiplier 1 --seed 2 --json";
    let out = succeeds(train(
        &data,
        &format!("{run} --sampling truncated-poisson --max-batch-size 120"),
    ));
    let expected = account(
        "--dataset-size 2000 --batch-size 100 --steps 20 --sampling truncated-poisson \
         --max-batch-size 120 --noise-multiplier 1 --delta 1e-5 --json",
    );
    assert_eq!(summary(&out)["epsilon"], expected["epsilon"]);
}

/// Flags that do not go together are one line naming the flag, exit code 2, before any
/// data is read or step taken.
#[test]
fn band_mf_and_truncation_flags_are_checked() {
    let Some(data) = data_dir() else { return };
    let base = "--limit 2000 --epochs 1 --batch-size 100 --noise-multiplier 1 --seed 2";
    for (extra, flag) in [
        ("--mechanism band-mf", "--bands"),
        ("--bands 4", "--bands"),
        ("--mechanism band-mf --bands 40", "--bands"),
        (
            "--mechanism band-mf --bands 4 --sampling shuffle",
            "--sampling",
        ),
        ("--sampling truncated-poisson", "--max-batch-size"),
        ("--max-batch-size 100", "--max-batch-size"),
        (
            "--sampling truncated-poisson --max-batch-size 0",
            "--max-batch-size",
        ),
    ] {
        fails_naming(train(&data, &format!("{base} {extra}")), flag);
    }
    fails_naming(
        train(
            &data,
            "--limit 2000 --epochs 1 --batch-size 100 --no-dp --mechanism band-mf --bands 4",
        ),
        "--mechanism band-mf",
    );
}
