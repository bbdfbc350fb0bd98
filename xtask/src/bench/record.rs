//! Same-sitting comparisons kept as data, so the README's speed figures cannot go stale:
//! `--record` appends the sitting to `docs/bench/<suite>.json`, and `cargo xtask bench
//! readme` writes the README's speed paragraph (between its `bench:begin`/`bench:end`
//! markers) from those files; a unit test fails when the README and the files disagree.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::peers::PeerMode;

/// One same-sitting comparison: ours before and after the peer, the peer in between.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Sitting {
    /// UTC date of the sitting.
    pub date: String,
    /// `git describe --always --dirty` of the tree the bench was built from.
    pub commit: String,
    /// CPU model and logical cores.
    pub machine: String,
    /// The command, as run.
    pub command: String,
    /// Our private samples/s before and after the peer.
    pub private: [f64; 2],
    /// Our non-private samples/s before and after the peer.
    pub non_private: [f64; 2],
    /// The peer mode compared against (Opacus's best mode, or Opacus ghost clipping).
    pub peer_mode: String,
    /// Its samples/s.
    pub peer: f64,
    /// PyTorch without DP, samples/s, where it ran.
    pub pytorch: Option<f64>,
    /// The private step's achieved fraction of the same run's GEMM peak (the CNN bench).
    pub peak_fraction: Option<f64>,
    /// Our peak RSS and the peer's, MiB.
    pub rss_mib: [Option<f64>; 2],
}

impl Sitting {
    /// Ours (the mean of before and after) ÷ the peer.
    pub fn ratio(&self) -> f64 {
        (self.private[0] + self.private[1]) / 2.0 / self.peer
    }

    /// Our DP step time ÷ our non-private step time, before and after the peer.
    pub fn dp_overheads(&self) -> [f64; 2] {
        [0, 1].map(|i| self.non_private[i] / self.private[i])
    }

    /// Our non-private throughput (mean) ÷ PyTorch's.
    pub fn non_private_vs_pytorch(&self) -> Option<f64> {
        let ours = (self.non_private[0] + self.non_private[1]) / 2.0;
        self.pytorch.map(|p| ours / p)
    }
}

/// Our side of a comparison: (samples/s private, non-private) before and after the peer,
/// the private step's share of the GEMM peak where measured, our peak RSS.
pub struct Ours {
    pub before: (f64, f64),
    pub after: (f64, f64),
    pub peak_fraction: Option<f64>,
    pub rss_mib: Option<f64>,
}

impl Sitting {
    /// This sitting's comparison of `ours` with `peer` (and PyTorch without DP, from
    /// `modes`, where it ran), with today's date, the tree's commit, the CPU and command.
    pub fn now(ours: Ours, peer: &PeerMode, modes: &[PeerMode]) -> Sitting {
        let (date, commit, machine, command) = context();
        Sitting {
            date,
            commit,
            machine,
            command,
            private: [ours.before.0, ours.after.0],
            non_private: [ours.before.1, ours.after.1],
            peer_mode: peer.name.replacen("opacus", "Opacus", 1),
            peer: peer.rate,
            pytorch: modes
                .iter()
                .find(|m| m.name.starts_with("pytorch"))
                .map(|m| m.rate),
            peak_fraction: ours.peak_fraction,
            rss_mib: [ours.rss_mib, peer.rss_mib],
        }
    }
}

/// The two recorded suites: the DP-layer CNN and the transformer.
pub const SUITES: [&str; 2] = ["dp-sgd", "transformer"];

/// The repository root (xtask's parent).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace")
        .to_path_buf()
}

fn records_path(root: &Path, suite: &str) -> PathBuf {
    root.join("docs")
        .join("bench")
        .join(format!("{suite}.json"))
}

/// Every recorded sitting of `suite`, oldest first (none if the file does not exist).
pub fn load(root: &Path, suite: &str) -> Result<Vec<Sitting>> {
    let path = records_path(root, suite);
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text = std::fs::read_to_string(&path)?;
    serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))
}

/// Appends `sitting` to `docs/bench/<suite>.json`.
pub fn append(suite: &str, sitting: Sitting) -> Result<()> {
    let root = root();
    let mut all = load(&root, suite)?;
    all.push(sitting);
    let path = records_path(&root, suite);
    std::fs::create_dir_all(path.parent().expect("docs/bench"))?;
    std::fs::write(&path, serde_json::to_string_pretty(&all)? + "\n")?;
    println!("recorded in {} ({} comparisons)", path.display(), all.len());
    Ok(())
}

