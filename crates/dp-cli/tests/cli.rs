//! End-to-end tests of the `dp` binary: snapshots of its output, exit codes on bad input.

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
                "account --dataset-size 60000 --batch-size 256 --epochs {epochs} --sigma {sigma} --delta 1e-5 --accountant all"
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
    let text = stdout("account --q 0.0042667 --sigma 1.1 --steps 14062 --delta 1e-5 --json");
    let value: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(value["accountant"], "rdp");
    assert_eq!(value["order"], 8.1);
    assert_eq!(value["delta"], 1e-5);
    let eps = value["epsilon"].as_f64().expect("number");
    assert!((eps - 2.5966).abs() < 1e-3, "{eps}");

    let all = stdout(
        "account --q 0.0042667 --sigma 1.1 --steps 14062 --delta 1e-5 --json --accountant all",
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
    assert_eq!(value["sigma"], 1.416015625);
    assert_eq!(value["steps"], 2250);
    insta::assert_snapshot!(
        "calibrate_all",
        stdout("calibrate --target-epsilon 8 --delta 1e-5 --q 0.04 --epochs 90 --accountant all --tolerance 1e-4")
    );
    let steps = stdout("calibrate --target-epsilon 3 --delta 1e-5 --q 0.004 --sigma 1.1 --json");
    let value: serde_json::Value = serde_json::from_str(&steps).expect("json");
    assert!(value["epsilon"].as_f64().expect("number") <= 3.0);
    assert!(value["steps"].as_u64().expect("integer") > 10_000);
}

/// Bad input: one line on stderr naming the problem, exit code 2, never a panic.
#[test]
fn bad_input_is_one_line_and_exit_code_2() {
    let cases = [
        ("account --q 1.5 --sigma 1 --steps 10 --delta 1e-5", "--q"),
        ("account --q 0 --sigma 1 --steps 10 --delta 1e-5", "--q"),
        (
            "account --q 0.01 --sigma 0 --steps 10 --delta 1e-5",
            "--sigma",
        ),
        (
            "account --q 0.01 --sigma -1 --steps 10 --delta 1e-5",
            "--sigma",
        ),
        (
            "account --q 0.01 --sigma NaN --steps 10 --delta 1e-5",
            "--sigma",
        ),
        (
            "account --q 0.01 --sigma 1 --steps 0 --delta 1e-5",
            "--steps",
        ),
        ("account --q 0.01 --sigma 1 --steps 10 --delta 1", "--delta"),
        ("account --q 0.01 --sigma 1 --steps 10 --delta 0", "--delta"),
        (
            "account --q 0.01 --sigma 1 --steps 10 --delta nan",
            "--delta",
        ),
        ("account --q 0.01 --sigma 1 --delta 1e-5", "--steps"),
        ("account --sigma 1 --steps 10 --delta 1e-5", "--q"),
        ("account --q 0.01 --steps 10 --delta 1e-5", "--sigma"),
        (
            "account --q 0.01 --sigma 1 --steps 10 --epochs 3 --delta 1e-5",
            "--epochs",
        ),
        ("account --q 0.01 --sigma 1 --steps -3 --delta 1e-5", "-3"),
        (
            "account --q 0.01 --sigma 1 --steps 10 --delta 1e-5 --accountant nope",
            "nope",
        ),
        (
            "account --dataset-size 100 --batch-size 200 --sigma 1 --steps 10 --delta 1e-5",
            "--batch-size",
        ),
        (
            "account --q 0.01 --sigma 1 --steps 10 --delta 1e-5 --sampling without-replacement",
            "without-replacement",
        ),
        (
            "account --q 0.01 --sigma 1 --epochs inf --delta 1e-5",
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
            "account --q 0.5 --sigma 1 --steps 18446744073709551615 --delta 1e-5 --accountant pld",
            "grid",
        ),
        ("frobnicate", "frobnicate"),
    ];
    for (args, needle) in cases {
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
        "account --dataset-size 60000 --batch-size 256 --steps 1000 --sigma 1.1 --delta 1e-5 --sampling without-replacement --accountant all",
    );
    insta::assert_snapshot!("account_without_replacement", text);
}

