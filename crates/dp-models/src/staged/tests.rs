//! The staged executor's internals: its direct backward against Candle's backward
//! through the probes, its CPU ops against Candle's own, its per-sample gradients against
//! a per-example loop, agreement with the fused tier, and its fail-closed check. (Through
//! `nn::ModuleClassifier`: tests/nn/executors.rs.)

use candle_core::{Device, Tensor, Var};
use dp_mechanisms::NoiseSource;

use super::tape::{Tape, TapeEntry};
use super::{DpLayer, Stage, StagedModel};
use crate::fused::TorchLayer;
use crate::models::{mlp, mnist_cnn, Activation, Network};
use crate::{nn, Classifier, ClipRule, PrivateModel};

fn random(noise: &mut NoiseSource, shape: &[usize], scale: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| ((2.0 * noise.uniform() - 1.0) * scale) as f32)
        .collect();
    Tensor::from_vec(v, shape, &Device::Cpu).expect("shape")
}

/// A fresh DP Linear layer with weight `w` (out, in) and bias `b` (out).
fn dense(w: Tensor, b: Tensor) -> crate::Result<nn::Linear> {
    let (out, inputs) = w.dims2()?;
    let vb =
        nn::DpVarBuilder::from_varmap(&candle_nn::VarMap::new(), &nn::Taps::new(), &Device::Cpu);
    let layer = nn::linear(inputs, out, vb)?;
    layer.weight().set(&w)?;
    layer.bias().expect("a bias").set(&b)?;
    Ok(layer)
}

/// The most a Linear's ghost norm (a rigorous upper bound, `nn::ghost`) may exceed the
/// exact one, relative: the rounding slack of the bound on these shapes.
const GHOST_SLACK: f32 = 5e-4;

/// The tolerance of clipped sums whose clip factors come from such bounds.
const CLIPPED_SLACK: f32 = GHOST_SLACK / 2.0 + 1e-5;

/// `got` is a squared norm at least `exact` (within f32 rounding) and above it by no more
/// than the slack.
fn within_the_ghost_bound(got: f32, exact: f32) -> bool {
    got >= exact * (1.0 - 1e-5) && got <= exact * (1.0 + GHOST_SLACK) + 1e-12
}

fn relative_error(a: &Tensor, b: &Tensor) -> f32 {
    let (a, b): (Vec<f32>, Vec<f32>) = (
        a.flatten_all().and_then(|t| t.to_vec1()).expect("a"),
        b.flatten_all().and_then(|t| t.to_vec1()).expect("b"),
    );
    let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-12);
    a.iter()
        .zip(&b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
        / scale
}

/// Two computations of one private backward agree within 1e-5: same batch size, losses,
/// per-example norms and clipped sums.
fn assert_same_gradients(
    a: &super::gradients::StagedGradients,
    b: &super::gradients::StagedGradients,
    what: &str,
) {
    assert_eq!(a.squared_norms.len(), b.squared_norms.len(), "{what}");
    assert_eq!(a.losses.len(), b.losses.len(), "{what}");
    assert_eq!(a.clipped_sums.len(), b.clipped_sums.len(), "{what}");
    for (p, q) in a.losses.iter().zip(&b.losses) {
        assert!(
            (p - q).abs() <= 1e-5 * q.abs().max(1.0),
            "{what}: loss {p} vs {q}"
        );
    }
    for (p, q) in a.squared_norms.iter().zip(&b.squared_norms) {
        assert!((p - q).abs() <= 1e-5 * q, "{what}: norm {p} vs {q}");
    }
    for (p, q) in a.clipped_sums.iter().zip(&b.clipped_sums) {
        assert!(relative_error(p, q) < 1e-5, "{what}: clipped sums differ");
    }
}

/// Materialised per-sample gradients agree within 1e-5.
fn assert_same_per_sample(a: &[Tensor], b: &[Tensor], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (p, q) in a.iter().zip(b) {
        assert!(
            relative_error(p, q) < 1e-5,
            "{what}: per-sample gradients differ"
        );
    }
}

