//! A `Sequential` of DP layers trains through `ModuleClassifier` on the fastest executor
//! that covers it, with no tier named: the fused and staged executors' clipped sums,
//! norms and losses against a per-example loop of Candle's own backward (1e-5) and
//! against each other and the general path; what an executor does not run falls to the
//! next.

use std::collections::BTreeMap;

use candle_core::{Device, Module, Tensor, D};
use candle_nn::Conv2dConfig;
use dp_models::nn::{self, Executor, ModuleClassifier, Sequential};
use dp_models::{Classifier, ClipRule};

use super::check::{builder, flat, one_sided_error, random, relative_error, GHOST_SLACK};

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
        assert_eq!(
            model.executor(),
            Executor::Fused,
            "a Sequential of covered steps takes the fused path"
        );
        let (x, labels) = inputs(32, 7, size);
        let reference = loop_gradients(&model, &x, &labels);
        let (sums, norms) = loop_clipped_sum(&reference, 0.4);
        let got = model
            .clipped_cross_entropy_gradient(&x, &labels, 5, ClipRule::Flat { max_grad_norm: 0.4 })
            .expect("fused");
        assert!(
            relative_error(&got.squared_norms, &norms) < 1e-5,
            "relu {relu}: norms"
        );
        assert!(
            relative_error(&flat(&got.sum), &sums) < 1e-5,
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
        model.with_executor(Executor::General).expect("general")
    };
    assert_eq!(general.executor(), Executor::General);
    for rule in [
        ClipRule::Flat { max_grad_norm: 0.3 },
        ClipRule::PerLayer { max_grad_norm: 0.3 },
        ClipRule::AutoS { gamma: 0.01 },
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
        assert!(
            relative_error(&flat(&g.sum), &flat(&f.sum)) < tolerance,
            "{rule:?} sums"
        );
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
    assert_eq!(model.executor(), Executor::Fused);
    let (x, labels) = inputs(34, 5, 6);
    let labels: Vec<u32> = labels.iter().map(|l| l % 3).collect();
    let reference = loop_gradients(&model, &x, &labels);
    let (sums, _) = loop_clipped_sum(&reference, 0.2);
    let rule = ClipRule::Flat { max_grad_norm: 0.2 };
    let got = model
        .clipped_cross_entropy_gradient(&x, &labels, 3, rule)
        .expect("fused");
    assert!(relative_error(&flat(&got.sum), &sums) < 1e-5);
    let empty = Tensor::zeros((0, 6), candle_core::DType::F32, &Device::Cpu).expect("empty");
    let none = model
        .clipped_cross_entropy_gradient(&empty, &[], 3, rule)
        .expect("empty");
    assert!(flat(&none.sum).iter().all(|v| *v == 0.0) && none.losses.is_empty());
}

/// A CNN of every step the staged executor runs, on 2 × 9 × 9 images; with `bias` false
/// its first Linear has none, which the fused executor does not run.
fn staged_cnn(bias: bool) -> (ModuleClassifier<Sequential>, usize) {
    let (varmap, taps, vb) = builder();
    let fc1 = if bias {
        nn::linear(3 * 4 * 4, 6, vb.pp("fc1"))
    } else {
        nn::linear_no_bias(3 * 4 * 4, 6, vb.pp("fc1"))
    };
    let net = Sequential::images(2, 9, 9)
        .conv2d(nn::conv2d(2, 4, 3, conv(1, 1), vb.pp("c1")).expect("c1"))
        .tanh()
        .max_pool2d(2, 1)
        .conv2d(nn::conv2d(4, 3, 2, conv(2, 0), vb.pp("c2")).expect("c2"))
        .relu()
        .flatten()
        .linear(fc1.expect("fc1"))
        .tanh()
        .linear(nn::linear(6, 5, vb.pp("fc2")).expect("fc2"));
    let theta = random(35, &[taps.num_params()], 0.6).to_vec1().expect("θ");
    taps.set_flat_parameters(&theta).expect("θ");
    let model = ModuleClassifier::new(net, &varmap, &taps, &Device::Cpu).expect("model");
    (model, 2 * 9 * 9)
}

