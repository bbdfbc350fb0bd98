//! `cargo xtask bench transformer`: one DP-SGD step (ghost clipping through the DP
//! layers' taps, Gaussian noise, SGD update) against one non-private step (Candle's
//! backward of the summed loss, SGD update) on a pre-LN transformer encoder classifying
//! random token sequences, or with `--lm` on the language-model table's causal LM
//! ([`dp_papers::lm::model::LmModel`], next-token loss over the vocabulary); optionally
//! Opacus (ghost clipping) on the same architecture in the same sitting.

use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::{Device, Module, Tensor};
use candle_nn::VarMap;
use dp_mechanisms::NoiseSource;
use dp_models::nn::{self, loss, DpVarBuilder, NormMethod, Taps, Transformer, TransformerConfig};
use dp_models::ClipRule;
use dp_papers::lm::model::{LmModel, LmShape};

/// The benchmark's shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    pub layers: usize,
    pub width: usize,
    pub heads: usize,
    pub seq: usize,
    pub batch: usize,
    pub vocab: usize,
    /// The causal LM (sequences of `seq + 1` tokens, loss over the vocabulary) instead of
    /// the encoder classifier.
    pub lm: bool,
}

/// The network under test.
enum Net {
    /// Encoder, mean pooling, a 2-class head, one label per sequence.
    Classifier {
        model: Transformer,
        head: nn::Linear,
        labels: Tensor,
    },
    /// The language-model table's causal LM.
    Lm(LmModel),
}

struct Bench {
    taps: Taps,
    net: Net,
    ids: Tensor,
    lr: f64,
}

impl Bench {
    fn new(s: Shape, noise: &mut NoiseSource) -> Result<Self> {
        let (varmap, taps, device) = (VarMap::new(), Taps::new(), Device::Cpu);
        let vb = DpVarBuilder::from_varmap(&varmap, &taps, &device);
        let len = s.seq + usize::from(s.lm);
        let ids: Vec<u32> = (0..s.batch * len)
            .map(|_| noise.index_below(s.vocab) as u32)
            .collect();
        let ids = Tensor::from_vec(ids, (s.batch, len), &device)?;
        let net = if s.lm {
            let shape = LmShape {
                context: s.seq,
                width: s.width,
                heads: s.heads,
                layers: s.layers,
            };
            Net::Lm(LmModel::new(shape, s.vocab, &vb)?)
        } else {
            let config = TransformerConfig {
                vocab: s.vocab,
                context: s.seq,
                width: s.width,
                heads: s.heads,
                layers: s.layers,
                mlp_ratio: 4,
                causal: false,
            };
            let labels: Vec<u32> = (0..s.batch).map(|i| (i % 2) as u32).collect();
            Net::Classifier {
                model: Transformer::new(&config, vb.pp("encoder"))?,
                head: nn::linear(s.width, 2, vb.pp("head"))?,
                labels: Tensor::from_vec(labels, s.batch, &device)?,
            }
        };
        Ok(Bench {
            taps,
            net,
            ids,
            lr: 1e-3,
        })
    }

    fn losses(&self) -> dp_models::Result<Tensor> {
        Ok(match &self.net {
            Net::Classifier {
                model,
                head,
                labels,
            } => {
                let hidden = model.forward(&self.ids)?.mean(1)?;
                loss::cross_entropy(&head.forward(&hidden)?, labels, None)?
            }
            Net::Lm(lm) => lm.losses(&self.ids, &self.ids)?,
        })
    }

    /// Clipped sums, noise drawn on the host and copied, SGD on each parameter.
    fn private_step(&self, noise: &mut NoiseSource) -> Result<()> {
        let rule = ClipRule::Flat { max_grad_norm: 1.0 };
        let grads = self
            .taps
            .clipped_gradients(|| self.losses(), rule, NormMethod::Auto)?;
        let sums = grads
            .sum
            .tensors()
            .context("the DP layers keep one sum per tensor")?;
        for (param, (_, sum)) in self.taps.params().iter().zip(sums) {
            let mut z = vec![0f32; sum.elem_count()];
            noise.add_gaussian_f32(&mut z, 1.0);
            let noisy = (sum + Tensor::from_vec(z, sum.shape(), sum.device())?)?;
            let t = param.var.as_tensor();
            param.var.set(&(t - (noisy * self.lr)?)?)?;
        }
        Ok(())
    }

