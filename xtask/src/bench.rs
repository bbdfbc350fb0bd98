//! `cargo xtask bench accounting`: accountant speed on the MNIST DP-SGD setting.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Subcommand;
use dp_accounting::{Accountant, Conversion, DpEvent, OrderGrid, PldConfig, RdpConfig};

mod distributed;
mod dp_sgd;
mod peak;
mod peers;
mod record;
mod sa_dpsgd;
mod transformer;

#[derive(Debug, Subcommand)]
pub enum Suite {
    /// RDP (151 orders) and PLD (interval 1e-4) ε for q = 256/60000, σ = 1.1, 14062 steps.
    Accounting {
        /// Timed repetitions per case (the median is reported).
        #[arg(long, default_value_t = 9)]
        repeats: usize,
        /// Also time Google's dp_accounting (Python) on the same cases, if importable.
        #[arg(long)]
        compare_python: bool,
    },
    /// DP-SGD step throughput of the DP-layer CNN, private and non-private interleaved.
    DpSgd {
        /// The model (only mnist-cnn today).
        #[arg(long, default_value = "mnist-cnn")]
        model: String,
        /// Batch size.
        #[arg(long, default_value_t = 256)]
        batch_size: usize,
        /// Timed steps of each kind.
        #[arg(long, default_value_t = 30)]
        steps: usize,
        /// Tier: nn (the DP layers as a user writes them: `nn::Sequential`, which takes
        /// the fused executor on the CPU), nn-staged or nn-general (the same network on
        /// the staged executor or the general path of the taps).
        #[arg(long, default_value = "nn")]
        tier: String,
        /// End with one JSON object.
        #[arg(long)]
        json: bool,
        /// Also time Opacus on the same network, batch and threads, in the same sitting
        /// (ours, Opacus, ours again), with `$DP_BENCH_PYTHON` (default `python3`).
        #[arg(long)]
        compare_opacus: bool,
        /// Append the comparison to docs/bench/dp-sgd.json (with --compare-opacus).
        #[arg(long, requires = "compare_opacus")]
        record: bool,
    },
    /// A DP-SGD step (ghost clipping through the DP layers) against a non-private step on
    /// a pre-LN transformer encoder, random tokens, CPU.
    Transformer {
        /// Blocks.
        #[arg(long, default_value_t = 4)]
        layers: usize,
        /// Model width d.
        #[arg(long, default_value_t = 256)]
        width: usize,
        /// Attention heads.
        #[arg(long, default_value_t = 4)]
        heads: usize,
        /// Sequence length.
        #[arg(long, default_value_t = 128)]
        seq: usize,
        /// Batch size.
        #[arg(long, default_value_t = 32)]
        batch_size: usize,
        /// Vocabulary size.
        #[arg(long, default_value_t = 8192)]
        vocab: usize,
        /// Timed steps of each kind.
        #[arg(long, default_value_t = 5)]
        steps: usize,
        /// The language-model table's causal LM (LM head over the vocabulary, next-token
        /// loss) instead of the encoder classifier.
        #[arg(long)]
        lm: bool,
        /// Also time Opacus (ghost clipping) and PyTorch on the same architecture, in the
        /// same sitting, with `$DP_BENCH_PYTHON` (default `python3`).
        #[arg(long)]
        compare_opacus: bool,
        /// Append the comparison to docs/bench/transformer.json (with --compare-opacus, at
        /// the default shape).
        #[arg(long, requires = "compare_opacus")]
        record: bool,
    },
    /// Rewrites the README's speed paragraph from the recorded sittings (docs/bench/).
    Readme {
        /// Only check that the README matches the records.
        #[arg(long)]
        check: bool,
    },
    /// `dp train` as 1 rank × 2 threads against `mpirun -np 2` ranks × 1 thread (the same
    /// cores), and rank 0's collective traffic per step; builds `dp` with the `mpi` feature.
    Distributed {
        /// Alternating runs of each (the median is reported).
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// MNIST training records (one epoch).
        #[arg(long, default_value_t = 60000)]
        limit: usize,
    },
    /// An SA-DPSGD iteration against a DP-SGD step of the same engine and network (the
    /// MNIST CNN, SA-DPSGD's Table 1 settings, synthetic data), interleaved.
    SaDpsgd {
        /// Expected batch size.
        #[arg(long, default_value_t = 512)]
        batch_size: usize,
        /// Timed steps of each kind (the median is reported).
        #[arg(long, default_value_t = 20)]
        steps: usize,
    },
    /// Gaussian fill rate into a 10^6 buffer; exponential mechanism and top-k (k = 1%)
    /// over 10^6 scores.
    Mechanisms {
        /// Timed repetitions per case (the median is reported).
        #[arg(long, default_value_t = 9)]
        repeats: usize,
    },
}