#[test]
fn a_sequential_the_fused_executor_skips_is_staged_and_matches_a_per_example_loop() {
    let (model, size) = staged_cnn(false);
    assert_eq!(model.executor(), Executor::Staged, "layers without bias");
    let (x, labels) = inputs(36, 7, size);
    let reference = loop_gradients(&model, &x, &labels);
    let (sums, norms) = loop_clipped_sum(&reference, 0.4);
    let got = model
        .clipped_cross_entropy_gradient(&x, &labels, 5, ClipRule::Flat { max_grad_norm: 0.4 })
        .expect("staged");
    assert!(relative_error(&got.squared_norms, &norms) < 1e-5, "norms");
    assert!(relative_error(&flat(&got.sum), &sums) < 1e-5, "clipped sum");
    let plain: Vec<f32> = model
        .module()
        .forward(&x)
        .and_then(|l| l.flatten_all()?.to_vec1())
        .expect("forward");
    assert!(relative_error(&model.logits(&x).expect("logits"), &plain) < 1e-5);
}

/// On a network all three cover, the executors give the same losses, norms and clipped
/// sums under every clip rule — also after the weights change under them.
#[test]
fn every_executor_gives_the_same_clipped_gradient() {
    use dp_models::PrivateModel;
    let (x, labels) = inputs(37, 9, 2 * 9 * 9);
    let mut models: Vec<ModuleClassifier<Sequential>> =
        [Executor::Fused, Executor::Staged, Executor::General]
            .into_iter()
            .map(|e| staged_cnn(true).0.with_executor(e).expect("covered"))
            .collect();
    assert_eq!(
        models[0].executor(),
        Executor::Fused,
        "the fastest by default"
    );
    for round in 0..2 {
        for rule in [
            ClipRule::Flat { max_grad_norm: 0.3 },
            ClipRule::PerLayer { max_grad_norm: 0.3 },
            ClipRule::AutoS { gamma: 0.01 },
        ] {
            let got: Vec<_> = models
                .iter()
                .map(|m| {
                    m.clipped_cross_entropy_gradient(&x, &labels, 5, rule)
                        .expect("gradient")
                })
                .collect();
            let what = format!("round {round} {rule:?}");
            let (fused, staged, general) = (&got[0], &got[1], &got[2]);
            assert!(
                relative_error(&staged.losses, &fused.losses) < 1e-5,
                "{what}"
            );
            // The staged and general executors' ghost norms are rigorous upper bounds
            // (src/nn/ghost.rs): never below the fused executor's exact norms, above by
            // the rounding slack only; clip factors differ by at most half of it.
            for (name, other) in [("staged", staged), ("general", general)] {
                let (below, above) =
                    one_sided_error(&other.squared_norms, &fused.squared_norms, 1e-12);
                assert!(
                    below < 1e-5 && above < GHOST_SLACK,
                    "{what} {name} norms: {below} below, {above} above"
                );
                let tolerance = GHOST_SLACK / 2.0 + 1e-5;
                assert!(
                    relative_error(&flat(&other.sum), &flat(&fused.sum)) < tolerance,
                    "{what} {name}"
                );
            }
        }
        let theta: Vec<f32> = models[0]
            .parameters()
            .expect("θ")
            .iter()
            .map(|v| v * 0.5 + 0.01)
            .collect();
        for model in &mut models {
            model.set_parameters(&theta).expect("θ");
        }
    }
}

/// A label outside the classes, or a label count that does not match the batch, is a
/// typed error on every executor — never an index panic.
#[test]
fn bad_labels_are_errors_on_every_executor() {
    let (x, _) = inputs(38, 3, 2 * 9 * 9);
    for executor in [Executor::Fused, Executor::Staged, Executor::General] {
        let model = staged_cnn(true).0.with_executor(executor).expect("covered");
        for labels in [vec![0, 5, 1], vec![0, 1]] {
            let rule = ClipRule::Flat { max_grad_norm: 0.5 };
            assert!(
                model
                    .clipped_cross_entropy_gradient(&x, &labels, 5, rule)
                    .is_err(),
                "{executor:?} {labels:?}"
            );
        }
    }
}

