//! The peer libraries' side of a same-sitting comparison: a script under
//! `xtask/scripts/` run with `$DP_BENCH_PYTHON`, one JSON row per mode.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

/// One peer mode that ran: its name, samples/s and peak RSS (MiB) where reported.
pub(super) struct PeerMode {
    pub name: String,
    pub rate: f64,
    pub rss_mib: Option<f64>,
}

/// Runs `scripts/<script>` with `$DP_BENCH_PYTHON` (default `python3`) and integer
/// arguments; prints and returns each JSON row of a mode that ran (rows with an `error`
/// are printed as not run).
pub(super) fn python_modes(script: &str, args: &[usize]) -> Result<Vec<PeerMode>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(script);
    let python = std::env::var("DP_BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let output = Command::new(&python)
        .arg(&script)
        .args(args.iter().map(|n| n.to_string()))
        .output()
        .with_context(|| format!("running {python}"))?;
    anyhow::ensure!(
        output.status.success(),
        "{} failed ({python}): {}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
            .lines()
            .last()
            .unwrap_or("")
    );
    let mut modes = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let row: serde_json::Value = serde_json::from_str(line)?;
        let mode = row["mode"].as_str().unwrap_or("?").to_string();
        let Some(rate) = row["samples_per_s"].as_f64() else {
            println!("{mode:<22} did not run: {}", row["error"]);
            continue;
        };
        let rss_mib = row["peak_rss_mib"].as_f64();
        let rss = rss_mib.map_or(String::new(), |r| format!("  peak RSS {r:.0} MiB"));
        println!(
            "{mode:<22} {:>9.2} ms/step  {rate:>9.1} samples/s{rss}",
            row["ms_per_step"].as_f64().unwrap_or(f64::NAN)
        );
        modes.push(PeerMode {
            name: mode,
            rate,
            rss_mib,
        });
    }
    Ok(modes)
}
