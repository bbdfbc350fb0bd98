//! `cargo xtask bench dp-sgd`: the DP-layer MNIST CNN's private step against its
//! non-private step, optionally Opacus on the same network in the same sitting.

use std::time::Instant;

use anyhow::{Context, Result};

/// One full step (forward, loss, backward with or without clipping, noise, SGD update)
/// on random data, as the engine does it, on either tier.
pub fn run(
    model: &str,
    batch: usize,
    steps: usize,
    tier: &str,
    json: bool,
    (compare_opacus, record): (bool, bool),
) -> Result<()> {
    use dp_mechanisms::NoiseSource;
    use dp_models::models::{mnist_cnn, Activation};
    use dp_models::nn::Executor;
    anyhow::ensure!(model == "mnist-cnn", "only --model mnist-cnn is available");
    anyhow::ensure!(batch > 0, "--batch-size must be > 0");
    let executor = match tier {
        "nn" => Executor::Fused,
        "nn-staged" => Executor::Staged,
        "nn-general" => Executor::General,
        other => anyhow::bail!("--tier must be nn, nn-staged or nn-general, not {other}"),
    };
    let mut noise = NoiseSource::seeded(0);
    let net = mnist_cnn(Activation::Tanh, &mut noise)?;
    anyhow::ensure!(
        net.executor() == Executor::Fused,
        "the DP-layer CNN should take the fused executor"
    );
    let flops = net
        .flops_per_sample()
        .context("the fused executor counts its FLOPs")?;
    let mut net = net.with_executor(executor)?;
    let mut measure = || time_steps(&mut net, model, batch, steps, tier, json, &mut noise);
    let before = measure()?;
    let peak_fraction = super::peak::report_flops(before.0, flops)?;
    let rss = super::peak_rss_mib();
    if !compare_opacus {
        return Ok(());
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let opacus = opacus_comparison(batch, steps, threads)?;
    let after = measure()?;
    // Ours before and after Opacus, so that drift in the sitting shows as a spread.
    let ours = (before.0 + after.0) / 2.0;
    let Some(best) = opacus
        .iter()
        .filter(|m| m.name.starts_with("opacus"))
        .max_by(|a, b| a.rate.total_cmp(&b.rate))
    else {
        println!("no Opacus mode ran; no ratio");
        return Ok(());
    };
    println!(
        "same sitting: ours {ours:.0} samples/s (before {:.0}, after {:.0}) vs Opacus best ({}) {:.0}: {:.2}x",
        before.0,
        after.0,
        best.name,
        best.rate,
        ours / best.rate
    );
    let pytorch = opacus.iter().find(|m| m.name.starts_with("pytorch"));
    if let Some(plain) = pytorch {
        println!(
            "ours (private) vs PyTorch without DP {:.0} samples/s: {:.2}x",
            plain.rate,
            ours / plain.rate
        );
    }
    if record {
        anyhow::ensure!(
            (model, batch, tier) == ("mnist-cnn", 256, "nn"),
            "--record keeps the README's comparison: the default model, batch and tier only"
        );
        let ours = super::record::Ours {
            before,
            after,
            peak_fraction: Some(peak_fraction),
            rss_mib: rss,
        };
        super::record::append("dp-sgd", super::record::Sitting::now(ours, best, &opacus))?;
    }
    Ok(())
}

/// Runs `scripts/opacus_dp_sgd.py`; returns each mode that ran.
fn opacus_comparison(
    batch: usize,
    steps: usize,
    threads: usize,
) -> Result<Vec<super::peers::PeerMode>> {
    super::peers::python_modes("opacus_dp_sgd.py", &[batch, steps, threads])
}

fn time_steps<M: dp_models::Classifier>(
    net: &mut M,
    model: &str,
    batch: usize,
    steps: usize,
    tier: &str,
    json: bool,
    noise: &mut dp_mechanisms::NoiseSource,
) -> Result<(f64, f64)> {
    use candle_core::{Device, Tensor};
    use dp_models::ClipRule;
    let x: Vec<f32> = (0..batch * 784).map(|_| noise.uniform() as f32).collect();
    let y: Vec<u32> = (0..batch).map(|i| (i % 10) as u32).collect();
    let x = Tensor::from_vec(x, (batch, 784), &Device::Cpu)?;
    let mut step = |private: bool| -> Result<f64> {
        let start = Instant::now();
        let rule = if private {
            ClipRule::Flat { max_grad_norm: 1.0 }
        } else {
            ClipRule::None
        };
        let mut g = net
            .clipped_cross_entropy_gradient(&x, &y, 10, rule)?
            .sum
            .into_flat()?;
        if private {
            noise.add_gaussian_f32(&mut g, 1.0);
        }
        let mut theta = net.parameters()?;
        theta
            .iter_mut()
            .zip(&g)
            .for_each(|(t, g)| *t -= 0.01 * g / batch as f32);
        net.set_parameters(&theta)?;
        Ok(start.elapsed().as_secs_f64())
    };
    for _ in 0..3 {
        step(true)?;
        step(false)?;
    }
    let (mut private, mut plain) = (Vec::new(), Vec::new());
    for _ in 0..steps {
        private.push(step(true)?);
        plain.push(step(false)?);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (tp, tn) = (median(&mut private), median(&mut plain));
    let (sp, sn) = (batch as f64 / tp, batch as f64 / tn);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("dp-sgd benchmark: {model}, {tier} tier, batch {batch}, {steps} interleaved steps each, {threads} threads");
    println!(
        "private     {:>8.2} ms/step  {:>9.0} samples/s",
        tp * 1e3,
        sp
    );
    println!(
        "non-private {:>8.2} ms/step  {:>9.0} samples/s",
        tn * 1e3,
        sn
    );
    println!(
        "overhead (non-private / private throughput): {:.3}",
        sn / sp
    );
    let rss = super::peak_rss_mib();
    if let Some(rss) = rss {
        println!("peak RSS {rss:.0} MiB");
    }
    if json {
        println!(
            "{}",
            serde_json::json!({"model": model, "tier": tier, "batch_size": batch, "steps": steps, "threads": threads,
                "private_samples_per_s": sp, "nonprivate_samples_per_s": sn, "overhead": sn / sp,
                "private_ms_per_step": tp * 1e3, "nonprivate_ms_per_step": tn * 1e3, "peak_rss_mib": rss})
        );
    }
    Ok((sp, sn))
}
