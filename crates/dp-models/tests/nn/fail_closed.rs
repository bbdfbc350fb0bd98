//! Fail closed: a parameter outside the DP layers, used outside its layer, or without a
//! per-sample gradient is an error that names it, before anything is released.

use candle_core::{Device, Module, Tensor};
use candle_nn::VarBuilder;
use dp_models::nn::{self, loss, NormMethod, PrivateNet};
use dp_models::{ClipRule, Error, PrivateModel, TrainingData};

/// A regression set of the test's own: float targets, no class labels.
struct Rows {
    x: Tensor,
    y: Tensor,
}

impl TrainingData for Rows {
    fn len(&self) -> usize {
        self.x.dims()[0]
    }
    fn validate(&self) -> dp_models::Result<()> {
        Ok(())
    }
    fn digest(&self) -> String {
        "rows".into()
    }
}

use super::check::{builder, random};

const RULE: ClipRule = ClipRule::Flat { max_grad_norm: 1.0 };

fn named(e: Error) -> String {
    match e {
        Error::UnprotectedParameter { parameter, .. } => parameter,
        other => panic!("expected UnprotectedParameter, got {other}"),
    }
}

#[test]
fn a_plain_candle_layer_in_the_varmap_is_refused() {
    let (varmap, taps, vb) = builder();
    let _dp = nn::linear(3, 4, vb.pp("fc")).expect("layer");
    let plain = VarBuilder::from_varmap(&varmap, candle_core::DType::F32, &Device::Cpu);
    let _leak = candle_nn::linear(4, 1, plain.pp("plain")).expect("plain layer");
    let net = PrivateNet::new(&varmap, &taps, &Device::Cpu, |_: &Rows, _: &[usize]| {
        unreachable!("never run")
    });
    let err = net.err().expect("refused");
    assert_eq!(named(err), "plain.bias");
}

#[test]
fn a_weight_used_outside_its_layer_is_refused() {
    let (_, taps, vb) = builder();
    let fc = nn::linear(3, 2, vb.pp("fc")).expect("layer");
    let x = random(61, &[4, 3], 1.0);
    let y = random(62, &[4, 2], 1.0);
    let err = taps
        .clipped_gradients(
            || {
                // A second use of the weight, by hand: its gradient would be unclipped.
                let extra = x.matmul(&fc.weight().as_tensor().t()?)?;
                Ok(loss::mse(&(fc.forward(&x)? + extra)?, &y)?)
            },
            RULE,
            NormMethod::Auto,
        )
        .expect_err("refused");
    assert_eq!(named(err), "fc.weight");
}

#[test]
fn a_layer_off_the_loss_path_is_refused() {
    let (_, taps, vb) = builder();
    let fc = nn::linear(3, 2, vb.pp("fc")).expect("layer");
    let _unused = nn::linear(2, 2, vb.pp("unused")).expect("layer");
    let x = random(63, &[4, 3], 1.0);
    let y = random(64, &[4, 2], 1.0);
    let err = taps
        .clipped_gradients(
            || Ok(loss::mse(&fc.forward(&x)?, &y)?),
            RULE,
            NormMethod::Auto,
        )
        .expect_err("refused");
    assert_eq!(named(err), "unused.bias");
}

#[test]
fn a_loss_that_is_not_per_example_is_refused() {
    let (_, taps, vb) = builder();
    let fc = nn::linear(3, 2, vb.pp("fc")).expect("layer");
    let x = random(65, &[4, 3], 1.0);
    let err = taps
        .clipped_gradients(|| Ok(fc.forward(&x)?.sum_all()?), RULE, NormMethod::Auto)
        .expect_err("refused");
    assert!(
        matches!(err, Error::InvalidModel { part: "loss", .. }),
        "{err}"
    );
    // The recording is off again after the failure.
    assert!(!taps.is_recording());
}

#[test]
fn private_net_trains_through_the_private_model_seam() {
    let (varmap, taps, vb) = builder();
    let fc = nn::linear(3, 1, vb.pp("fc")).expect("layer");
    let data = Rows {
        x: random(66, &[6, 3], 1.0),
        y: random(67, &[6, 1], 1.0),
    };
    let mut net = PrivateNet::new(&varmap, &taps, &Device::Cpu, |d: &Rows, b: &[usize]| {
        let idx: Vec<u32> = b.iter().map(|&i| i as u32).collect();
        let idx = Tensor::from_vec(idx, b.len(), &Device::Cpu)?;
        let (x, y) = (d.x.index_select(&idx, 0)?, d.y.index_select(&idx, 0)?);
        Ok(loss::mse(&fc.forward(&x)?, &y)?)
    })
    .expect("covered");
    assert_eq!(net.num_params(), 4);
    let g = net
        .clipped_gradient(&data, &[0, 2, 4], RULE)
        .expect("gradient");
    assert_eq!((g.sum.len(), g.losses.len()), (4, 3));
    assert!(g.squared_norms.iter().all(|s| s.is_finite()));
    let theta = vec![0.5; 4];
    net.set_parameters(&theta).expect("set");
    assert_eq!(net.parameters().expect("get"), theta);
}

