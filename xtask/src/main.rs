//! Workspace automation: `cargo xtask bench accounting`, and (from issue [4]) `cargo
//! xtask reproduce`.

mod bench;

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
    /// Reproduce the papers' tables (not built yet: issue [4]).
    Reproduce {
        /// Arguments for the future harness.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench { suite } => bench::run(suite),
        Command::Reproduce { .. } => Err(anyhow::anyhow!(
            "`cargo xtask reproduce` is not implemented yet (issue [4] builds the harness); \
             use `cargo run --release -p dp-cli -- account ...` for accounting"
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
