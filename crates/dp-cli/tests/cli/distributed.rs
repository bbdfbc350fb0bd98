//! `dp train --distributed mpi` under `mpirun` (feature `mpi`, with the data present):
//! the single process's run on 2 and 3 ranks — the same steps, ε and accuracy, the
//! weights within 1e-5 of each tensor's largest entry —, a job whose rank is killed
//! resumed from rank 0's checkpoint on another number of ranks to the same result, and
//! a shuffled run.

use std::path::Path;
use std::process::Command;

use super::train::data_dir;

const RUN: &str = "train --model mnist-cnn --dataset mnist --limit 4000 --epochs 1 --batch-size 256 --noise-multiplier 1 --max-grad-norm 1 --seed 5 --json";

/// `launcher` (nothing, or mpirun) running `dp` with `run`.
fn command(launcher: &[&str], run: &str) -> Command {
    let mut args: Vec<String> = launcher.iter().map(|s| s.to_string()).collect();
    args.push(env!("CARGO_BIN_EXE_dp").into());
    args.extend(run.split_whitespace().map(String::from));
    let mut command = Command::new(&args[0]);
    command.args(&args[1..]);
    command
}

/// `mpirun` for `ranks` processes on this machine (as root in CI; more ranks than cores).
fn mpirun(ranks: &str) -> [&str; 5] {
    [
        "mpirun",
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        ranks,
    ]
}

/// The run's JSON summary, after `launcher` (nothing, or mpirun) ran `dp` with `extra`.
fn summary(launcher: &[&str], extra: &str) -> serde_json::Value {
    summary_of(launcher, &format!("{RUN} {extra}"))
}

/// The JSON summary of `launcher` running `dp` with `run`.
fn summary_of(launcher: &[&str], run: &str) -> serde_json::Value {
    let args = format!("{launcher:?} {run}");
    let out = command(launcher, run).output().expect("runs");
    assert!(
        out.status.success(),
        "{args}: {}",
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
    if data_dir().is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("dp-cli-mpi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let single = dir.join("single.st");
    let one = summary(&[], &format!("--save-weights {}", single.display()));
    for ranks in ["2", "3"] {
        let weights = dir.join(format!("ranks{ranks}.st"));
        let many = summary(
            &mpirun(ranks),
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

/// The pid of rank `rank` of the `mpirun` job `launcher` (its descendant `dp` process
/// whose environment names the rank), once it has started.
fn pid_of_rank(launcher: u32, rank: usize) -> Option<u32> {
    let wanted = format!("OMPI_COMM_WORLD_RANK={rank}");
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let exe = std::fs::read_link(entry.path().join("exe")).ok()?;
            let environ = std::fs::read(entry.path().join("environ")).ok()?;
            let ours = exe == Path::new(env!("CARGO_BIN_EXE_dp")) && descends(pid, launcher);
            let has_rank = environ.split(|&b| b == 0).any(|v| v == wanted.as_bytes());
            (ours && has_rank).then_some(pid)
        })
}

/// Whether `pid` is a descendant of `ancestor`.
fn descends(mut pid: u32, ancestor: u32) -> bool {
    while pid > 1 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        // The parent is the second field after the parenthesised command name.
        let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let Some(parent) = after_name
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
        else {
            return false;
        };
        if parent == ancestor {
            return true;
        }
        pid = parent;
    }
    false
}

/// SIGKILL of rank 1 after rank 0's first checkpoint ends the job with mpirun's error; the
/// checkpoint's ledger holds exactly its steps; resumed on 3 ranks, the run ends where the
/// uninterrupted single process does (steps, ε, accuracy; weights within 1e-5).
#[test]
fn a_killed_rank_ends_the_job_and_rank_0s_checkpoint_resumes_it() {
    if data_dir().is_none() {
        return;
    }
    let run = RUN.replace("--epochs 1", "--epochs 3");
    let dir = std::env::temp_dir().join(format!("dp-cli-mpi-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let (single, resumed) = (dir.join("single.st"), dir.join("resumed.st"));
    let one = summary_of(&[], &format!("{run} --save-weights {}", single.display()));
    let checkpoints = dir.join("checkpoints");
    let distributed = format!(
        "{run} --distributed mpi --checkpoint-dir {}",
        checkpoints.display()
    );
    let job = command(&mpirun("2"), &distributed)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mpirun");
    let checkpoint = checkpoints.join("checkpoint.json");
    let started = std::time::Instant::now();
    while !checkpoint.exists() {
        assert!(
            started.elapsed().as_secs() < 120,
            "no checkpoint was written"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let pid = pid_of_rank(job.id(), 1).expect("rank 1 is running");
    let killed = Command::new("kill").args(["-9", &pid.to_string()]).status();
    assert!(killed.expect("kill").success());
    let out = job.wait_with_output().expect("mpirun ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the job ended with an error");
    assert!(stderr.contains("signal 9"), "{stderr}");
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&checkpoint).expect("checkpoint")).expect("json");
    let charged: u64 = saved["ledger"]["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["count"].as_u64().expect("count"))
        .sum();
    let at = saved["steps"].as_u64().expect("steps");
    assert!(at > 0 && at < 48, "killed mid-run, at step {at}");
    assert_eq!(charged, at, "the ledger holds exactly the released steps");
    let again = summary_of(
        &mpirun("3"),
        &format!("{distributed} --save-weights {}", resumed.display()),
    );
    assert_eq!(again["resumed_at_step"], saved["steps"]);
    for field in ["steps", "epsilon", "delta", "test_accuracy"] {
        assert_eq!(again[field], one[field], "{field}");
    }
    let difference = weights_difference(&single, &resumed);
    assert!(difference <= 1e-5, "weights differ by {difference}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A shuffled run (one charge per epoch, rank 0's permutation) on 2 ranks is the single
/// process's.
#[test]
fn a_shuffled_distributed_run_is_the_single_process_run() {
    if data_dir().is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("dp-cli-mpi-shuffle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (single, ranks) = (dir.join("single.st"), dir.join("ranks.st"));
    let run = format!("{RUN} --sampling shuffle");
    let one = summary_of(&[], &format!("{run} --save-weights {}", single.display()));
    let two = summary_of(
        &mpirun("2"),
        &format!("{run} --distributed mpi --save-weights {}", ranks.display()),
    );
    for field in ["steps", "epsilon", "delta", "test_accuracy"] {
        assert_eq!(two[field], one[field], "{field}");
    }
    let difference = weights_difference(&single, &ranks);
    assert!(difference <= 1e-5, "weights differ by {difference}");
    let _ = std::fs::remove_dir_all(&dir);
}