#[test]
fn a_layer_applied_without_the_batch_dimension_is_refused() {
    let (_, taps, vb) = builder();
    let pos = nn::embedding(5, 2, vb.pp("pos")).expect("layer");
    let positions = Tensor::arange(0u32, 5, &Device::Cpu).expect("positions");
    let y = random(68, &[3, 5, 2], 1.0);
    // (T, D) positions broadcast over a batch of 3: the tap's rows are positions, not
    // examples, and its "per-sample" gradients would be wrong.
    let err = taps
        .clipped_gradients(
            || {
                Ok(loss::mse(
                    &pos.forward(&positions)?.broadcast_as((3, 5, 2))?,
                    &y,
                )?)
            },
            RULE,
            NormMethod::Auto,
        )
        .expect_err("refused");
    assert!(
        matches!(
            err,
            Error::InvalidModel {
                part: "DP layer",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_next_token_loss_on_one_token_is_an_error_not_a_panic() {
    let logits = random(69, &[2, 1, 5], 1.0);
    let tokens = Tensor::zeros((2, 1), candle_core::DType::U32, &Device::Cpu).expect("tokens");
    assert!(loss::next_token_cross_entropy(&logits, &tokens, None).is_err());
}

/// A DP layer on a (T, B, d) input with T = B passes every shape check; the batch-axis
/// probe (src/nn/batch_axis.rs) sees that its rows are not examples.
#[test]
fn a_batch_second_input_with_t_equal_to_b_is_refused() {
    let (_, taps, vb) = builder();
    let fc = nn::linear(3, 2, vb.pp("fc")).expect("layer");
    let x = random(70, &[4, 4, 3], 1.0); // (T = 4, B = 4, d)
    let err = taps
        .clipped_gradients(
            // Example b's loss: Σₜ of its outputs (axis 1 is the batch).
            || Ok(fc.forward(&x)?.sqr()?.sum(2)?.sum(0)?),
            RULE,
            NormMethod::Auto,
        )
        .expect_err("refused");
    assert!(err.to_string().contains("not per example"), "{err}");
    // The same layer batch first is taken.
    let x = x
        .transpose(0, 1)
        .and_then(|t| t.contiguous())
        .expect("batch first");
    taps.clipped_gradients(
        || Ok(fc.forward(&x)?.sqr()?.sum(2)?.sum(1)?),
        RULE,
        NormMethod::Auto,
    )
    .expect("batch first");
}

/// A loss that reads other examples (batch statistics: the outputs centred on the
/// batch mean, as a batch norm does) is refused: an example's "gradient" would hold
/// the others' contributions.
#[test]
fn a_loss_mixing_examples_is_refused() {
    let (_, taps, vb) = builder();
    let fc = nn::linear(3, 2, vb.pp("fc")).expect("layer");
    let x = random(71, &[5, 3], 1.0);
    let err = taps
        .clipped_gradients(
            || {
                let z = fc.forward(&x)?;
                let centred = z.broadcast_sub(&z.mean_keepdim(0)?)?;
                Ok(centred.sqr()?.sum(1)?)
            },
            RULE,
            NormMethod::Auto,
        )
        .expect_err("refused");
    assert!(err.to_string().contains("mixes"), "{err}");
}

/// candle-nn's BatchNorm keeps its statistics as variables of the map: the network is
/// refused before anything runs, naming one of them.
#[test]
fn candle_nn_batch_norm_is_refused() {
    let (varmap, taps, vb) = builder();
    let _fc = nn::linear(3, 4, vb.pp("fc")).expect("layer");
    let plain = VarBuilder::from_varmap(&varmap, candle_core::DType::F32, &Device::Cpu);
    let _bn = candle_nn::batch_norm(4, candle_nn::BatchNormConfig::default(), plain.pp("bn"))
        .expect("batch norm");
    let net = PrivateNet::new(&varmap, &taps, &Device::Cpu, |_: &Rows, _: &[usize]| {
        unreachable!("never run")
    });
    assert!(named(net.err().expect("refused")).starts_with("bn."));
}

/// A closure that flattens tokens into rows returns (B·T,) losses for B records: it
/// would be clipped per token. Refused, naming the shape and the records drawn.
#[test]
fn a_loss_per_token_is_refused_by_private_net() {
    let (varmap, taps, vb) = builder();
    let fc = nn::linear(3, 1, vb.pp("fc")).expect("layer");
    let data = Rows {
        x: random(72, &[6, 3], 1.0),
        y: random(73, &[6, 1], 1.0),
    };
    let net = PrivateNet::new(&varmap, &taps, &Device::Cpu, |d: &Rows, b: &[usize]| {
        let idx: Vec<u32> = b.iter().map(|&i| i as u32).collect();
        let idx = Tensor::from_vec(idx, b.len(), &Device::Cpu)?;
        let x = d.x.index_select(&idx, 0)?;
        // Two "tokens" per record flattened into rows.
        let tokens = Tensor::cat(&[&x, &x], 0)?;
        Ok(fc.forward(&tokens)?.sqr()?.sum(1)?)
    })
    .expect("covered");
    let err = net
        .clipped_gradient(&data, &[0, 2, 4], RULE)
        .expect_err("refused");
    let text = err.to_string();
    assert!(text.contains("[6]") && text.contains("3 records"), "{text}");
}

/// The Taps entry points themselves (not only PrivateNet) refuse a plain candle-nn layer
/// on the map the DP layers were built in, naming it.
#[test]
fn taps_refuse_a_plain_layer_on_their_varmap() {
    let (varmap, taps, vb) = builder();
    let fc = nn::linear(3, 4, vb.pp("fc")).expect("layer");
    let plain = VarBuilder::from_varmap(&varmap, candle_core::DType::F32, &Device::Cpu);
    let head = candle_nn::linear(4, 1, plain.pp("plain")).expect("plain layer");
    let x = random(74, &[4, 3], 1.0);
    let losses = || Ok(head.forward(&fc.forward(&x)?)?.sqr()?.sum(1)?);
    let err = taps
        .clipped_gradients(losses, RULE, NormMethod::Auto)
        .expect_err("refused");
    assert_eq!(named(err), "plain.bias");
    let err = taps.per_sample_gradients(losses).expect_err("refused");
    assert_eq!(named(err), "plain.bias");
}

/// An example whose gradient is not finite gets a non-finite norm and clip factor 0 on
/// every norm path (ghost, materialised, and per-sample gradients kept for the clipped
/// sum: a Linear over 16 positions of width 4), and the clipped sums are those of the
/// other examples alone.
#[test]
fn a_non_finite_example_is_dropped_on_every_norm_path() {
    let (b, t, d) = (3, 16, 4);
    let (_varmap, taps, vb) = builder();
    let layer = nn::linear(d, d, vb.pp("fc")).expect("linear");
    let mut x = random(5, &[b, t, d], 1.0)
        .flatten_all()
        .expect("x")
        .to_vec1::<f32>()
        .expect("x");
    x[t * d + 3] = f32::NAN; // example 1
    let x = Tensor::from_vec(x, (b, t, d), &Device::Cpu).expect("x");
    let losses = |rows: &[u32]| {
        let index = Tensor::new(rows, &Device::Cpu)?;
        let y = layer.forward(&x.index_select(&index, 0)?)?;
        Ok(y.sqr()?.sum((1, 2))?)
    };
    for method in [
        NormMethod::Ghost,
        NormMethod::Materialised,
        NormMethod::Auto,
    ] {
        let all = taps
            .clipped_gradients(|| losses(&[0, 1, 2]), RULE, method)
            .expect("all");
        let norms = &all.squared_norms;
        assert!(norms[0].is_finite() && !norms[1].is_finite() && norms[2].is_finite());
        let finite = taps
            .clipped_gradients(|| losses(&[0, 2]), RULE, method)
            .expect("finite");
        let per_tensor =
            |g: &dp_models::ClippedGradient| g.sum.tensors().expect("per tensor").to_vec();
        for ((name, a), (_, f)) in per_tensor(&all).iter().zip(&per_tensor(&finite)) {
            let (a, f) = (
                a.flatten_all().and_then(|t| t.to_vec1::<f32>()).expect("a"),
                f.flatten_all().and_then(|t| t.to_vec1::<f32>()).expect("f"),
            );
            for (p, q) in a.iter().zip(&f) {
                assert!(
                    p.is_finite() && (p - q).abs() <= 1e-6,
                    "{method:?} {name}: {p} vs {q}"
                );
            }
        }
    }
}