    /// Candle's backward of the summed loss, SGD on each parameter.
    fn plain_step(&self) -> Result<()> {
        let grads = self.losses()?.sum_all()?.backward()?;
        for param in self.taps.params() {
            let t = param.var.as_tensor();
            let g = grads.get(t).context("a parameter without a gradient")?;
            param.var.set(&(t - (g * self.lr)?)?)?;
        }
        Ok(())
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Interleaved private and non-private steps; returns (private, plain) samples/s.
fn measure(b: &Bench, s: Shape, steps: usize, noise: &mut NoiseSource) -> Result<(f64, f64)> {
    b.private_step(noise)?;
    b.plain_step()?;
    let (mut private, mut plain) = (Vec::new(), Vec::new());
    for _ in 0..steps {
        let start = Instant::now();
        b.private_step(noise)?;
        private.push(start.elapsed().as_secs_f64());
        let start = Instant::now();
        b.plain_step()?;
        plain.push(start.elapsed().as_secs_f64());
    }
    let (tp, tn) = (median(&mut private), median(&mut plain));
    println!(
        "private     {:>9.1} ms/step  {:>8.1} samples/s",
        tp * 1e3,
        s.batch as f64 / tp
    );
    println!(
        "non-private {:>9.1} ms/step  {:>8.1} samples/s",
        tn * 1e3,
        s.batch as f64 / tn
    );
    println!("DP step / non-private step: {:.3}", tp / tn);
    Ok((s.batch as f64 / tp, s.batch as f64 / tn))
}

pub fn run(s: Shape, steps: usize, compare_opacus: bool, record: bool) -> Result<()> {
    let mut noise = NoiseSource::seeded(0);
    let bench = Bench::new(s, &mut noise)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let params: usize = bench
        .taps
        .params()
        .iter()
        .map(|p| p.var.as_tensor().elem_count())
        .sum();
    println!(
        "transformer benchmark ({}): {} layers, d = {}, {} heads, sequence {}, batch {}, vocabulary {}, {params} parameters, {steps} interleaved steps each, {threads} threads",
        if s.lm { "causal LM, next-token loss" } else { "encoder classifier" },
        s.layers,
        s.width,
        s.heads,
        s.seq,
        s.batch,
        s.vocab
    );
    let before = measure(&bench, s, steps, &mut noise)?;
    let rss = super::peak_rss_mib();
    if let Some(rss) = rss {
        println!("peak RSS {rss:.0} MiB");
    }
    if !compare_opacus {
        return Ok(());
    }
    let opacus = opacus(s, steps, threads)?;
    let after = measure(&bench, s, steps, &mut noise)?;
    let ours = (before.0 + after.0) / 2.0;
    let Some(peer) = opacus.iter().find(|m| m.name.starts_with("opacus")) else {
        println!("no Opacus mode ran; no ratio");
        return Ok(());
    };
    println!(
        "same sitting: ours {ours:.1} samples/s (before {:.1}, after {:.1}) vs {} {:.1}: {:.2}x",
        before.0,
        after.0,
        peer.name,
        peer.rate,
        ours / peer.rate
    );
    if record {
        let default = Shape {
            layers: 4,
            width: 256,
            heads: 4,
            seq: 128,
            batch: 32,
            vocab: 8192,
            lm: false,
        };
        anyhow::ensure!(
            s == default,
            "--record keeps the README's comparison: the default shape only"
        );
        let ours = super::record::Ours {
            before,
            after,
            peak_fraction: None,
            rss_mib: rss,
        };
        let sitting = super::record::Sitting::now(ours, peer, &opacus);
        super::record::append("transformer", sitting)?;
    }
    Ok(())
}

/// Runs `scripts/opacus_transformer.py`; returns each mode that ran.
fn opacus(s: Shape, steps: usize, threads: usize) -> Result<Vec<super::peers::PeerMode>> {
    let args = [
        s.layers,
        s.width,
        s.heads,
        s.seq,
        s.batch,
        s.vocab,
        steps,
        threads,
        usize::from(s.lm),
    ];
    super::peers::python_modes("opacus_transformer.py", &args)
}