/// The date, commit, machine and command of this sitting.
fn context() -> (String, String, String, String) {
    let run = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .current_dir(root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map_or_else(
                || "unknown".to_string(),
                |o| String::from_utf8_lossy(&o.stdout).trim().to_string(),
            )
    };
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let command = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
    (
        run("date", &["-u", "+%Y-%m-%d"]),
        run("git", &["describe", "--always", "--dirty"]),
        format!("{cpu}, {cores} logical cores"),
        format!("cargo xtask {command}"),
    )
}

/// The median of `v` (the mean of the middle two of an even count); NaN if empty.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The comparisons recorded on the latest one's CPU: speed ratios move with the CPU
/// (a sitting on another machine is a different experiment), so medians are taken there.
fn on_latest_cpu(sittings: &[Sitting]) -> Vec<Sitting> {
    let latest = sittings.last().expect("at least one sitting");
    sittings
        .iter()
        .filter(|s| s.machine == latest.machine)
        .cloned()
        .collect()
}

/// `median m, range a–b` of `values`, with `digits` decimals.
fn spread(values: &[f64], digits: usize, unit: &str) -> String {
    let (lo, hi) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    let f = |v: f64| format!("{v:.digits$}{unit}");
    format!(
        "median {}, range {}–{}",
        f(median(values.to_vec())),
        f(lo),
        f(hi)
    )
}

/// `**latest** (date; n recorded comparisons on this CPU: median m, range a–b)` of one
/// figure over the sittings on the latest one's CPU, with `digits` decimals.
fn summary(
    sittings: &[Sitting],
    figure: impl Fn(&Sitting) -> f64,
    digits: usize,
    unit: &str,
) -> String {
    let same_cpu = on_latest_cpu(sittings);
    let values: Vec<f64> = same_cpu.iter().map(&figure).collect();
    let latest = sittings.last().expect("at least one sitting");
    let head = format!("**{:.digits$}{unit}** ({}", figure(latest), latest.date);
    if values.len() == 1 {
        return head + ")";
    }
    format!(
        "{head}; {} recorded comparisons on this CPU: {})",
        values.len(),
        spread(&values, digits, unit)
    )
}

/// `x` rounded, with thousands separated by commas.
fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 {
        out.insert(0, '-');
    }
    out
}

/// The CNN's sentence from its sittings.
fn cnn_sentence(s: &[Sitting]) -> String {
    let latest = s.last().expect("at least one sitting");
    let mut text = format!(
        "the MNIST CNN written with the DP layers (`nn::Sequential`, which takes the fused \
         executor; batch 256), ours ÷ Opacus's best mode: {}; in the latest {} private \
         samples/s against {} {}",
        summary(s, Sitting::ratio, 2, "×"),
        thousands((latest.private[0] + latest.private[1]) / 2.0),
        latest.peer_mode,
        thousands(latest.peer)
    );
    if s.iter().all(|x| x.peak_fraction.is_some()) {
        let pct = |x: &Sitting| 100.0 * x.peak_fraction.unwrap_or(f64::NAN);
        text += &format!(
            "; the private step's share of the same run's GEMM peak: {}",
            summary(s, pct, 0, "%")
        );
    }
    text
}

/// The transformer's sentence from its sittings.
fn transformer_sentence(s: &[Sitting]) -> String {
    let latest = s.last().expect("at least one sitting");
    let [a, b] = latest.dp_overheads();
    let overheads: Vec<f64> = on_latest_cpu(s)
        .iter()
        .flat_map(Sitting::dp_overheads)
        .collect();
    let mut text = format!(
        "the transformer written with the DP layers (4 blocks, d 256, T 128, batch 32), \
         ours ÷ Opacus ghost clipping: {}; our DP step ÷ our non-private step {a:.2} / \
         {b:.2} in the latest (before / after the peer)",
        summary(s, Sitting::ratio, 2, "×"),
    );
    if overheads.len() > 2 {
        text += &format!(
            ", {} over the {} measurements on this CPU",
            spread(&overheads, 2, ""),
            overheads.len()
        );
    }
    if let Some(v) = latest.non_private_vs_pytorch() {
        text += &format!(", our non-private step {v:.2}× PyTorch's");
    }
    if let [Some(ours), Some(peer)] = latest.rss_mib {
        text += &format!(
            ", peak RSS {} against {} MiB",
            thousands(ours),
            thousands(peer)
        );
    }
    text
}

const BEGIN: &str = "<!-- bench:begin";
const END: &str = "<!-- bench:end -->";

