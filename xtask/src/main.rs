//! Workspace automation: `cargo xtask bench …` and `cargo xtask reproduce …`.

mod bench;
mod gpu_check;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc keeps freed blocks for reuse; with glibc every large intermediate of a DP step
/// is returned to the OS and page-faulted in again (measured in docs/training.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "cargo xtask",
    about = "Benchmarks and paper reproduction for the dp workspace"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Benchmarks (medians of repeated runs, in one process).
    Bench {
        #[command(subcommand)]
        suite: bench::Suite,
    },
    /// The DP layers on a CUDA device against the CPU (per-sample gradients of the same
    /// networks with the same weights) and the private backward's speed there. Build with
    /// `--features cuda`; `--device cpu` runs the checks without a GPU.
    GpuCheck {
        /// cuda or cpu.
        #[arg(long, default_value = "cuda")]
        device: String,
        /// Timed private backwards per model.
        #[arg(long, default_value_t = 10)]
        steps: usize,
    },
    /// Reproduce the papers' tables and compare them with the published numbers.
    Reproduce(dp_papers::ReproduceArgs),
}

/// mimalloc's `mi_option_purge_delay` (mimalloc.h v2: the 16th option).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps freed memory for reuse instead of returning it to the OS after 10 ms: a DP step
/// on a transformer allocates gigabytes of intermediates, and with purging on, a third of
/// its time went to the kernel zeroing pages faulted in again (`perf`, docs/training.md).
fn keep_freed_memory() {
    // SAFETY: mi_option_set only stores the value in mimalloc's option table; it has no
    // preconditions and is safe to call at any time from any thread.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1);
    }
}

fn main() -> ExitCode {
    keep_freed_memory();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench { suite } => bench::run(suite),
        Command::GpuCheck { device, steps } => gpu_check::run(&device, steps.max(1)),
        Command::Reproduce(args) => dp_papers::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
