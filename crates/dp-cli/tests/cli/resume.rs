//! Resumes: refused where they would void ε, equal to an uninterrupted run after a kill
//! or a signal, one line for every checkpoint a user can hand it.

use super::train::{data_dir, fails_naming, succeeds, summary, temp_dir, the_error_line, train};

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
    the_error_line(&stderr);
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
    let run = |name: &str, checkpoints: bool| seeded_run(&data, &dir, 9, name, checkpoints);
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
    checkpoint_steps_beyond(&checkpoint, 0);
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
    assert_ends_as_the_whole_run(&dir, &whole, &out);
    let _ = std::fs::remove_dir_all(dir);
}

/// `dp train` on 1,024 records for 96 steps in --seed mode, saving its weights to
/// `dir/name` (and checkpointing to `dir/ckpt` with `checkpoints`).
fn seeded_run(
    data: &std::ffi::OsStr,
    dir: &std::path::Path,
    seed: u64,
    name: &str,
    checkpoints: bool,
) -> std::process::Command {
    let mut args = format!(
        "--limit 1024 --batch-size 128 --noise-multiplier 1.0 --lr 0.1 --seed {seed} --epochs 12 --json --save-weights {}",
        dir.join(name).display()
    );
    if checkpoints {
        args.push_str(&format!(" --checkpoint-dir {}", dir.join("ckpt").display()));
    }
    train(data, &args)
}

/// A resumed run ended where the uninterrupted `whole` one did: its steps, its ε and
/// (`resumed.safetensors` against `whole.safetensors`) its weights, bit for bit.
fn assert_ends_as_the_whole_run(
    dir: &std::path::Path,
    whole: &std::process::Output,
    out: &std::process::Output,
) {
    let (a, b) = (summary(whole), summary(out));
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
}

/// The checkpoint's step count, once a checkpoint with more than `after` steps is there.
fn checkpoint_steps_beyond(file: &std::path::Path, after: u64) -> u64 {
    let started = std::time::Instant::now();
    loop {
        let steps = std::fs::read(file)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            .and_then(|saved| saved["steps"].as_u64());
        match steps {
            Some(steps) if steps > after => return steps,
            _ => assert!(started.elapsed().as_secs() < 120, "no checkpoint appeared"),
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Sends `signal` to a running `dp train` once its checkpoint is past `after` steps, and
/// returns where it stopped: exit code 128 + the signal, one line naming the signal, the
/// step and the checkpoint, which holds exactly that step.
#[cfg(unix)]
fn interrupt(
    mut command: std::process::Command,
    file: &std::path::Path,
    signal: &str,
    code: i32,
    after: u64,
) -> u64 {
    let child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawns");
    checkpoint_steps_beyond(file, after);
    let sent = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    let out = child.wait_with_output().expect("waits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(file).expect("read")).expect("json");
    let steps = saved["steps"].as_u64().expect("steps");
    let error = the_error_line(&stderr);
    let expected = format!("interrupted by SIG{signal} at step {steps}: the checkpoint");
    assert!(error.contains(&expected), "{stderr}");
    assert!(error.contains("run the same command to resume"), "{stderr}");
    steps
}

/// Ctrl-C (SIGINT) and a scheduler's SIGTERM stop `dp train` at the step in flight with
/// its checkpoint written (mid-epoch), and the same command resumes: a run stopped by
/// SIGTERM, resumed and stopped by SIGINT, then resumed to the end, ends with the
/// uninterrupted run's steps, ε and (in --seed mode) weights, bit for bit.
#[cfg(unix)]
#[test]
fn interrupted_training_resumes_to_the_uninterrupted_result() {
    let Some(data) = data_dir() else { return };
    let dir = temp_dir("signal");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let run = |name: &str, checkpoints: bool| seeded_run(&data, &dir, 5, name, checkpoints);
    let whole = succeeds(run("whole.safetensors", false));
    let file = dir.join("ckpt").join("checkpoint.json");
    let first = interrupt(run("resumed.safetensors", true), &file, "TERM", 143, 0);
    let second = interrupt(run("resumed.safetensors", true), &file, "INT", 130, first);
    assert!(first < second && second < 96, "{first} then {second}");
    assert!(
        !dir.join("resumed.safetensors").exists(),
        "an interrupted run saves no final weights"
    );
    let out = succeeds(run("resumed.safetensors", true));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("at step {second}")), "{stderr}");
    assert_ends_as_the_whole_run(&dir, &whole, &out);
    let _ = std::fs::remove_dir_all(dir);
}

/// Checkpoint directories `dp train` cannot use, each one line and exit 2 naming
/// --checkpoint-dir: one it may not write (sysfs refuses even root, which CI runs as;
/// a read-only mode where the tests do not run as root) and one holding another model's
/// run, whose message shows where the two architectures differ, not kilobytes of both.
#[test]
fn an_unusable_checkpoint_directory_is_one_line() {
    let Some(data) = data_dir() else { return };
    let base = "--limit 512 --batch-size 256 --epochs 1 --noise-multiplier 1 --seed 1";
    let one_line = |args: String, needles: &[&str]| {
        let out = train(&data, &args).output().expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        let error = the_error_line(&stderr);
        for needle in needles {
            assert!(error.contains(needle), "{stderr} should name {needle}");
        }
        error.chars().count()
    };
    for unwritable in ["/sys/kernel", "/sys/kernel/dp-cli-test"] {
        if std::path::Path::new("/sys/kernel").is_dir() {
            let args = format!("{base} --checkpoint-dir {unwritable}");
            one_line(
                args,
                &[&format!("--checkpoint-dir ({unwritable}) cannot be used")],
            );
        }
    }
    let dir = temp_dir("other-model");
    let ckpt = format!("{base} --checkpoint-dir {}", dir.display());
    succeeds(train(&data, &ckpt));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |m| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(m));
        mode(0o500).expect("chmod");
        let root = std::fs::File::create(dir.join("probe")).is_ok();
        if !root {
            one_line(ckpt.clone(), &["--checkpoint-dir", "cannot be used"]);
        }
        let _ = std::fs::remove_file(dir.join("probe"));
        mode(0o700).expect("chmod");
    }
    let length = one_line(
        format!("{ckpt} --model mnist-cnn-relu"),
        &["cannot resume", "model", "tanh", "relu"],
    );
    assert!(length < 400, "{length} characters");
    let _ = std::fs::remove_dir_all(dir);
}