/// The README's speed paragraph from the recorded sittings.
pub fn paragraph(root: &Path) -> Result<String> {
    let (cnn, tf) = (load(root, SUITES[0])?, load(root, SUITES[1])?);
    let mut lines = vec![format!(
        "{BEGIN}: generated by `cargo xtask bench readme` from docs/bench/*.json -->"
    )];
    lines.push(
        "Speed, each figure a same-sitting comparison with the peer on a 2-core machine \
         (`cargo xtask bench dp-sgd|transformer --compare-opacus --record`; every comparison, \
         with its commit, CPU and command, is kept in [`docs/bench/`](docs/bench/); medians \
         and ranges are over the comparisons recorded on the latest one's CPU):"
            .to_string(),
    );
    for (sittings, sentence) in [
        (&cnn, cnn_sentence as fn(&[Sitting]) -> String),
        (&tf, transformer_sentence),
    ] {
        if !sittings.is_empty() {
            lines.push(format!("- {}.", sentence(sittings)));
        }
    }
    lines.push(END.to_string());
    Ok(lines.join("\n"))
}

/// `readme` with its marked paragraph replaced by `generated`.
fn replaced(readme: &str, generated: &str) -> Result<String> {
    let start = readme
        .find(BEGIN)
        .context("README has no bench:begin marker")?;
    let end = readme[start..]
        .find(END)
        .map(|e| start + e + END.len())
        .context("README has no bench:end marker")?;
    Ok(format!("{}{generated}{}", &readme[..start], &readme[end..]))
}

/// `cargo xtask bench readme`: rewrites the README's speed paragraph, or with `check`
/// fails if it differs from the records.
pub fn readme(check: bool) -> Result<()> {
    let root = root();
    let path = root.join("README.md");
    let current = std::fs::read_to_string(&path)?;
    let updated = replaced(&current, &paragraph(&root)?)?;
    if check {
        anyhow::ensure!(
            updated == current,
            "README.md's speed paragraph differs from docs/bench/*.json: run `cargo xtask bench readme`"
        );
        println!("README.md's speed paragraph matches docs/bench/*.json");
    } else if updated != current {
        std::fs::write(&path, updated)?;
        println!("README.md's speed paragraph rewritten from docs/bench/*.json");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sitting(ratio_base: f64, date: &str) -> Sitting {
        Sitting {
            date: date.into(),
            commit: "abc1234".into(),
            machine: "CPU, 2 logical cores".into(),
            command: "cargo xtask bench transformer --compare-opacus --record".into(),
            private: [ratio_base * 10.0, ratio_base * 10.0],
            non_private: [12.0, 11.0],
            peer_mode: "opacus ghost".into(),
            peer: 10.0,
            pytorch: Some(23.0),
            peak_fraction: Some(0.25),
            rss_mib: [Some(1170.0), Some(1480.0)],
        }
    }

    /// The figures the paragraph quotes, from the sittings: the latest, the median and
    /// the range of the ratio, the overheads and the PyTorch ratio of the latest.
    #[test]
    fn the_paragraph_quotes_the_sittings() {
        let s = [
            sitting(1.1, "2026-12-01"),
            sitting(1.5, "2026-12-02"),
            sitting(1.2, "2026-12-05"),
        ];
        assert_eq!(s[2].ratio(), 1.2);
        let text = transformer_sentence(&s);
        assert!(
            text.contains("clipping: **1.20×** (2026-12-05; 3 recorded comparisons on this CPU: median 1.20×, range 1.10×–1.50×)"),
            "{text}"
        );
        assert!(text.contains("1.00 / 0.92 in the latest"), "{text}");
        assert!(
            text.contains("median 0.96, range 0.73–1.09 over the 6 measurements"),
            "{text}"
        );
        // A comparison on another CPU is left out of the medians, not of the latest.
        let mut other = s.clone();
        other[0].machine = "Other CPU, 2 logical cores".into();
        let text = transformer_sentence(&other);
        assert!(
            text.contains(
                "(2026-12-05; 2 recorded comparisons on this CPU: median 1.35×, range 1.20×–1.50×)"
            ),
            "{text}"
        );
        assert!(
            text.contains("our non-private step 0.50× PyTorch's"),
            "{text}"
        );
        let one = cnn_sentence(&s[..1]);
        assert!(
            one.contains("best mode: **1.10×** (2026-12-01); in the latest 11 "),
            "{one}"
        );
        assert!(one.contains("GEMM peak: **25%** (2026-12-01)"), "{one}");
        assert!(text.contains("peak RSS 1,170 against 1,480 MiB"), "{text}");
        assert_eq!(thousands(1234567.4), "1,234,567");
        assert_eq!(thousands(999.6), "1,000");
    }

    /// The README's paragraph is what the committed records give.
    #[test]
    fn the_readme_says_what_the_records_say() -> Result<()> {
        let root = root();
        let current = std::fs::read_to_string(root.join("README.md"))?;
        let updated = replaced(&current, &paragraph(&root)?)?;
        assert!(
            updated == current,
            "README.md's speed paragraph is stale: run `cargo xtask bench readme`"
        );
        Ok(())
    }
}