/// The staged executor and the fused tier (same weights) give the same per-example losses,
/// squared norms and clipped sums, within 1e-5 relative.
fn assert_tiers_agree(
    fused: &Network,
    auto: &StagedModel,
    x: &Tensor,
    labels: &[u32],
    rule: ClipRule,
    what: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let a = auto.private_gradients(x, labels, rule)?;
    let f = fused.clipped_cross_entropy_gradient(x, labels, 10, rule)?;
    for (l, m) in a.losses.iter().zip(&f.losses) {
        assert!((l - m).abs() < 1e-5, "{what}: loss {l} vs {m}");
    }
    for (x, y) in a.squared_norms.iter().zip(&f.squared_norms) {
        assert!(within_the_ghost_bound(*x, *y), "{what}: norm {x} vs {y}");
    }
    // The network's θ is in name order: compare layer by layer.
    for (i, layer) in torch_layers(fused, &f.sum.to_flat()?)?.iter().enumerate() {
        let (w, b) = layer.to_tensors(&Device::Cpu)?;
        let (ew, eb) = (
            relative_error(&a.clipped_sums[2 * i], &w),
            relative_error(&a.clipped_sums[2 * i + 1], &b),
        );
        assert!(
            ew < CLIPPED_SLACK && eb < CLIPPED_SLACK,
            "{what}: layer {i} weight error {ew}, bias error {eb}"
        );
    }
    Ok(())
}

/// `flat` (in the network's θ order) as PyTorch layers in stack order: weight and bias
/// of each layer, the layers by their index in the `Sequential`.
fn torch_layers(net: &Network, flat: &[f32]) -> crate::Result<Vec<TorchLayer>> {
    let mut params = Vec::new();
    let mut start = 0;
    for p in net.taps().params() {
        let len = p.var.as_tensor().elem_count();
        let index: usize = p.owner.parse().expect("a Sequential index");
        params.push((
            index,
            p.name,
            p.var.dims().to_vec(),
            flat[start..start + len].to_vec(),
        ));
        start += len;
    }
    params.sort_by_key(|(index, ..)| *index);
    let mut layers = Vec::new();
    for pair in params.chunks(2) {
        let (weight, bias) = match pair {
            [a, b] if a.1.ends_with("weight") => (a, b),
            [a, b] => (b, a),
            _ => unreachable!("every layer has a weight and a bias"),
        };
        layers.push(TorchLayer {
            weight: weight.3.clone(),
            weight_shape: weight.2.clone(),
            bias: bias.3.clone(),
        });
    }
    Ok(layers)
}

/// The network's weights as PyTorch layers in stack order.
fn weights(net: &Network) -> crate::Result<Vec<TorchLayer>> {
    torch_layers(net, &net.parameters()?)
}

/// Gradients of one example's loss w.r.t. every var, by plain autograd (no probes).
fn per_example(model: &StagedModel, x: &Tensor, y: u32) -> Vec<Tensor> {
    let logits = model.forward(x).expect("forward");
    let lsm = candle_nn::ops::log_softmax(&logits, 1).expect("lsm");
    let loss = lsm
        .get(0)
        .and_then(|r| r.get(y as usize))
        .and_then(|l| l.neg())
        .expect("loss");
    let grads = loss.backward().expect("backward");
    model
        .vars()
        .iter()
        .map(|v| {
            grads
                .get(v.as_tensor())
                .cloned()
                .unwrap_or_else(|| v.as_tensor().zeros_like().expect("zeros"))
        })
        .collect()
}

