//! Frozen (public) parameters: excluded from per-sample gradients, clipping and θ; used
//! as constants in every forward; the gradient still flows through a frozen layer to the
//! trainable ones below it; freezing is refused once a private model is built.

use candle_core::{Device, Module, Tensor};
use candle_nn::VarBuilder;
use dp_models::nn::{self, loss, Taps, Transformer, TransformerConfig};
use dp_models::{Error, TrainingData};

use super::check::{builder, check, random, tokens, Net};
use super::layers::select;

/// Gives every frozen parameter fixed values (candle-nn initialises unseeded).
fn fix_frozen(taps: &Taps) {
    for (i, p) in taps.frozen_params().iter().enumerate() {
        let t = p.var.as_tensor();
        p.var
            .set(&random(300 + i as u64, t.dims(), 0.5))
            .expect("frozen values");
    }
}

fn config() -> TransformerConfig {
    TransformerConfig {
        vocab: 13,
        context: 6,
        width: 8,
        heads: 2,
        layers: 2,
        mlp_ratio: 2,
        causal: false,
    }
}

/// The library transformer with its token table and whole top block frozen, and parts
/// of layers in the bottom block (a LayerNorm's shift, an MLP Linear's weight): the
/// trainable parameters' per-sample gradients, norms and clipped sums against the
/// per-example loop — the gradient reaches the bottom block through the frozen one.
#[test]
fn a_partly_frozen_transformer_matches_the_per_example_loop() {
    let (varmap, taps, vb) = builder();
    let encoder = Transformer::new(&config(), vb.pp("encoder")).expect("model");
    let head = nn::linear(8, 3, vb.pp("head")).expect("head");
    let all = taps.params().len();
    let frozen: usize = [
        "encoder.tok",
        "encoder.blocks.1",
        "encoder.blocks.0.ln1.bias",
        "encoder.blocks.0.mlp.up.weight",
    ]
    .iter()
    .map(|prefix| taps.freeze(prefix).expect("freeze"))
    .sum();
    assert_eq!(taps.frozen_params().len(), frozen);
    assert_eq!(taps.params().len(), all - frozen);
    fix_frozen(&taps);
    let ids = tokens(21, 4, 6, 13);
    let labels = tokens(22, 4, 1, 3).squeeze(1).expect("labels");
    let net = Net {
        taps,
        varmap,
        batch: 4,
        losses: Box::new(|b| {
            let hidden = encoder.forward(&select(&ids, b)?)?.mean(1)?;
            let logits = head.forward(&hidden)?;
            Ok(loss::cross_entropy(&logits, &select(&labels, b)?, None)?)
        }),
    };
    check(&net, "transformer with frozen parts");
    let all_ids: Vec<usize> = (0..4).collect();
    let per_sample = net
        .taps
        .per_sample_gradients(|| (net.losses)(&all_ids))
        .expect("per-sample gradients");
    let names: Vec<&str> = per_sample.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"encoder.blocks.0.mlp.up.bias"));
    assert!(!names.iter().any(|n| n.starts_with("encoder.blocks.1")
        || *n == "encoder.tok.weight"
        || *n == "encoder.blocks.0.mlp.up.weight"));
}

/// Outside a private forward a frozen parameter is a constant: Candle's backward computes
/// no gradient for it, and the trainable ones keep theirs.
#[test]
fn a_frozen_parameter_gets_no_gradient_in_a_plain_backward() {
    let (_varmap, taps, vb) = builder();
    let first = nn::linear(3, 4, vb.pp("first")).expect("layer");
    let norm = nn::layer_norm(4, 1e-5, vb.pp("norm")).expect("layer");
    let last = nn::linear(4, 2, vb.pp("last")).expect("layer");
    taps.freeze("norm").expect("freeze");
    taps.freeze("last.weight").expect("freeze");
    let x = random(5, &[6, 3], 1.0);
    let y = last
        .forward(&norm.forward(&first.forward(&x).expect("fwd")).expect("fwd"))
        .expect("fwd");
    let grads = y.sqr().and_then(|s| s.sum_all()).expect("loss").backward();
    let grads = grads.expect("backward");
    for p in taps.frozen_params() {
        assert!(
            grads.get(p.var.as_tensor()).is_none(),
            "{} got a gradient",
            p.name
        );
    }
    for p in taps.params() {
        assert!(
            grads.get(p.var.as_tensor()).is_some(),
            "{} got none",
            p.name
        );
    }
}

#[test]
fn freezing_matches_whole_path_segments_and_names_a_miss() {
    let (_varmap, taps, vb) = builder();
    let _a = nn::linear(2, 2, vb.pp("fc")).expect("layer");
    let _b = nn::linear(2, 2, vb.pp("fc2")).expect("layer");
    assert_eq!(taps.freeze("fc").expect("freeze"), 2);
    let names: Vec<String> = taps.params().into_iter().map(|p| p.name).collect();
    assert_eq!(names, ["fc2.bias", "fc2.weight"]);
    match taps.freeze("fc") {
        Err(Error::InvalidModel { part, reason }) => {
            assert_eq!(part, "freeze");
            assert!(reason.contains("\"fc\""), "{reason}");
        }
        other => panic!("expected InvalidModel, got {other:?}"),
    }
}

/// A regression set of the test's own.
struct Rows(usize);

