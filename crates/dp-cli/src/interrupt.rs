//! SIGINT and SIGTERM during `dp train`: the step in flight finishes (its charge and its
//! release belong together), the checkpoint is written at that step, and the run stops
//! with exit code 128 + the signal. The same command resumes it; in `--seed` mode the
//! resumed run ends bit-identical to an uninterrupted one (tests/cli.rs). A second
//! signal ends the process at once, as an impatient Ctrl-C expects: the last checkpoint
//! written is whole (writes are atomic), so nothing is lost but the steps since it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use signal_hook::consts::{SIGINT, SIGTERM};

/// Which signal, if any, asked the run to stop.
pub struct Interrupt {
    received: Arc<AtomicUsize>,
}

impl Interrupt {
    /// Installs the handlers for SIGINT and SIGTERM.
    pub fn install() -> anyhow::Result<Self> {
        let received = Arc::new(AtomicUsize::new(0));
        let pending = Arc::new(std::sync::atomic::AtomicBool::new(false));
        for signal in [SIGINT, SIGTERM] {
            // Registered first, so it sees the flag as the earlier signal left it.
            signal_hook::flag::register_conditional_shutdown(
                signal,
                128 + signal,
                pending.clone(),
            )?;
            signal_hook::flag::register(signal, pending.clone())?;
            signal_hook::flag::register_usize(signal, received.clone(), signal as usize)?;
        }
        Ok(Interrupt { received })
    }

    /// The signal received since [`install`](Self::install), if any.
    pub fn signal(&self) -> Option<i32> {
        match self.received.load(Ordering::SeqCst) {
            0 => None,
            signal => Some(signal as i32),
        }
    }
}

/// A run stopped by a signal: one line, and the exit code the shell expects.
#[derive(Debug, thiserror::Error)]
#[error("interrupted by {name} at step {step}: {saved}", name = signal_name(*.signal), saved = saved_text(.checkpoint))]
pub struct Interrupted {
    pub signal: i32,
    pub step: u64,
    pub checkpoint: Option<PathBuf>,
}

impl Interrupted {
    /// 128 + the signal number (130 for SIGINT, 143 for SIGTERM).
    pub fn exit_code(&self) -> u8 {
        u8::try_from(128 + self.signal).unwrap_or(2)
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

fn saved_text(checkpoint: &Option<PathBuf>) -> String {
    match checkpoint {
        Some(file) => format!(
            "the checkpoint {} holds this step; run the same command to resume",
            file.display()
        ),
        None => "nothing was saved (no --checkpoint-dir)".into(),
    }
}