/// The MNIST CNN of [`mnist_cnn`] as stages, from PyTorch-layout weights.
fn mnist_cnn_stages(activation: Activation, torch: &[TorchLayer]) -> StagedModel {
    let vb =
        nn::DpVarBuilder::from_varmap(&candle_nn::VarMap::new(), &nn::Taps::new(), &Device::Cpu);
    let conv = |stride, padding| candle_nn::Conv2dConfig {
        stride,
        padding,
        ..Default::default()
    };
    let conv1 = nn::conv2d(1, 16, 8, conv(2, 2), vb.pp("conv1")).expect("conv1");
    let conv2 = nn::conv2d(16, 32, 4, conv(2, 0), vb.pp("conv2")).expect("conv2");
    let (fc1, fc2) = (
        nn::linear(512, 32, vb.pp("fc1")).expect("fc1"),
        nn::linear(32, 10, vb.pp("fc2")).expect("fc2"),
    );
    let vars = [
        (conv1.weight(), conv1.bias()),
        (conv2.weight(), conv2.bias()),
        (fc1.weight(), fc1.bias()),
        (fc2.weight(), fc2.bias()),
    ];
    for ((weight, bias), layer) in vars.into_iter().zip(torch) {
        let (w, b) = layer.to_tensors(&Device::Cpu).expect("tensors");
        weight.set(&w).expect("weight");
        bias.expect("a bias").set(&b).expect("bias");
    }
    let act = || match activation {
        Activation::Tanh => Stage::Tanh,
        Activation::Relu => Stage::Relu,
    };
    let pool = || Stage::MaxPool {
        kernel: 2,
        stride: 1,
    };
    StagedModel::new(vec![
        Stage::Image {
            channels: 1,
            height: 28,
            width: 28,
        },
        Stage::Layer(Box::new(conv1)),
        act(),
        pool(),
        Stage::Layer(Box::new(conv2)),
        act(),
        pool(),
        Stage::Flatten,
        Stage::Layer(Box::new(fc1)),
        act(),
        Stage::Layer(Box::new(fc2)),
    ])
}

/// The MNIST CNN's per-sample gradients on the direct backward against each example's
/// own forward and backward; its norms and clipped sums against those gradients.
#[test]
fn the_mnist_cnn_matches_a_per_example_loop() -> Result<(), Box<dyn std::error::Error>> {
    let mut noise = NoiseSource::seeded(1);
    let torch = weights(&mnist_cnn(Activation::Tanh, &mut noise)?)?;
    let model = mnist_cnn_stages(Activation::Tanh, &torch);
    let x = random(&mut noise, &[3, 784], 1.0).affine(0.5, 0.5)?;
    let labels = [4u32, 0, 9];
    let psg = model.per_sample_gradients(&x, &labels)?;
    for (i, &label) in labels.iter().enumerate() {
        let want = per_example(&model, &x.narrow(0, i, 1)?, label);
        for (v, w) in want.iter().enumerate() {
            let got = psg[v].get(i)?;
            assert!(
                relative_error(&got, w) < 1e-5,
                "example {i}, var {v}: {}",
                relative_error(&got, w)
            );
        }
    }
    let clip = 0.3f32;
    let rule = ClipRule::Flat {
        max_grad_norm: f64::from(clip),
    };
    let out = model.private_gradients(&x, &labels, rule)?;
    for i in 0..3 {
        let sq: f32 = psg
            .iter()
            .map(|t| {
                t.get(i)
                    .and_then(|r| r.sqr()?.sum_all()?.to_scalar::<f32>())
                    .expect("sq")
            })
            .sum();
        assert!(
            within_the_ghost_bound(out.squared_norms[i], sq),
            "norm {i}: {} vs {sq}",
            out.squared_norms[i]
        );
    }
    for (v, sum) in out.clipped_sums.iter().enumerate() {
        let mut want = psg[v].get(0)?.zeros_like()?;
        for i in 0..3 {
            let c = (clip / (out.squared_norms[i].sqrt() + 1e-6)).min(1.0);
            want = (want + (psg[v].get(i)? * f64::from(c))?)?;
        }
        assert!(relative_error(sum, &want) < 1e-5, "clipped sum of var {v}");
    }
    Ok(())
}

