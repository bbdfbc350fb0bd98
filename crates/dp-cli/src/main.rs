//! The `dp` command: privacy accounting and noise calibration for DP training.
//!
//! It only parses, calls the library and prints; every error becomes one line on stderr
//! and exit code 2 (a `dp train` stopped by SIGINT or SIGTERM: 128 + the signal, its
//! checkpoint written).

mod allocator;
mod args;
mod commands;
mod interrupt;
mod output;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    allocator::keep_freed_memory();
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            use clap::error::ErrorKind;
            if matches!(
                err.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) {
                return match write_stdout(&err.to_string()) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        output::diag(&format!("error: {e}"));
                        ExitCode::from(2)
                    }
                };
            }
            // clap's message (before the usage block) names the problem; make it one line.
            let text = err.render().to_string();
            let message = text
                .split("\n\nUsage")
                .next()
                .unwrap_or("error: invalid arguments");
            output::diag(&one_line(message));
            return ExitCode::from(2);
        }
    };
    match commands::run(cli).and_then(|text| write_stdout(&text)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            output::diag(&format!("error: {}", one_line(&format!("{err:#}"))));
            match err.downcast_ref::<interrupt::Interrupted>() {
                Some(stopped) => ExitCode::from(stopped.exit_code()),
                None => ExitCode::from(2),
            }
        }
    }
}

/// Writes the result. A closed pipe (`dp … | head`) ends quietly, as ripgrep does; any
/// other write error (`> /dev/full`) is an error line and exit code 2, never a panic.
fn write_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(anyhow::anyhow!("writing the output: {e}")),
        Ok(()) => Ok(()),
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
