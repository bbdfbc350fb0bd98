//! The progress bar of one training run (to stderr; cleared when the run ends).

use anyhow::Result;

/// A bar of `steps` steps labelled `label`.
pub fn run_bar(steps: u64, label: &str) -> Result<indicatif::ProgressBar> {
    let bar = indicatif::ProgressBar::new(steps);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "  {msg:32} [{bar:30}] {pos}/{len} steps, {elapsed} (eta {eta})",
        )?
        .progress_chars("=> "),
    );
    bar.set_message(label.to_string());
    Ok(bar)
}
