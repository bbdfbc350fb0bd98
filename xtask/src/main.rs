//! Workspace automation: `cargo xtask bench …` and `cargo xtask reproduce …`.

mod bench;

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
    /// Reproduce the papers' tables and compare them with the published numbers.
    Reproduce(dp_papers::ReproduceArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench { suite } => bench::run(suite),
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
