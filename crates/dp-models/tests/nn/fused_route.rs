//! A `Sequential` of DP layers that the fused executor runs trains on it through
//! `ModuleClassifier`, with no tier named: its clipped sums, norms and losses against a
//! per-example loop of Candle's own backward (1e-5), and against the general path; what
//! the executor does not run stays on the general path.

use std::collections::BTreeMap;

use candle_core::{Device, Module, Tensor, D};
use candle_nn::Conv2dConfig;
use dp_models::nn::{self, ModuleClassifier, Sequential};
use dp_models::{Classifier, ClipRule};

use super::check::{builder, random, relative_error, GHOST_SLACK};

fn conv(stride: usize, padding: usize) -> Conv2dConfig {
    Conv2dConfig {
        stride,
        padding,
        ..Default::default()
    }
}

/// A small CNN on 2 × 9 × 9 images: every step kind the executor runs.
fn small_cnn(relu: bool) -> (ModuleClassifier<Sequential>, usize) {
    let (varmap, taps, vb) = builder();
    let net = Sequential::images(2, 9, 9)
        .conv2d(nn::conv2d(2, 4, 3, conv(1, 1), vb.pp("c1")).expect("c1"));
    let net = if relu { net.relu() } else { net.tanh() };
    let net = net
        .max_pool2d(2, 1)
        .conv2d(nn::conv2d(4, 3, 2, conv(2, 0), vb.pp("c2")).expect("c2"))
        .tanh()
        .avg_pool2d(2, 2)
        .flatten()
        .linear(nn::linear(3 * 2 * 2, 6, vb.pp("fc1")).expect("fc1"))
        .relu()
        .linear(nn::linear(6, 5, vb.pp("fc2")).expect("fc2"));
    let theta = random(31, &[taps.num_params()], 0.6).to_vec1().expect("θ");
    taps.set_flat_parameters(&theta).expect("θ");
    let model = ModuleClassifier::new(net, &varmap, &taps, &Device::Cpu).expect("model");
    (model, 2 * 9 * 9)
}

/// Each example's gradient by parameter name, from its own forward and backward.
fn loop_gradients(
    model: &ModuleClassifier<Sequential>,
    x: &Tensor,
    labels: &[u32],
) -> Vec<BTreeMap<String, Vec<f32>>> {
    let params = model.taps().params();
    (0..labels.len())
        .map(|i| {
            let logits = model
                .module()
                .forward(&x.narrow(0, i, 1).expect("row"))
                .expect("forward");
            let y = Tensor::new(&labels[i..=i], &Device::Cpu).expect("label");
            let loss = candle_nn::loss::cross_entropy(&logits, &y).expect("loss");
            let grads = loss.backward().expect("backward");
            params
                .iter()
                .map(|p| {
                    let g = grads.get(p.var.as_tensor()).expect("a gradient");
                    let g = g.flatten_all().and_then(|g| g.to_vec1()).expect("host");
                    (p.name.clone(), g)
                })
                .collect()
        })
        .collect()
}

/// The loop's clipped sum in the taps' flat order (flat clipping at `c`).
fn loop_clipped_sum(reference: &[BTreeMap<String, Vec<f32>>], c: f32) -> (Vec<f32>, Vec<f32>) {
    let norms: Vec<f32> = reference
        .iter()
        .map(|g| g.values().flatten().map(|v| v * v).sum())
        .collect();
    let mut sum: Vec<f32> = Vec::new();
    for (g, sq) in reference.iter().zip(&norms) {
        let factor = (c / (sq.sqrt() + 1e-6)).min(1.0);
        let flat: Vec<f32> = g.values().flatten().map(|v| v * factor).collect();
        if sum.is_empty() {
            sum = flat;
        } else {
            sum.iter_mut().zip(flat).for_each(|(s, v)| *s += v);
        }
    }
    (sum, norms)
}

fn inputs(seed: u64, batch: usize, size: usize) -> (Tensor, Vec<u32>) {
    let x = random(seed, &[batch, size], 1.0);
    let labels = (0..batch as u32).map(|i| (i * 3) % 5).collect();
    (x, labels)
}

