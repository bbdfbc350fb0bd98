//! `--jobs N`: the runs of every selected table spread over N worker processes.
//!
//! Each unit of work is one run label of one table (all its seeds), trained by a worker
//! that re-invokes this executable as `reproduce <paper> --only <table> --run <label>
//! --jobs 1` with one training thread, so that N workers fill N cores. Workers write the
//! run cache; the caller then assembles every table from it in one ordinary pass, so the
//! tables are those of `--jobs 1` (each run is bit-reproducible from its seed, and a
//! cached result is read back bit for bit). Units whose runs another unit already trains
//! (the same training in two tables has one run key) are not scheduled twice. Longest
//! first, by a cost estimate from the run's settings. A worker's output goes to
//! `<out>/<paper>/logs/<table>.<label>.log`.
//!
//! `--jobs mpi` spreads the same units over the ranks of an MPI job (feature `mpi`): every
//! rank lists them in the same order and trains every K-th, from its rank, one worker at a
//! time with its cores; the ranks then agree on failures (an all-reduce, which is also the
//! barrier) and rank 0 assembles the tables from the shared run cache.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::args::{Profile, ReproduceArgs};
use crate::table::load_paper;

/// One run label of one table: what one worker trains.
struct Unit {
    paper: String,
    table: String,
    label: String,
    /// Relative cost, for longest-first order.
    estimate: u64,
}

/// Every unit of the selected papers and tables, deduplicated by run key, longest first.
fn units(papers: &[&str], args: &ReproduceArgs) -> Result<Vec<Unit>> {
    let mut units = Vec::new();
    let mut scheduled: BTreeSet<String> = BTreeSet::new();
    for &paper in papers {
        let (tables, _) = load_paper(paper)?;
        let selected = tables
            .iter()
            .filter(|t| args.only.as_ref().is_none_or(|o| &t.heading.id == o));
        for table in selected {
            for unit in table.experiment.units(args, &mut scheduled)? {
                units.push(Unit {
                    paper: paper.to_string(),
                    table: table.heading.id.clone(),
                    label: unit.label,
                    estimate: unit.estimate,
                });
            }
        }
    }
    units.sort_by_key(|u| std::cmp::Reverse(u.estimate));
    Ok(units)
}

/// A file name from a run label: letters, digits, `-` and `.` kept, the rest `_`.
fn file_part(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Starts the worker process of `unit`, with `threads` training threads (else the
/// environment's default).
fn spawn(unit: &Unit, args: &ReproduceArgs, threads: Option<usize>) -> Result<(Child, PathBuf)> {
    let logs = args.out.join(&unit.paper).join("logs");
    std::fs::create_dir_all(&logs)?;
    let log_path = logs.join(format!("{}.{}.log", unit.table, file_part(&unit.label)));
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let profile = match args.profile {
        Profile::Smoke => "smoke",
        Profile::Full => "full",
    };
    let exe = this_executable()?;
    let mut command = Command::new(exe);
    if let Some(threads) = threads {
        command.env("RAYON_NUM_THREADS", threads.to_string());
    }
    let child = command
        .args([
            "reproduce",
            &unit.paper,
            "--only",
            &unit.table,
            "--run",
            &unit.label,
        ])
        .args(["--profile", profile, "--jobs", "1"])
        .arg("--seeds")
        .arg(args.seeds.to_string())
        .arg("--out")
        .arg(&args.out)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting the worker for {} {}", unit.table, unit.label))?;
    Ok((child, log_path))
}

/// Trains every run of the selected tables on `jobs` workers; returns once all have
/// finished, or an error naming every unit that failed and its log.
pub fn train_in_parallel(papers: &[&str], args: &ReproduceArgs, jobs: usize) -> Result<()> {
    let mut queue = units(papers, args)?;
    queue.reverse(); // pop() takes the longest first
    let total = queue.len();
    println!("Training {total} run(s) on {jobs} worker(s)");
    let (mut running, mut failed, mut done) = (Vec::new(), Vec::new(), 0);
    while !queue.is_empty() || !running.is_empty() {
        while running.len() < jobs {
            let Some(unit) = queue.pop() else { break };
            let (child, log) = spawn(&unit, args, Some(1))?;
            running.push((unit, child, log, Instant::now()));
        }
        std::thread::sleep(Duration::from_millis(20));
        let mut i = 0;
        while i < running.len() {
            let Some(status) = running[i].1.try_wait()? else {
                i += 1;
                continue;
            };
            let (unit, _, log, started) = running.swap_remove(i);
            done += 1;
            let wall = started.elapsed().as_secs_f64();
            let what = format!("{}/{} {}", unit.paper, unit.table, unit.label);
            if status.success() {
                println!("  [{done}/{total}] {what} — {wall:.0} s");
            } else {
                println!(
                    "  [{done}/{total}] {what} FAILED ({status}); see {}",
                    log.display()
                );
                failed.push(format!("{what} (log {})", log.display()));
            }
        }
    }
    if !failed.is_empty() {
        bail!("{} run(s) failed: {}", failed.len(), failed.join("; "));
    }
    Ok(())
}

/// `--jobs mpi`: trains this rank's share of the units (every K-th, longest first, from
/// its rank), one at a time; returns once every rank has finished, whether this is rank
/// 0 (which assembles the tables), or an error on every rank if any unit failed.
#[cfg(feature = "mpi")]
pub fn train_on_ranks(papers: &[&str], args: &ReproduceArgs) -> Result<bool> {
    use dp_optim::collective::{Collective, MpiWorld};
    let mut world = MpiWorld::init().context("--jobs mpi")?;
    let (rank, size) = (world.rank(), world.world_size());
    let units = units(papers, args)?;
    let total = units.len();
    if rank == 0 {
        println!("Training {total} run(s) on {size} MPI rank(s)");
    }
    let mut failed = 0usize;
    for unit in units.iter().skip(rank).step_by(size) {
        let started = Instant::now();
        let (mut child, log) = spawn(unit, args, None)?;
        let status = child.wait()?;
        let what = format!("{}/{} {}", unit.paper, unit.table, unit.label);
        let wall = started.elapsed().as_secs_f64();
        if status.success() {
            println!("  rank {rank}: {what} — {wall:.0} s");
        } else {
            println!(
                "  rank {rank}: {what} FAILED ({status}); see {}",
                log.display()
            );
            failed += 1;
        }
    }
    let mut failures = [failed as f32];
    world.all_reduce_sum(&mut failures)?;
    if failures[0] > 0.0 {
        bail!(
            "{} run(s) failed on the MPI job's ranks; see their logs",
            failures[0]
        );
    }
    Ok(rank == 0)
}

/// `--jobs mpi` without the `mpi` feature: an error saying how to build it.
#[cfg(not(feature = "mpi"))]
pub fn train_on_ranks(_papers: &[&str], _args: &ReproduceArgs) -> Result<bool> {
    bail!("--jobs mpi needs an xtask built with the mpi feature (MPI installed): mpirun -np K cargo run -p xtask --release --features mpi -- reproduce … --jobs mpi")
}

/// The running executable, for workers: on Linux `/proc/self/exe`, which still runs this
/// very binary when `cargo build` has replaced the file during a long reproduction (the
/// path `current_exe` returns then names a deleted file, and a rebuilt binary would be
/// another commit); elsewhere `current_exe`.
fn this_executable() -> Result<PathBuf> {
    if cfg!(target_os = "linux") && std::path::Path::new("/proc/self/exe").exists() {
        return Ok(PathBuf::from("/proc/self/exe"));
    }
    std::env::current_exe().context("finding this executable to start workers")
}