/// What an executor does not run falls to the next: any other module as a step, a
/// parameter registered outside the stack, an embedding take the general path; a layer
/// without bias the staged one. Asking for an executor that does not cover the network
/// is an error.
#[test]
fn what_an_executor_does_not_run_falls_to_the_next() {
    let executor = |net: Sequential, varmap: &candle_nn::VarMap, taps: &nn::Taps| {
        ModuleClassifier::new(net, varmap, taps, &Device::Cpu)
            .expect("m")
            .executor()
    };
    let (varmap, taps, vb) = builder();
    let net = Sequential::new()
        .linear(nn::linear(4, 3, vb.pp("a")).expect("a"))
        .module(candle_nn::Activation::Gelu);
    assert_eq!(executor(net, &varmap, &taps), Executor::General);
    let (varmap, taps, vb) = builder();
    let net = Sequential::new().linear(nn::linear_no_bias(4, 3, vb.pp("a")).expect("a"));
    assert_eq!(executor(net, &varmap, &taps), Executor::Staged);
    let (varmap, taps, vb) = builder();
    let net = Sequential::new().linear(nn::linear(4, 3, vb.pp("a")).expect("a"));
    let _unused = nn::linear(4, 3, vb.pp("b")).expect("b");
    assert_eq!(executor(net, &varmap, &taps), Executor::General);
    let (varmap, taps, vb) = builder();
    let net = Sequential::new()
        .embedding(nn::embedding(10, 4, vb.pp("e")).expect("e"))
        .mean_over_time()
        .linear(nn::linear(4, 3, vb.pp("a")).expect("a"));
    let model = ModuleClassifier::new(net, &varmap, &taps, &Device::Cpu).expect("m");
    assert_eq!(model.executor(), Executor::General);
    for refused in [Executor::Fused, Executor::Staged] {
        let (varmap, taps, vb) = builder();
        let net = Sequential::new()
            .linear(nn::linear(4, 3, vb.pp("a")).expect("a"))
            .module(candle_nn::Activation::Gelu);
        let err = match ModuleClassifier::new(net, &varmap, &taps, &Device::Cpu)
            .expect("m")
            .with_executor(refused)
        {
            Ok(_) => panic!("{refused:?} must be refused"),
            Err(err) => err.to_string(),
        };
        assert!(err.contains("does not cover"), "{err}");
    }
    drop(model);
}

/// The GDP paper's IMDB model (embedding, mean over the sequence, two dense layers) is a
/// `Sequential` of 160,306 parameters on the general path, its clipped gradient that of a
/// per-example loop (within the ghost bound's slack).
#[test]
fn the_imdb_model_has_160306_parameters_and_matches_a_per_example_loop() {
    use dp_mechanisms::NoiseSource;
    use dp_models::models::imdb_embedding_average;
    use dp_models::PrivateModel;
    let mut noise = NoiseSource::seeded(11);
    let paper = imdb_embedding_average(10_000, 16, 16, &mut noise).expect("paper");
    assert_eq!(paper.num_params(), 160_306);
    let model = imdb_embedding_average(50, 4, 3, &mut noise).expect("small");
    assert_eq!(model.executor(), Executor::General);
    // Token ids as a dataset stores them (floats), one repeated inside a sequence.
    let ids: Vec<f32> = (0..3 * 6).map(|i| ((i * 7 + 3) % 50) as f32).collect();
    let mut ids = ids;
    ids[1] = ids[0];
    let x = Tensor::from_vec(ids, (3, 6), &Device::Cpu).expect("ids");
    let labels = [0u32, 1, 1];
    let reference = loop_gradients(&model, &x, &labels);
    let (sums, norms) = loop_clipped_sum(&reference, 0.05);
    let got = model
        .clipped_cross_entropy_gradient(
            &x,
            &labels,
            2,
            ClipRule::Flat {
                max_grad_norm: 0.05,
            },
        )
        .expect("gradient");
    let tolerance = GHOST_SLACK + 1e-5;
    assert!(
        relative_error(&got.squared_norms, &norms) < tolerance,
        "norms"
    );
    assert!(
        relative_error(&flat(&got.sum), &sums) < tolerance,
        "clipped sum"
    );
}

/// A layer registered with the taps after the model was built would get no clipped
/// gradient from a planned executor: the fused and staged ones refuse to step.
#[test]
fn a_layer_added_after_planning_is_refused() {
    for bias in [true, false] {
        let (varmap, taps, vb) = builder();
        let fc = if bias {
            nn::linear(6, 3, vb.pp("a"))
        } else {
            nn::linear_no_bias(6, 3, vb.pp("a"))
        };
        let net = Sequential::new().linear(fc.expect("a"));
        let model = ModuleClassifier::new(net, &varmap, &taps, &Device::Cpu).expect("m");
        let planned = model.executor();
        assert_ne!(planned, Executor::General);
        let _late = nn::linear(6, 3, vb.pp("late")).expect("late");
        let (x, labels) = inputs(39, 4, 6);
        let labels: Vec<u32> = labels.iter().map(|l| l % 3).collect();
        let err = model
            .clipped_cross_entropy_gradient(&x, &labels, 3, ClipRule::Flat { max_grad_norm: 1.0 })
            .expect_err("refused");
        assert!(
            err.to_string().contains("planned for"),
            "{planned:?}: {err}"
        );
    }
}