#[test]
fn a_sequential_the_executor_runs_is_fused_and_matches_a_per_example_loop() {
    for relu in [false, true] {
        let (model, size) = small_cnn(relu);
        assert!(
            model.is_fused(),
            "a Sequential of covered steps takes the fused path"
        );
        let (x, labels) = inputs(32, 7, size);
        let reference = loop_gradients(&model, &x, &labels);
        let (sums, norms) = loop_clipped_sum(&reference, 0.4);
        let got = model
            .clipped_cross_entropy_gradient(&x, &labels, 5, ClipRule::Flat { max_norm: 0.4 })
            .expect("fused");
        assert!(
            relative_error(&got.squared_norms, &norms) < 1e-5,
            "relu {relu}: norms"
        );
        assert!(
            relative_error(&got.sum, &sums) < 1e-5,
            "relu {relu}: clipped sum"
        );
        let logits = model.module().forward(&x).expect("forward");
        let expected = candle_nn::ops::log_softmax(&logits, D::Minus1).expect("log-softmax");
        let expected: Vec<Vec<f32>> = expected.to_vec2().expect("host");
        for (i, loss) in got.losses.iter().enumerate() {
            let want = -expected[i][labels[i] as usize];
            assert!((loss - want).abs() < 1e-5 * want.abs().max(1.0), "loss {i}");
        }
        let fused_logits = model.logits(&x).expect("logits");
        let plain: Vec<f32> = logits
            .flatten_all()
            .and_then(|l| l.to_vec1())
            .expect("host");
        assert!(relative_error(&fused_logits, &plain) < 1e-5, "logits");
    }
}

#[test]
fn the_fused_and_general_paths_give_the_same_clipped_sums() {
    let (fused, size) = small_cnn(false);
    let (x, labels) = inputs(33, 9, size);
    let general = {
        let (model, _) = small_cnn(false);
        model.without_fused_executor()
    };
    assert!(!general.is_fused());
    for rule in [
        ClipRule::Flat { max_norm: 0.3 },
        ClipRule::PerLayer { max_norm: 0.3 },
        ClipRule::Automatic { gamma: 0.01 },
        ClipRule::None,
    ] {
        let f = fused
            .clipped_cross_entropy_gradient(&x, &labels, 5, rule)
            .expect("fused");
        let g = general
            .clipped_cross_entropy_gradient(&x, &labels, 5, rule)
            .expect("general");
        assert!(
            relative_error(&f.losses, &g.losses) < 1e-5,
            "{rule:?} losses"
        );
        // The general path's ghost norms are upper bounds (src/nn/ghost.rs).
        let tolerance = GHOST_SLACK / 2.0 + 1e-5;
        assert!(relative_error(&g.sum, &f.sum) < tolerance, "{rule:?} sums");
    }
}

#[test]
fn a_flat_mlp_is_fused_and_an_empty_batch_is_zero() {
    let (varmap, taps, vb) = builder();
    let net = Sequential::new()
        .linear(nn::linear(6, 8, vb.pp("a")).expect("a"))
        .tanh()
        .linear(nn::linear(8, 3, vb.pp("b")).expect("b"));
    let model = ModuleClassifier::new(net, &varmap, &taps, &Device::Cpu).expect("model");
    assert!(model.is_fused());
    let (x, labels) = inputs(34, 5, 6);
    let labels: Vec<u32> = labels.iter().map(|l| l % 3).collect();
    let reference = loop_gradients(&model, &x, &labels);
    let (sums, _) = loop_clipped_sum(&reference, 0.2);
    let rule = ClipRule::Flat { max_norm: 0.2 };
    let got = model
        .clipped_cross_entropy_gradient(&x, &labels, 3, rule)
        .expect("fused");
    assert!(relative_error(&got.sum, &sums) < 1e-5);
    let empty = Tensor::zeros((0, 6), candle_core::DType::F32, &Device::Cpu).expect("empty");
    let none = model
        .clipped_cross_entropy_gradient(&empty, &[], 3, rule)
        .expect("empty");
    assert!(none.sum.iter().all(|v| *v == 0.0) && none.losses.is_empty());
}

/// What the executor does not run takes the general path: any other module as a step, a
/// layer without bias, a parameter registered outside the stack.
#[test]
fn what_the_executor_does_not_run_takes_the_general_path() {
    let cases: Vec<Box<dyn Fn() -> bool>> = vec![
        Box::new(|| {
            let (varmap, taps, vb) = builder();
            let net = Sequential::new()
                .linear(nn::linear(4, 3, vb.pp("a")).expect("a"))
                .module(candle_nn::Activation::Gelu);
            ModuleClassifier::new(net, &varmap, &taps, &Device::Cpu)
                .expect("m")
                .is_fused()
        }),
        Box::new(|| {
            let (varmap, taps, vb) = builder();
            let net = Sequential::new().linear(nn::linear_no_bias(4, 3, vb.pp("a")).expect("a"));
            ModuleClassifier::new(net, &varmap, &taps, &Device::Cpu)
                .expect("m")
                .is_fused()
        }),
        Box::new(|| {
            let (varmap, taps, vb) = builder();
            let net = Sequential::new().linear(nn::linear(4, 3, vb.pp("a")).expect("a"));
            let _unused = nn::linear(4, 3, vb.pp("b")).expect("b");
            ModuleClassifier::new(net, &varmap, &taps, &Device::Cpu)
                .expect("m")
                .is_fused()
        }),
    ];
    for (i, fused) in cases.iter().enumerate() {
        assert!(!fused(), "case {i} must take the general path");
    }
}