impl TrainingData for Rows {
    fn len(&self) -> usize {
        self.0
    }
    fn validate(&self) -> dp_models::Result<()> {
        Ok(())
    }
    fn digest(&self) -> String {
        "rows".into()
    }
}

fn never(_: &Rows, _: &[usize]) -> dp_models::Result<Tensor> {
    unreachable!("never run")
}

/// The engine's θ, moments and checkpoints are laid out on the trainable parameters when
/// the model is built: freezing afterwards is refused, not silently misaligned.
#[test]
fn freezing_after_the_private_model_is_built_is_refused() {
    let (varmap, taps, vb) = builder();
    let _a = nn::linear(2, 2, vb.pp("a")).expect("layer");
    let _b = nn::linear(2, 1, vb.pp("b")).expect("layer");
    let _net = nn::PrivateNet::new(&varmap, &taps, &Device::Cpu, never).expect("model");
    assert!(matches!(
        taps.freeze("a"),
        Err(Error::InvalidModel { part: "freeze", .. })
    ));
    assert_eq!(taps.frozen_params().len(), 0);
}

#[test]
fn a_network_with_nothing_trainable_is_refused() {
    let (varmap, taps, vb) = builder();
    let _a = nn::linear(2, 2, vb.pp("a")).expect("layer");
    taps.freeze("").expect("freeze all");
    let err = nn::PrivateNet::new(&varmap, &taps, &Device::Cpu, never).err();
    assert!(matches!(err, Some(Error::InvalidModel { .. })), "{err:?}");
}

/// Frozen parameters do not make a plain Candle layer in the same map private.
#[test]
fn a_trainable_var_outside_the_dp_layers_is_still_refused() {
    let (varmap, taps, vb) = builder();
    let _dp = nn::linear(3, 4, vb.pp("fc")).expect("layer");
    taps.freeze("fc").expect("freeze");
    let plain = VarBuilder::from_varmap(&varmap, candle_core::DType::F32, &Device::Cpu);
    let _leak = candle_nn::linear(4, 1, plain.pp("plain")).expect("plain layer");
    match nn::PrivateNet::new(&varmap, &taps, &Device::Cpu, never) {
        Err(Error::UnprotectedParameter { parameter, .. }) => assert_eq!(parameter, "plain.bias"),
        other => panic!("expected UnprotectedParameter, got {:?}", other.err()),
    }
}

/// θ is the trainable parameters only; the architecture (a checkpoint's fingerprint)
/// names the frozen ones and changes with their values.
#[test]
fn theta_is_trainable_and_the_fingerprint_covers_frozen_values() {
    let (_varmap, taps, vb) = builder();
    let _a = nn::linear(3, 2, vb.pp("a")).expect("layer");
    let _b = nn::linear(2, 1, vb.pp("b")).expect("layer");
    taps.freeze("a").expect("freeze");
    fix_frozen(&taps);
    assert_eq!(taps.num_params(), 3);
    assert_eq!(taps.flat_parameters().expect("theta").len(), 3);
    let before = taps.architecture();
    assert!(before.contains("a.weight[2, 3] frozen"), "{before}");
    let weight = taps.frozen_params()[1].var.clone();
    let changed = (weight.as_tensor() + 1.0).expect("values");
    weight.set(&changed).expect("set");
    assert_ne!(taps.architecture(), before);
}

/// A frozen layer runs as a constant function, not a DP layer: it may take an input
/// without a batch axis (a learned position table over 0..T, shared by the batch), which
/// a trainable DP layer refuses.
#[test]
fn a_frozen_layer_may_take_a_shared_input() {
    let (varmap, taps, vb) = builder();
    let pos = nn::embedding(5, 4, vb.pp("pos")).expect("layer");
    let head = nn::linear(4, 2, vb.pp("head")).expect("layer");
    taps.freeze("pos").expect("freeze");
    fix_frozen(&taps);
    let x = random(8, &[3, 5, 4], 1.0);
    let positions = Tensor::arange(0u32, 5, &Device::Cpu).expect("positions");
    let labels = tokens(9, 3, 1, 2).squeeze(1).expect("labels");
    let net = Net {
        taps,
        varmap,
        batch: 3,
        losses: Box::new(|b| {
            let h = select(&x, b)?.broadcast_add(&pos.forward(&positions)?)?;
            let logits = head.forward(&h.mean(1)?)?;
            Ok(loss::cross_entropy(&logits, &select(&labels, b)?, None)?)
        }),
    };
    check(&net, "frozen shared position table");
}

/// A state dict holds every parameter, frozen ones too; a frozen name cannot be
/// registered again; a classifier with nothing trainable is refused.
#[test]
fn frozen_parameters_are_saved_and_not_registered_twice() {
    let (varmap, taps, vb) = builder();
    let a = nn::linear(3, 2, vb.pp("a")).expect("layer");
    taps.freeze("a").expect("freeze");
    let names = taps.state_dict();
    assert_eq!(names.names(), ["a.bias", "a.weight"]);
    let again = taps.register("a.weight", "a", taps.frozen_params()[1].var.clone());
    assert!(matches!(again, Err(Error::InvalidModel { .. })));
    let net = nn::Sequential::new().linear(a);
    let refused = nn::ModuleClassifier::new(net, &varmap, &taps, &Device::Cpu);
    assert!(matches!(refused.err(), Some(Error::InvalidModel { .. })));
}