/// The two tiers implement the same protocol: the same MLP gives the same per-sample
/// norms and clipped sums on both.
#[test]
fn the_staged_and_fused_executors_agree() -> Result<(), Box<dyn std::error::Error>> {
    let fused = mlp(6, &[5], 10, Activation::Tanh, &mut NoiseSource::seeded(2))?;
    let torch = weights(&fused)?;
    let linear = |i: usize| -> Result<Box<dyn DpLayer>, Box<dyn std::error::Error>> {
        let (w, b) = torch[i].to_tensors(&Device::Cpu)?;
        Ok(Box::new(dense(w, b)?))
    };
    let model = StagedModel::new(vec![
        Stage::Layer(linear(0)?),
        Stage::Tanh,
        Stage::Layer(linear(1)?),
    ]);
    let mut noise = NoiseSource::seeded(3);
    let x = random(&mut noise, &[9, 6], 1.0);
    let labels: Vec<u32> = (0..9).map(|i| i % 10).collect();
    for rule in [
        ClipRule::Flat { max_grad_norm: 0.2 },
        ClipRule::PerLayer { max_grad_norm: 0.2 },
        ClipRule::AutoS { gamma: 0.01 },
    ] {
        assert_tiers_agree(&fused, &model, &x, &labels, rule, &format!("mlp {rule:?}"))?;
        // Per-layer clipping bounds each layer of a single example's clipped gradient by
        // C/√L, hence the total by C.
        if let ClipRule::PerLayer { max_grad_norm } = rule {
            let one = model.private_gradients(&x.narrow(0, 0, 1)?, &labels[..1], rule)?;
            for layer in 0..2 {
                let sq: f32 = one.clipped_sums[2 * layer..2 * layer + 2]
                    .iter()
                    .map(|t| {
                        t.sqr()
                            .and_then(|t| t.sum_all())
                            .and_then(|t| t.to_scalar::<f32>())
                            .expect("sq")
                    })
                    .sum();
                assert!(
                    sq.sqrt() <= max_grad_norm as f32 / 2f32.sqrt() * 1.0001,
                    "layer {layer}: {}",
                    sq.sqrt()
                );
            }
        }
    }
    Ok(())
}

/// A layer whose clipping forgets one of its parameters makes the step fail.
#[test]
fn a_parameter_left_out_of_clipping_fails_the_step() -> Result<(), Box<dyn std::error::Error>> {
    struct ForgetsBias(nn::Linear);
    impl DpLayer for ForgetsBias {
        fn forward(&self, x: &Tensor, tape: Option<(&mut Tape, usize)>) -> crate::Result<Tensor> {
            self.0.forward(x, tape)
        }
        fn vars(&self) -> Vec<Var> {
            self.0.vars()
        }
        fn squared_norms(&self, e: &TapeEntry, g: &Tensor) -> crate::Result<Tensor> {
            self.0.squared_norms(e, g)
        }
        fn clipped_sum(&self, e: &TapeEntry, g: &Tensor, c: &Tensor) -> crate::Result<Vec<Tensor>> {
            Ok(self.0.clipped_sum(e, g, c)?.into_iter().take(1).collect())
        }
        fn per_sample_grads(&self, e: &TapeEntry, g: &Tensor) -> crate::Result<Vec<Tensor>> {
            self.0.per_sample_grads(e, g)
        }
    }
    let mut noise = NoiseSource::seeded(4);
    let layer = dense(
        random(&mut noise, &[10, 4], 0.5),
        random(&mut noise, &[10], 0.5),
    )?;
    let model = StagedModel::new(vec![Stage::Layer(Box::new(ForgetsBias(layer)))]);
    let x = random(&mut noise, &[3, 4], 1.0);
    let err = model
        .private_gradients(&x, &[1, 2, 3], ClipRule::Flat { max_grad_norm: 1.0 })
        .expect_err("must refuse");
    assert!(err.to_string().contains("refusing to step"), "{err}");
    Ok(())
}

/// Both tiers on the MNIST CNN (tanh and ReLU), same weights: same per-example norms and
/// clipped sums.
#[test]
fn both_executors_agree_on_the_mnist_cnn() -> Result<(), Box<dyn std::error::Error>> {
    for activation in [Activation::Tanh, Activation::Relu] {
        let mut noise = NoiseSource::seeded(31);
        let fused = mnist_cnn(activation, &mut noise)?;
        let auto = mnist_cnn_stages(activation, &weights(&fused)?);
        let x = random(&mut noise, &[6, 784], 1.0).affine(0.5, 0.5)?;
        let labels: Vec<u32> = vec![0, 3, 5, 7, 9, 1];
        let rule = ClipRule::Flat { max_grad_norm: 0.5 };
        assert_tiers_agree(
            &fused,
            &auto,
            &x,
            &labels,
            rule,
            &format!("mnist cnn {activation:?}"),
        )?;
    }
    Ok(())
}

