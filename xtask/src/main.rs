//! Workspace automation: `cargo xtask bench …` and `cargo xtask reproduce …`.

/// The same allocator policy as the `dp` binary (one file, both binaries).
#[path = "../../crates/dp-cli/src/allocator.rs"]
mod allocator;
mod bench;
mod gpu_check;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    /// The Wide paper's word2vec: ours beside Opacus, the update rules under DP noise,
    /// and sparse DP-SGD tuned on the validation split (docs/reproduction/wide.md).
    WideStudy(dp_papers::wide::study::StudyArgs),
}

fn main() -> ExitCode {
    allocator::keep_freed_memory();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench { suite } => bench::run(suite),
        Command::GpuCheck { device, steps } => gpu_check::run(&device, steps.max(1)),
        Command::Reproduce(args) => dp_papers::run(args),
        Command::WideStudy(args) => dp_papers::wide::study::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
