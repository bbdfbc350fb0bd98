//! The `dp` command: privacy accounting and noise calibration for DP training.
//!
//! It only parses, calls the library and prints; every error becomes one line on stderr
//! and exit code 2.

mod args;
mod commands;
mod output;

use std::process::ExitCode;

use clap::Parser;

/// mimalloc keeps freed blocks for reuse; with glibc every large intermediate of a DP step
/// is returned to the OS and page-faulted in again (docs/training.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            use clap::error::ErrorKind;
            if matches!(
                err.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) {
                print!("{err}");
                return ExitCode::SUCCESS;
            }
            // clap's message (before the usage block) names the problem; make it one line.
            let text = err.render().to_string();
            let message = text
                .split("\n\nUsage")
                .next()
                .unwrap_or("error: invalid arguments");
            eprintln!("{}", one_line(message));
            return ExitCode::from(2);
        }
    };
    match commands::run(cli) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {}", one_line(&format!("{err:#}")));
            ExitCode::from(2)
        }
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
