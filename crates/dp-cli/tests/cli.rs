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

/// `dp train` on a slice of MNIST when the data is present (CI sets DP_DATA_DIR).
#[test]
fn train_smoke_when_data_present() {
    if std::env::var_os("DP_DATA_DIR").is_none() {
        eprintln!("DP_DATA_DIR unset: skipping");
        return;
    }
    let text = stdout("train --limit 2048 --epochs 1 --batch-size 256 --physical-batch-size 100 --noise-multiplier 1.0 --max-grad-norm 1.0 --lr 0.5 --momentum 0.9 --seed 3 --json");
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
        .args(["train", "--noise-multiplier", "1", "--epochs", "1"])
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

fn data_dir() -> Option<std::ffi::OsString> {
    let data = std::env::var_os("DP_DATA_DIR");
    if data.is_none() {
        eprintln!("DP_DATA_DIR unset: skipping");
    }
    data
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("dp-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// `dp train` with the data present, as a command line.
fn train(data: &std::ffi::OsStr, args: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dp"));
    command
        .arg("train")
        .args(args.split_whitespace())
        .env("DP_DATA_DIR", data);
    command
}

fn summary(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().expect("summary")).expect("json")
}

fn succeeds(mut command: Command) -> Output {
    let out = command.output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    out
}

fn fails_naming(mut command: Command, needle: &str) {
    let out = command.output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(needle), "{stderr} should name {needle}");
}

/// By default `dp train` prints only what ε covers; the training loss and the non-finite
/// count appear only when asked for, labelled as not covered by ε.
#[test]
fn train_prints_only_what_epsilon_covers() {
    let Some(data) = data_dir() else { return };
    let run = "--limit 512 --epochs 1 --batch-size 256 --noise-multiplier 1 --seed 1 --json";
    let out = train(&data, run).output().expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains("loss") && !text.contains("nonfinite"),
        "{text}"
    );
    let out = train(&data, &format!("{run} --show-non-private-stats"))
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("train_loss_not_covered_by_epsilon"), "{text}");
    assert!(
        text.contains("nonfinite_gradients_not_covered_by_epsilon"),
        "{text}"
    );
    let out = train(
        &data,
        "--limit 512 --epochs 1 --batch-size 256 --no-dp --seed 1",
    )
    .output()
    .expect("runs");
    assert!(String::from_utf8_lossy(&out.stdout).contains("epsilon unbounded (no DP)"));
}