const Q: f64 = 256.0 / 60000.0;
const SIGMA: f64 = 1.1;
const STEPS: u64 = 14062;
const DELTA: f64 = 1e-5;

pub fn run(suite: Suite) -> Result<()> {
    match suite {
        Suite::Accounting {
            repeats,
            compare_python,
        } => accounting(repeats.max(1), compare_python),
        Suite::Mechanisms { repeats } => mechanisms(repeats.max(1)),
        Suite::SaDpsgd { batch_size, steps } => sa_dpsgd::run(batch_size, steps.max(1)),
        Suite::Distributed { repeats, limit } => distributed::run(repeats.max(1), limit),
        Suite::Transformer {
            layers,
            width,
            heads,
            seq,
            batch_size,
            vocab,
            steps,
            lm,
            compare_opacus,
            record,
        } => transformer::run(
            transformer::Shape {
                layers,
                width,
                heads,
                seq,
                batch: batch_size,
                vocab,
                lm,
            },
            steps.max(1),
            compare_opacus,
            record,
        ),
        Suite::Readme { check } => record::readme(check),
        Suite::DpSgd {
            model,
            batch_size,
            steps,
            tier,
            json,
            compare_opacus,
            record,
        } => dp_sgd::run(
            &model,
            batch_size,
            steps.max(1),
            &tier,
            json,
            (compare_opacus, record),
        ),
    }
}

/// Median wall time of `repeats` runs of `f`, and its last result.
fn time_median(repeats: usize, mut f: impl FnMut() -> Result<f64>) -> Result<(f64, f64)> {
    let mut times = Vec::with_capacity(repeats);
    let mut value = f64::NAN;
    for _ in 0..repeats {
        let start = Instant::now();
        value = f()?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], value))
}

fn accounting(repeats: usize, compare_python: bool) -> Result<()> {
    let event = DpEvent::dp_sgd(Q, SIGMA, STEPS);
    let rdp_case = |orders: OrderGrid| {
        let event = event.clone();
        move || -> Result<f64> {
            let mut acc = RdpConfig {
                orders: orders.clone(),
                conversion: Conversion::Improved,
                ..RdpConfig::default()
            }
            .build()?;
            acc.compose(&event, 1)?;
            Ok(acc.epsilon(DELTA)?)
        }
    };
    let pld_case = || -> Result<f64> {
        let mut acc = PldConfig::default().build()?;
        acc.compose(&event, 1)?;
        Ok(acc.epsilon(DELTA)?)
    };
    println!("accounting benchmark: q = 256/60000, sigma = {SIGMA}, {STEPS} steps, delta = {DELTA}; median of {repeats}");
    println!("{:<34} {:>12} {:>12}", "case", "epsilon", "median");
    let rdp = time_median(repeats * 10, rdp_case(OrderGrid::Opacus))?;
    println!(
        "{:<34} {:>12.6} {:>9.3} ms",
        "rdp, Opacus orders (151)",
        rdp.1,
        rdp.0 * 1e3
    );
    let rdp156 = time_median(repeats * 10, rdp_case(OrderGrid::DpAccounting))?;
    println!(
        "{:<34} {:>12.6} {:>9.3} ms",
        "rdp, dp_accounting orders (156)",
        rdp156.1,
        rdp156.0 * 1e3
    );
    let pld = time_median(repeats, pld_case)?;
    println!(
        "{:<34} {:>12.6} {:>9.3} ms",
        "pld, interval 1e-4",
        pld.1,
        pld.0 * 1e3
    );
    if compare_python {
        python_comparison(repeats, rdp156, pld)?;
    }
    Ok(())
}

