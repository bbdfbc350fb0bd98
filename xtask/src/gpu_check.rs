//! `cargo xtask gpu-check`: the DP layers on a CUDA device (build with
//! `--features cuda`) against the CPU — per-sample gradients of the same networks with the
//! same weights — and DP-step throughput there. `--device cpu` runs the same checks with
//! the CPU as both sides (what CI and machines without a GPU can run).

use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::{Device, Module, Tensor};
use candle_nn::VarMap;
use dp_models::nn::{self, loss, DpVarBuilder, NormMethod, Taps, Transformer, TransformerConfig};
use dp_models::ClipRule;

/// Builds a network on a device.
type Build = fn(&Device) -> Result<Side>;

/// One network on one device: its variables, taps and per-example losses of a fixed batch.
struct Side {
    varmap: VarMap,
    taps: Taps,
    losses: Box<dyn Fn() -> dp_models::Result<Tensor>>,
}

/// A small causal LM with a tied head on `device`, on a fixed batch of tokens.
fn language_model(device: &Device) -> Result<Side> {
    let (varmap, taps) = (VarMap::new(), Taps::new());
    let vb = DpVarBuilder::from_varmap(&varmap, &taps, device);
    let config = TransformerConfig {
        vocab: 97,
        context: 32,
        width: 64,
        heads: 4,
        layers: 2,
        mlp_ratio: 4,
        causal: true,
    };
    let model = Transformer::new(&config, vb.pp("lm"))?;
    let head = nn::Linear::from_vars(model.token_embedding().embeddings().clone(), None, &taps)?;
    let ids: Vec<u32> = (0..8 * 32).map(|i| ((i * 37 + 11) % 97) as u32).collect();
    let ids = Tensor::from_vec(ids, (8, 32), device)?;
    let losses = Box::new(move || -> dp_models::Result<Tensor> {
        let logits = head.forward(&model.forward(&ids)?)?;
        Ok(loss::next_token_cross_entropy(&logits, &ids, None)?)
    });
    Ok(Side {
        varmap,
        taps,
        losses,
    })
}

/// A residual CNN block with GroupNorm on `device`, on a fixed batch of images.
fn residual_cnn(device: &Device) -> Result<Side> {
    let (varmap, taps) = (VarMap::new(), Taps::new());
    let vb = DpVarBuilder::from_varmap(&varmap, &taps, device);
    let cfg = candle_nn::Conv2dConfig {
        padding: 1,
        ..Default::default()
    };
    let stem = nn::conv2d(3, 8, 3, cfg, vb.pp("stem"))?;
    let norm = nn::group_norm(2, 8, 1e-5, vb.pp("norm"))?;
    let conv = nn::conv2d(8, 8, 3, cfg, vb.pp("conv"))?;
    let head = nn::linear(8, 10, vb.pp("head"))?;
    let x: Vec<f32> = (0..8 * 3 * 16 * 16)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let x = Tensor::from_vec(x, (8, 3, 16, 16), device)?;
    let y = Tensor::from_vec((0..8u32).collect::<Vec<_>>(), 8, device)?;
    let losses = Box::new(move || -> dp_models::Result<Tensor> {
        let h = norm.forward(&stem.forward(&x)?)?.relu()?;
        let h = (&h + conv.forward(&h)?)?.relu()?;
        let logits = head.forward(&h.mean(3)?.mean(2)?)?;
        Ok(loss::cross_entropy(&logits, &y, None)?)
    });
    Ok(Side {
        varmap,
        taps,
        losses,
    })
}

/// Copies every variable of `from` into the same-named variable of `to`.
fn copy_weights(from: &VarMap, to: &VarMap, device: &Device) -> Result<()> {
    let from = from
        .data()
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned VarMap"))?;
    let to = to
        .data()
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned VarMap"))?;
    for (name, var) in from.iter() {
        to.get(name)
            .context("a variable missing on the device")?
            .set(&var.as_tensor().to_device(device)?)?;
    }
    Ok(())
}

/// Max over parameters of max |device − cpu| / max |cpu| of the per-sample gradients.
fn agreement(cpu: &Side, dev: &Side) -> Result<f32> {
    let a = cpu.taps.per_sample_gradients(|| (cpu.losses)())?;
    let b = dev.taps.per_sample_gradients(|| (dev.losses)())?;
    let mut worst = 0.0f32;
    for ((name, a), (_, b)) in a.iter().zip(&b) {
        let (a, b) = (
            a.flatten_all()?.to_vec1::<f32>()?,
            b.to_device(&Device::Cpu)?.flatten_all()?.to_vec1::<f32>()?,
        );
        let scale = a.iter().fold(1e-12f32, |m, v| m.max(v.abs()));
        let err = a
            .iter()
            .zip(&b)
            .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
            / scale;
        anyhow::ensure!(
            err.is_finite(),
            "{name}: non-finite per-sample gradients on the device"
        );
        worst = worst.max(err);
    }
    Ok(worst)
}

/// Median seconds of a private backward (clipped sums, flat clipping) on `side`.
fn time_private(side: &Side, steps: usize) -> Result<f64> {
    let rule = ClipRule::Flat { max_grad_norm: 1.0 };
    let mut times = Vec::new();
    for i in 0..=steps {
        let start = Instant::now();
        // Returns once the norms and losses are on the host: the device has finished.
        side.taps
            .clipped_gradients(|| (side.losses)(), rule, NormMethod::Auto)?;
        if i > 0 {
            times.push(start.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

pub fn run(device: &str, steps: usize) -> Result<()> {
    let device = match device {
        "cpu" => Device::Cpu,
        "cuda" => Device::new_cuda(0)
            .context("no CUDA device (build xtask with --features cuda on a machine with a GPU)")?,
        other => anyhow::bail!("--device must be cuda or cpu, not {other}"),
    };
    println!("gpu-check on {device:?} against the CPU");
    let models: [(&str, Build); 2] = [
        ("causal LM, tied head", language_model),
        ("residual CNN + GroupNorm", residual_cnn),
    ];
    for (name, build) in models {
        let (cpu, dev) = (build(&Device::Cpu)?, build(&device)?);
        copy_weights(&cpu.varmap, &dev.varmap, &device)?;
        let err = agreement(&cpu, &dev)?;
        let seconds = time_private(&dev, steps)?;
        println!("{name:<26} per-sample gradients vs CPU: max relative error {err:.2e}; private backward {:.1} ms ({:.0} samples/s, batch 8)", seconds * 1e3, 8.0 / seconds);
        anyhow::ensure!(
            err < 1e-4,
            "{name}: the device disagrees with the CPU ({err:.2e})"
        );
    }
    Ok(())
}