/// Outputs and run lengths are checked before the first step, and the checkpoint
/// directory has one writer at a time.
#[test]
fn train_checks_its_outputs_before_spending_the_budget() {
    let Some(data) = data_dir() else { return };
    let dir = temp_dir("outputs");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let base = "--limit 512 --batch-size 256 --noise-multiplier 1 --seed 1";
    fails_naming(train(&data, &format!("{base} --epochs 1e300")), "--epochs");
    let weights = format!("{base} --epochs 1 --save-weights {}", dir.display());
    fails_naming(train(&data, &weights), "--save-weights");
    let missing = format!(
        "{base} --epochs 1 --save-weights {}/no/such/w.st",
        dir.display()
    );
    fails_naming(train(&data, &missing), "--save-weights");
    let ckpt = dir.join("run");
    let long = format!("{base} --epochs 100000 --checkpoint-dir {}", ckpt.display());
    let mut first = train(&data, &long)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawns");
    let started = std::time::Instant::now();
    while !ckpt.join("checkpoint.json").is_file() {
        assert!(started.elapsed().as_secs() < 120, "no checkpoint appeared");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    fails_naming(train(&data, &long), "in use by another process");
    first.kill().expect("kill");
    let _ = first.wait();
    let _ = std::fs::remove_dir_all(dir);
}

/// Weights trained without noise never resume into a private run (their ε is ∞), and a
/// private run never resumes without DP; a changed σ is refused unless asked for.
#[test]
fn train_refuses_a_resume_that_would_void_epsilon() {
    let Some(data) = data_dir() else { return };
    let dir = temp_dir("resume");
    let base = format!(
        "--limit 512 --batch-size 256 --epochs 1 --seed 1 --checkpoint-dir {}",
        dir.display()
    );
    succeeds(train(&data, &format!("{base} --no-dp")));
    fails_naming(
        train(&data, &format!("{base} --noise-multiplier 1")),
        "dp = non-private",
    );
    let _ = std::fs::remove_dir_all(&dir);
    succeeds(train(&data, &format!("{base} --noise-multiplier 1")));
    fails_naming(train(&data, &format!("{base} --no-dp")), "dp = private");
    fails_naming(
        train(&data, &format!("{base} --noise-multiplier 3")),
        "--allow-change noise-multiplier",
    );
    let more = base.replace("--epochs 1", "--epochs 2");
    let out = succeeds(train(
        &data,
        &format!("{more} --noise-multiplier 3 --allow-change noise-multiplier --json"),
    ));
    assert_eq!(summary(&out)["steps"], 4);
    fails_naming(
        train(&data, &format!("{base} --noise-multiplier 1")),
        "noise-multiplier",
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The audit's scenario: a shuffled run checkpointed mid-epoch (--epochs 1.5: 2,000
/// records, B 250, 8 steps an epoch, stopped at step 12) resumed with a smaller σ. The
/// epoch was charged at σ 2, so σ 0.5 for steps 12–15 would be released uncharged (ε
/// 7.08 reported where one σ 0.5 epoch alone costs 25.9): refused, naming the step and
/// the boundary; the same σ finishes the run.
#[test]
fn a_shuffled_resume_inside_an_epoch_cannot_lower_sigma() {
    let Some(data) = data_dir() else { return };
    let dir = temp_dir("shuffle-resume");
    let base = format!(
        "--limit 2000 --batch-size 250 --sampling shuffle --max-grad-norm 1 --seed 3 --checkpoint-dir {}",
        dir.display()
    );
    succeeds(train(
        &data,
        &format!("{base} --epochs 1.5 --noise-multiplier 2"),
    ));
    let resume = format!("{base} --epochs 2 --allow-change noise-multiplier");
    let out = train(&data, &format!("{resume} --noise-multiplier 0.5"))
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    for needle in [
        "step 12",
        "step 8",
        "step 16",
        "epoch boundary",
        "--noise-multiplier 2",
    ] {
        assert!(stderr.contains(needle), "{stderr} should name {needle}");
    }
    let out = succeeds(train(
        &data,
        &format!("{resume} --noise-multiplier 2 --json"),
    ));
    assert_eq!(summary(&out)["steps"], 16);
    let _ = std::fs::remove_dir_all(dir);
}

/// A `dp train` killed mid-run (SIGKILL, no chance to clean up) and started again with
/// the same command ends where the uninterrupted run ends: the same steps, the same ε,
/// and in --seed mode the same weights, bit for bit.
#[test]
fn killed_training_resumed_with_the_same_command_matches_an_uninterrupted_run() {
    let Some(data) = data_dir() else { return };
    let dir = temp_dir("kill");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let run = |name: &str, checkpoints: bool| {
        let mut args = format!(
            "--limit 1024 --batch-size 128 --noise-multiplier 1.0 --lr 0.1 --seed 9 --epochs 12 --json --save-weights {}",
            dir.join(name).display()
        );
        if checkpoints {
            args.push_str(&format!(" --checkpoint-dir {}", dir.join("ckpt").display()));
        }
        train(&data, &args)
    };
    let whole = run("whole.safetensors", false).output().expect("runs");
    assert!(
        whole.status.success(),
        "{}",
        String::from_utf8_lossy(&whole.stderr)
    );
    let mut child = run("resumed.safetensors", true)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawns");
    let checkpoint = dir.join("ckpt").join("checkpoint.json");
    let started = std::time::Instant::now();
    while !checkpoint.is_file() {
        assert!(started.elapsed().as_secs() < 120, "no checkpoint appeared");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().expect("kill");
    let _ = child.wait();
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&checkpoint).expect("read"))
            .expect("valid json: writes are atomic");
    let steps = saved["steps"].as_u64().expect("steps");
    assert!(steps < 96, "killed before the end: {steps} steps");
    let out = run("resumed.safetensors", true).output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("at step {steps}")), "{stderr}");
    let (a, b) = (summary(&whole), summary(&out));
    assert_eq!(a["steps"], 96);
    assert_eq!(
        (a["steps"].clone(), a["epsilon"].clone()),
        (b["steps"].clone(), b["epsilon"].clone())
    );
    let read = |name: &str| std::fs::read(dir.join(name)).expect("weights");
    assert!(
        read("whole.safetensors") == read("resumed.safetensors"),
        "bit-identical weights"
    );
    let _ = std::fs::remove_dir_all(dir);
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
