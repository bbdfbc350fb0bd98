//! End-to-end tests of the `dp` binary: snapshots of its output, exit codes on bad input.

mod band_mf;
#[cfg(feature = "mpi")]
mod distributed;
mod resume;
mod train;

use std::process::{Command, Output};

fn dp(args: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dp"))
        .args(args.split_whitespace())
        .output()
        .expect("the dp binary runs")
}

fn stdout(args: &str) -> String {
    let out = dp(args);
    assert!(
        out.status.success(),
        "dp {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// MNIST settings of the TF Privacy tutorial and the GDP paper: B = 256 of 60000,
/// σ ∈ {0.7, 1.1, 1.3}, 15 and 60 epochs, all accountants.
#[test]
fn account_all_mnist_snapshots() {
    for sigma in ["0.7", "1.1", "1.3"] {
        for epochs in ["15", "60"] {
            let args = format!(
                "account --dataset-size 60000 --batch-size 256 --epochs {epochs} --noise-multiplier {sigma} --delta 1e-5 --accountant all"
            );
            insta::assert_snapshot!(
                format!("account_all_sigma{sigma}_epochs{epochs}"),
                stdout(&args)
            );
        }
    }
}

#[test]
fn account_json_has_the_documented_fields() {
    let text =
        stdout("account --q 0.0042667 --noise-multiplier 1.1 --steps 14062 --delta 1e-5 --json");
    let value: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(value["accountant"], "rdp");
    assert_eq!(value["order"], 8.1);
    assert_eq!(value["delta"], 1e-5);
    let eps = value["epsilon"].as_f64().expect("number");
    assert!((eps - 2.5966).abs() < 1e-3, "{eps}");

    let all = stdout(
        "account --q 0.0042667 --noise-multiplier 1.1 --steps 14062 --delta 1e-5 --json --accountant all",
    );
    let rows: Vec<serde_json::Value> = serde_json::from_str(&all).expect("json array");
    let names: Vec<&str> = rows
        .iter()
        .filter_map(|r| r["accountant"].as_str())
        .collect();
    assert_eq!(names, ["rdp", "rdp-classic", "pld", "gdp"]);
    assert!(rows
        .iter()
        .all(|r| r["epsilon"].is_number() && r["delta"].is_number()));
    assert_eq!(rows[3]["guarantee"], "asymptotic");
}

#[test]
fn calibrate_reproduces_opacus_and_never_overshoots() {
    let text = stdout(
        "calibrate --target-epsilon 8 --delta 1e-5 --q 0.04 --epochs 90 --opacus-search --json",
    );
    let value: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(value["noise_multiplier"], 1.416015625);
    assert_eq!(value["steps"], 2250);
    insta::assert_snapshot!(
        "calibrate_all",
        stdout("calibrate --target-epsilon 8 --delta 1e-5 --q 0.04 --epochs 90 --accountant all --tolerance 1e-4")
    );
    let steps =
        stdout("calibrate --target-epsilon 3 --delta 1e-5 --q 0.004 --noise-multiplier 1.1 --json");
    let value: serde_json::Value = serde_json::from_str(&steps).expect("json");
    assert!(value["epsilon"].as_f64().expect("number") <= 3.0);
    assert!(value["steps"].as_u64().expect("integer") > 10_000);
}

/// Bad input: one line on stderr naming the problem, exit code 2, never a panic.
#[test]
fn bad_input_is_one_line_and_exit_code_2() {
    let cases = [
        ("account --q 1.5 --noise-multiplier 1 --steps 10 --delta 1e-5", "--q"),
        ("account --q 0 --noise-multiplier 1 --steps 10 --delta 1e-5", "--q"),
        (
            "account --q 0.01 --noise-multiplier 0 --steps 10 --delta 1e-5",
            "--noise-multiplier",
        ),
        (
            "account --q 0.01 --noise-multiplier -1 --steps 10 --delta 1e-5",
            "--noise-multiplier",
        ),
        (
            "account --q 0.01 --noise-multiplier NaN --steps 10 --delta 1e-5",
            "--noise-multiplier",
        ),
        (
            "account --q 0.01 --noise-multiplier 1 --steps 0 --delta 1e-5",
            "--steps",
        ),
        ("account --q 0.01 --noise-multiplier 1 --steps 10 --delta 1", "--delta"),
        ("account --q 0.01 --noise-multiplier 1 --steps 10 --delta 0", "--delta"),
        (
            "account --q 0.01 --noise-multiplier 1 --steps 10 --delta nan",
            "--delta",
        ),
        ("account --q 0.01 --noise-multiplier 1 --delta 1e-5", "--steps"),
        (
            "account --q 0.01 --noise-multiplier 1 --steps 10 --delta 1e-5 --sampling truncated-poisson",
            "--max-batch-size",
        ),
        (
            "account --dataset-size 100 --batch-size 10 --noise-multiplier 1 --steps 10 --delta 1e-5 --max-batch-size 20",
            "--max-batch-size",
        ),
        (
            "account --dataset-size 100 --batch-size 10 --noise-multiplier 1 --steps 10 --delta 1e-5 --sampling truncated-poisson --max-batch-size 0",
            "--max-batch-size",
        ),
        ("account --noise-multiplier 1 --steps 10 --delta 1e-5", "--q"),
        ("account --q 0.01 --steps 10 --delta 1e-5", "--noise-multiplier"),
        (
            "account --q 0.01 --noise-multiplier 1 --steps 10 --epochs 3 --delta 1e-5",
            "--epochs",
        ),
        ("account --q 0.01 --noise-multiplier 1 --steps -3 --delta 1e-5", "-3"),
        (
            "account --q 0.01 --noise-multiplier 1 --steps 10 --delta 1e-5 --accountant nope",
            "nope",
        ),
        (
            "account --dataset-size 100 --batch-size 200 --noise-multiplier 1 --steps 10 --delta 1e-5",
            "--batch-size",
        ),
        (
            "account --q 0.01 --noise-multiplier 1 --steps 10 --delta 1e-5 --sampling without-replacement",
            "without-replacement",
        ),
        (
            "account --q 0.01 --noise-multiplier 1 --epochs inf --delta 1e-5",
            "--epochs",
        ),
        (
            "calibrate --target-epsilon -1 --delta 1e-5 --q 0.01 --steps 10",
            "--target-epsilon",
        ),
        (
            "calibrate --target-epsilon 1 --delta 1e-5 --q 0.01",
            "--steps",
        ),
        (
            "account --q 0.5 --noise-multiplier 1 --steps 18446744073709551615 --delta 1e-5 --accountant pld",
            "grid",
        ),
        ("frobnicate", "frobnicate"),
        (
            "train --noise-multiplier 1 --accountant gdp --target-epsilon 3",
            "--accountant gdp",
        ),
        ("train --noise-multiplier 1 --accountant all", "--accountant all"),
        ("train --noise-multiplier 1 --delta 2", "--delta"),
        ("train --noise-multiplier 0", "--noise-multiplier"),
        ("train --noise-multiplier 1 --target-epsilon nan", "--target-epsilon"),
        ("audit --canaries 10 --guesses 20", "--guesses"),
        ("audit --noise-multiplier 0", "--noise-multiplier"),
    ];
    let hostile = [
        // The audit's hostile pass: each once a panic, an OOM kill, an unbounded run or a
        // calibration past 120 s.
        ("audit --canaries 18446744073709551615 --seed 1", "--canaries"),
        ("audit --canaries 100000000 --seed 1", "--canaries"),
        ("audit --steps 1000000 --q 1 --seed 1", "--steps"),
        (
            "calibrate --target-epsilon 1.6657 --delta 0.00784 --accountant pld --q 0.00068 --steps 1 --json",
            "does not constrain",
        ),
        (
            "calibrate --target-epsilon 1.6657 --delta 0.00784 --accountant pld --q 0.00068 --steps 1 --opacus-search",
            "does not constrain",
        ),
        (
            "calibrate --target-epsilon 1e300 --delta 1e-5 --q 0.01 --steps 100",
            "does not constrain",
        ),
        ("train --no-dp --noise-multiplier 1", "--noise-multiplier"),
        ("train --no-dp --target-epsilon 3", "--target-epsilon"),
        ("train --batch-size 100000000 --noise-multiplier 1", "--batch-size"),
        ("train --physical-batch-size 100000000 --noise-multiplier 1", "--physical-batch-size"),
    ];
    for (args, needle) in cases.into_iter().chain(hostile) {
        let out = dp(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "dp {args}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "dp {args}: {stderr}");
        assert!(
            stderr.contains(needle),
            "dp {args}: {stderr} should name {needle}"
        );
        assert!(out.stdout.is_empty(), "dp {args}");
    }
}

/// Without-replacement sampling uses replace-one neighbours; PLD declines it.
#[test]
fn without_replacement_sampling() {
    let text = stdout(
        "account --dataset-size 60000 --batch-size 256 --steps 1000 --noise-multiplier 1.1 --delta 1e-5 --sampling without-replacement --accountant all",
    );
    insta::assert_snapshot!("account_without_replacement", text);
}

/// Truncated Poisson sampling: the cut's probability in the header, PLD and RDP above
/// plain Poisson's, GDP declining; calibration under it.
#[test]
fn truncated_poisson_sampling() {
    let text = stdout(
        "account --dataset-size 60000 --batch-size 256 --epochs 10 --noise-multiplier 1.1 --delta 1e-5 --sampling truncated-poisson --max-batch-size 300 --accountant all",
    );
    insta::assert_snapshot!("account_truncated_poisson", text);
    let text = stdout(
        "calibrate --dataset-size 60000 --batch-size 256 --epochs 10 --target-epsilon 2 --delta 1e-5 --sampling truncated-poisson --max-batch-size 270 --accountant pld",
    );
    insta::assert_snapshot!("calibrate_truncated_poisson", text);
}

#[test]
fn help_exits_zero() {
    let out = dp("--help");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("calibrate"));
    let train = String::from_utf8_lossy(&dp("train --help").stdout).to_string();
    let old = train.replace("--clipping", "");
    assert!(!old.contains("--clip"), "the old flag name: {train}");
}

/// ∞ is "unbounded" in every output, and a confidence is printed as given.
#[test]
fn audit_prints_unbounded_and_the_exact_confidence() {
    let json = stdout("audit --noise-multiplier 1e-300 --steps 2 --seed 1 --json");
    let report: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(report["claimed_epsilon"], "unbounded");
    let text = stdout("audit --confidence 0.999999999 --steps 2 --seed 1");
    assert!(text.contains("probability 0.999999999"), "{text}");
}

/// A long PLD composition whose ε runs into the hundreds is finite (it once overflowed
/// to "unbounded" where RDP gives 1035.9).
#[test]
fn pld_epsilon_in_the_hundreds_is_finite() {
    let json = stdout(
        "account --accountant pld --q 0.01 --steps 10000000 --noise-multiplier 1 --delta 1e-5 --json",
    );
    let report: serde_json::Value = serde_json::from_str(&json).expect("json");
    let eps = report["epsilon"].as_f64().expect("finite epsilon");
    assert!(eps > 900.0 && eps < 1035.9, "{eps}");
}

/// A number typed with many digits is not echoed back in full.
#[test]
fn messages_shorten_long_numbers() {
    let delta = format!("1.{}1", "0".repeat(300));
    let out = dp(&format!(
        "account --q 0.01 --noise-multiplier 1 --steps 10 --delta {delta}"
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--delta (1)") && stderr.len() < 100,
        "{stderr}"
    );
}

/// A full disk is one error line and exit code 2; a closed pipe ends quietly (exit 0),
/// as ripgrep does. Neither panics (exit 101).
#[test]
fn write_errors_are_one_line_and_a_closed_pipe_is_quiet() {
    let args = [
        "account",
        "--q",
        "0.01",
        "--noise-multiplier",
        "1",
        "--steps",
        "10",
        "--delta",
        "1e-5",
    ];
    if let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") {
        let out = Command::new(env!("CARGO_BIN_EXE_dp"))
            .args(args)
            .stdout(full)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(stderr.contains("writing the output"), "{stderr}");
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_dp"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawns");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("waits");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `dp audit`: the claimed ε and the audited lower bound, the bound below the claim.
#[test]
fn audit_reports_a_lower_bound_below_the_claim() {
    let text = stdout("audit --seed 1 --json");
    let report: serde_json::Value = serde_json::from_str(&text).expect("json");
    let claimed = report["claimed_epsilon"].as_f64().expect("claimed");
    let bound = report["lower_bound"].as_f64().expect("bound");
    assert!(bound >= 0.0 && bound <= claimed, "{report}");
    assert_eq!(report["outcome"]["guesses"], 200);
}

/// An ε of ∞ says "unbounded" in text and in JSON (JSON has no ∞; it used to be `null`
/// beside "upper bound").
#[test]
fn an_infinite_epsilon_is_unbounded_in_text_and_json() {
    let args =
        "account --q 1 --noise-multiplier 0.01 --steps 1000000 --delta 1e-10 --accountant gdp";
    let text = stdout(args);
    assert!(
        text.contains("unbounded: no finite epsilon") && !text.contains("inf "),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&format!("{args} --json"))).expect("json");
    assert_eq!(json["epsilon"], "unbounded", "{json}");
}