#[test]
fn help_exits_zero() {
    let out = dp("--help");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("calibrate"));
}

/// `dp train` on a slice of MNIST when the data is present (CI sets DP_DATA_DIR).
#[test]
fn train_smoke_when_data_present() {
    if std::env::var_os("DP_DATA_DIR").is_none() {
        eprintln!("DP_DATA_DIR unset: skipping");
        return;
    }
    let text = stdout("train --limit 2048 --epochs 1 --batch-size 256 --physical-batch-size 100 --sigma 1.0 --clip 1.0 --lr 0.5 --momentum 0.9 --seed 3 --json");
    let summary: serde_json::Value =
        serde_json::from_str(text.lines().last().expect("summary")).expect("json");
    assert_eq!(summary["steps"], 8);
    assert!(summary["epsilon"].as_f64().expect("epsilon") > 0.0);
    assert!((0.0..=1.0).contains(&summary["test_accuracy"].as_f64().expect("accuracy")));
}

/// Without data and without network, `dp train` says where it looked, in one line, exit 2.
#[test]
fn train_without_data_says_where_it_looked() {
    let empty = std::env::temp_dir().join(format!("dp-cli-no-data-{}", std::process::id()));
    std::fs::create_dir_all(&empty).expect("temp dir");
    let out = Command::new(env!("CARGO_BIN_EXE_dp"))
        .args(["train", "--sigma", "1", "--epochs", "1"])
        .env("DP_DATA_DIR", &empty)
        .env("DP_CACHE_DIR", &empty)
        .env("DP_OFFLINE", "1")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("data not present")
            && stderr.contains(&empty.join("mnist").display().to_string()),
        "{stderr}"
    );
}

/// A `dp train` killed mid-run (SIGKILL, no chance to clean up) resumes from its last
/// checkpoint without losing the privacy budget it had spent.
#[test]
fn killed_training_resumes_with_its_ledger() {
    let Some(data) = std::env::var_os("DP_DATA_DIR") else {
        eprintln!("DP_DATA_DIR unset: skipping");
        return;
    };
    let dir = std::env::temp_dir().join(format!("dp-cli-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let args = |epochs: &str| {
        let dir = dir.display().to_string();
        vec![
            "train",
            "--limit",
            "2048",
            "--batch-size",
            "256",
            "--sigma",
            "1.0",
            "--lr",
            "0.1",
            "--seed",
            "9",
            "--checkpoint-dir",
            Box::leak(dir.into_boxed_str()),
            "--json",
            "--epochs",
            Box::leak(epochs.to_string().into_boxed_str()),
        ]
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_dp"))
        .args(args("200"))
        .env("DP_DATA_DIR", &data)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawns");
    let checkpoint = dir.join("checkpoint.json");
    let started = std::time::Instant::now();
    while !checkpoint.is_file() {
        assert!(started.elapsed().as_secs() < 120, "no checkpoint appeared");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    child.kill().expect("kill");
    let _ = child.wait();
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&checkpoint).expect("read"))
            .expect("valid json: writes are atomic");
    let steps = saved["steps"].as_u64().expect("steps");
    let ledger_steps: u64 = saved["ledger"]["entries"]
        .as_array()
        .expect("ledger")
        .iter()
        .map(|e| e["count"].as_u64().unwrap_or(0))
        .sum();
    assert!(
        steps >= 8 && ledger_steps == steps,
        "steps {steps}, ledger {ledger_steps}"
    );
    // Resume to a total a little beyond where it was killed.
    let target_epochs = (steps / 8 + 2).to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_dp"))
        .args(args(&target_epochs))
        .env("DP_DATA_DIR", &data)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("at step {steps}")), "{stderr}");
    let text = String::from_utf8_lossy(&out.stdout);
    let summary: serde_json::Value =
        serde_json::from_str(text.lines().last().expect("summary")).expect("json");
    assert_eq!(summary["steps"].as_u64(), Some((steps / 8 + 2) * 8));
    let _ = std::fs::remove_dir_all(&dir);
}