/// Runs `xtask/scripts/dp_accounting_reference.py` and prints speed ratios.
fn python_comparison(repeats: usize, rdp: (f64, f64), pld: (f64, f64)) -> Result<()> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/dp_accounting_reference.py");
    let output = Command::new("python3")
        .arg(&script)
        .arg(repeats.to_string())
        .output()
        .context("running python3")?;
    if !output.status.success() {
        println!(
            "dp_accounting (Python) not available: {}",
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
        return Ok(());
    }
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let row: serde_json::Value = serde_json::from_str(line)?;
        let (case, eps, secs) = (
            row["case"].as_str().unwrap_or("?"),
            row["epsilon"].as_f64().unwrap_or(f64::NAN),
            row["median_s"].as_f64().unwrap_or(f64::NAN),
        );
        let ours = if case == "pld" { pld } else { rdp };
        println!(
            "{:<34} {:>12.6} {:>9.3} ms   ours is {:.1}x faster, |d epsilon| = {:.1e}",
            format!("dp_accounting (Python) {case}"),
            eps,
            secs * 1e3,
            secs / ours.0,
            (eps - ours.1).abs()
        );
    }
    Ok(())
}

fn mechanisms(repeats: usize) -> Result<()> {
    use dp_mechanisms::{BudgetSplit, ExponentialMechanism, NoiseSource, TopK, TopKMethod};
    const N: usize = 1_000_000;
    let mut noise = NoiseSource::os_seeded()?;
    println!("mechanisms benchmark: OS-seeded ChaCha20; median of {repeats}");
    let mut buffer = vec![0.0f32; N];
    let (fill, _) = time_median(repeats, || {
        noise.add_gaussian_f32(&mut buffer, 1.0);
        Ok(0.0)
    })?;
    println!(
        "{:<44} {:>9.3} ms  ({:.1} M normals/s)",
        "gaussian add into 10^6 f32 buffer",
        fill * 1e3,
        N as f64 / fill / 1e6
    );
    let scores: Vec<f64> = (0..N).map(|i| ((i * 7919) % N) as f64 / N as f64).collect();
    // The floor for any exact selection: one read of every score (their maximum).
    let (floor, _) = time_median(repeats, || {
        Ok(scores
            .iter()
            .fold(f64::NEG_INFINITY, |m, &s| m.max(std::hint::black_box(s))))
    })?;
    println!(
        "{:<44} {:>9.3} ms",
        "floor: one pass over 10^6 scores (max)",
        floor * 1e3
    );
    let em = ExponentialMechanism::new(1.0, 1.0, false)?;
    let (em_time, _) = time_median(repeats, || Ok(em.select(&scores, &mut noise)? as f64))?;
    println!(
        "{:<44} {:>9.3} ms",
        "exponential mechanism over 10^6 scores",
        em_time * 1e3
    );
    for (method, name) in [
        (
            TopKMethod::OneShotGumbel,
            "one-shot Gumbel top-k, k = 10^4 of 10^6",
        ),
        (
            TopKMethod::WeightedDraws,
            "weighted-draws top-k, k = 10^4 of 10^6",
        ),
    ] {
        let top = TopK::new(1.0, 1.0, N / 100, false, method, BudgetSplit::Basic)?;
        let (top_time, _) =
            time_median(
                repeats,
                || Ok(top.select(&scores, &mut noise)?.len() as f64),
            )?;
        println!("{name:<44} {:>9.3} ms", top_time * 1e3);
    }
    // The exponential mechanism is the k = 1 case.
    let em_draw = TopK::new(
        1.0,
        1.0,
        1,
        false,
        TopKMethod::WeightedDraws,
        BudgetSplit::Basic,
    )?;
    let (draw_time, _) = time_median(repeats, || {
        Ok(em_draw.select(&scores, &mut noise)?[0] as f64)
    })?;
    println!(
        "{:<44} {:>9.3} ms",
        "exponential mechanism by one weighted draw",
        draw_time * 1e3
    );
    Ok(())
}

/// Peak resident memory of this process, from /proc (Linux), in MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
