//! `dp train` with the data present: what it prints, what it checks before the first step.

use std::process::{Command, Output};

use super::stdout;

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

pub(crate) fn data_dir() -> Option<std::ffi::OsString> {
    let data = std::env::var_os("DP_DATA_DIR");
    if data.is_none() {
        eprintln!("DP_DATA_DIR unset: skipping");
    }
    data
}

pub(crate) fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("dp-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// `dp train` with the data present, as a command line.
pub(crate) fn train(data: &std::ffi::OsStr, args: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dp"));
    command
        .arg("train")
        .args(args.split_whitespace())
        .env("DP_DATA_DIR", data);
    command
}

pub(crate) fn summary(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().expect("summary")).expect("json")
}

pub(crate) fn succeeds(mut command: Command) -> Output {
    let out = command.output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    out
}

/// The one `error:` line of `stderr` (asserted to be exactly one).
pub(crate) fn the_error_line(stderr: &str) -> String {
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    errors[0].to_string()
}

pub(crate) fn fails_naming(mut command: Command, needle: &str) {
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

/// A disk that fills while the weights are written (a file-size limit, so writes fail
/// part-way as on a full disk) is one line naming --save-weights, its path and the OS
/// error once; no half-written file is left. A device path is refused before the first
/// step (the weights are renamed into place, which would replace the device).
#[cfg(unix)]
#[test]
fn a_full_disk_at_save_weights_is_one_line_naming_the_path() {
    let Some(data) = data_dir() else { return };
    let dir = temp_dir("full-disk");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let weights = dir.join("w.safetensors");
    let args = format!(
        "--limit 512 --batch-size 256 --epochs 1 --noise-multiplier 1 --seed 1 --save-weights {}",
        weights.display()
    );
    // SIGXFSZ ignored (inherited through exec), so the write fails with EFBIG instead.
    let out = Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 40; exec \"$0\" train \"$@\"")
        .arg(env!("CARGO_BIN_EXE_dp"))
        .args(args.split_whitespace())
        .env("DP_DATA_DIR", &data)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let error = the_error_line(&stderr);
    let named = format!(
        "--save-weights ({}) could not be written",
        weights.display()
    );
    assert!(error.contains(&named), "{stderr}");
    assert_eq!(error.matches("File too large").count(), 1, "{stderr}");
    let left: Vec<_> = std::fs::read_dir(&dir).expect("dir").collect();
    assert!(left.is_empty(), "nothing half-written is left: {left:?}");
    if std::path::Path::new("/dev/full").exists() {
        let device = args.replace(&weights.display().to_string(), "/dev/full");
        fails_naming(train(&data, &device), "is not a regular file");
        use std::os::unix::fs::FileTypeExt;
        let kind = std::fs::metadata("/dev/full")
            .expect("/dev/full")
            .file_type();
        assert!(kind.is_char_device(), "/dev/full is still the device");
    }
    let _ = std::fs::remove_dir_all(dir);
}