/// The direct backward (each stage's CPU backward, no Candle graph) gives what Candle's
/// backward through the probes gives: losses, norms and clipped sums, under flat and
/// per-layer clipping, on both CNN variants.
#[test]
fn direct_backward_matches_candles_backward() -> Result<(), Box<dyn std::error::Error>> {
    for activation in [Activation::Tanh, Activation::Relu] {
        let mut noise = NoiseSource::seeded(33);
        let fused = mnist_cnn(activation, &mut noise)?;
        let direct = mnist_cnn_stages(activation, &weights(&fused)?);
        let candle = mnist_cnn_stages(activation, &weights(&fused)?).with_candle_backward();
        let x = random(&mut noise, &[7, 784], 1.0).affine(0.5, 0.5)?;
        let labels: Vec<u32> = vec![1, 3, 5, 7, 9, 0, 2];
        for rule in [
            ClipRule::Flat { max_grad_norm: 0.5 },
            ClipRule::PerLayer { max_grad_norm: 0.5 },
        ] {
            assert_same_gradients(
                &direct.private_gradients(&x, &labels, rule)?,
                &candle.private_gradients(&x, &labels, rule)?,
                &format!("{activation:?} {rule:?}"),
            );
        }
        assert_same_per_sample(
            &direct.per_sample_gradients(&x, &labels)?,
            &candle.per_sample_gradients(&x, &labels)?,
            &format!("{activation:?}"),
        );
    }
    Ok(())
}

/// Per-sample conv rows too large to keep (a limit of 2,000 floats: norms one sample at a
/// time, clipped sums recomputed sample by sample) give what the kept rows give.
#[test]
fn norms_and_sums_without_kept_rows_match() -> Result<(), Box<dyn std::error::Error>> {
    let mut noise = NoiseSource::seeded(34);
    let fused = mnist_cnn(Activation::Tanh, &mut noise)?;
    let kept = mnist_cnn_stages(Activation::Tanh, &weights(&fused)?);
    let recomputed =
        mnist_cnn_stages(Activation::Tanh, &weights(&fused)?).with_kept_rows_limit(2_000);
    let x = random(&mut noise, &[6, 784], 1.0).affine(0.5, 0.5)?;
    let labels: Vec<u32> = vec![9, 8, 7, 6, 5, 4];
    let rule = ClipRule::Flat { max_grad_norm: 0.5 };
    assert_same_gradients(
        &kept.private_gradients(&x, &labels, rule)?,
        &recomputed.private_gradients(&x, &labels, rule)?,
        "kept vs recomputed rows",
    );
    Ok(())
}

/// The CPU custom ops (unfold, conv and linear matmuls without weight gradients, max-pool,
/// tanh) give what Candle's own ops give (the CUDA path), on the MNIST CNN — here with
/// the batch split into CPU chunks of 2 (2 + 2 + 1 samples), against the whole batch.
#[test]
fn cpu_ops_match_candles_own_ops() -> Result<(), Box<dyn std::error::Error>> {
    for activation in [Activation::Tanh, Activation::Relu] {
        let mut noise = NoiseSource::seeded(32);
        let fused = mnist_cnn(activation, &mut noise)?;
        let fast = mnist_cnn_stages(activation, &weights(&fused)?).with_cpu_chunk(2)?;
        let portable = mnist_cnn_stages(activation, &weights(&fused)?).with_portable_ops();
        let x = random(&mut noise, &[5, 784], 1.0).affine(0.5, 0.5)?;
        let labels: Vec<u32> = vec![2, 4, 6, 8, 0];
        let rule = ClipRule::Flat { max_grad_norm: 0.5 };
        let (a, b) = (
            fast.private_gradients(&x, &labels, rule)?,
            portable.private_gradients(&x, &labels, rule)?,
        );
        assert_eq!(a.squared_norms.len(), 5);
        assert_same_gradients(&a, &b, &format!("{activation:?}"));
        assert_same_per_sample(
            &fast.per_sample_gradients(&x, &labels)?,
            &portable.per_sample_gradients(&x, &labels)?,
            &format!("{activation:?}"),
        );
    }
    Ok(())
}
