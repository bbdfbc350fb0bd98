//! `dp train --mechanism band-mf` and `--sampling truncated-poisson`: what they charge,
//! and one line with exit code 2 for flags that do not go together.

use std::process::Command;

use super::train::{data_dir, fails_naming, succeeds, summary, train};

/// `dp account` with `args`, as a command line.
fn account_command(args: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dp"));
    command.arg("account").args(args.split_whitespace());
    command
}

/// `dp account`'s JSON for `args` (which must succeed).
fn account(args: &str) -> serde_json::Value {
    serde_json::from_slice(&succeeds(account_command(args)).stdout).expect("json")
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

/// `dp account` with cyclic groups charges one Poisson step per cycle at b times the
/// per-step rate (q = 0.01 over 10 groups for 1,000 steps is q = 0.1 for 100 steps), and
/// balls in bins one Gaussian per cycle (1,000 steps over 100 bins: q = 1 for 10 steps).
#[test]
fn dp_account_charges_cyclic_and_balls_in_bins_runs_per_cycle() {
    let sigma = "--noise-multiplier 1 --delta 1e-5 --json";
    let cyclic = account(&format!(
        "--q 0.01 --steps 1000 --sampling cyclic-poisson --groups 10 {sigma}"
    ));
    let poisson = account(&format!("--q 0.1 --steps 100 {sigma}"));
    assert_eq!(cyclic["epsilon"], poisson["epsilon"]);
    let bins = account(&format!(
        "--steps 1000 --sampling balls-in-bins --groups 100 {sigma}"
    ));
    let gaussian = account(&format!("--q 1 --steps 10 {sigma}"));
    assert_eq!(bins["epsilon"], gaussian["epsilon"]);
}

/// `--groups` goes with the cyclic schemes only, and a group cannot be sampled above
/// rate 1; balls in bins takes no rate.
#[test]
fn cyclic_accounting_flags_are_checked() {
    let sigma = "--noise-multiplier 1 --delta 1e-5";
    for (args, flag) in [
        ("--q 0.01 --steps 10 --sampling cyclic-poisson", "--groups"),
        ("--q 0.01 --steps 10 --groups 3", "--groups"),
        (
            "--q 0.2 --steps 10 --sampling cyclic-poisson --groups 10",
            "--groups",
        ),
        (
            "--q 0.2 --steps 10 --sampling balls-in-bins --groups 10",
            "--q",
        ),
        (
            "--q 0.01 --steps 10 --sampling cyclic-poisson --groups 0",
            "--groups",
        ),
    ] {
        fails_naming(account_command(&format!("{args} {sigma}")), flag);
    }
}
