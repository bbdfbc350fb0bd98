//! DP LoRA: adapters on chosen Linear layers of the library transformer against the
//! per-example loop; the adapted layer's output against `W₀x + b + (α/r)·BAx` by hand;
//! bad configurations refused; the fast executors never run an adapted layer.

use candle_core::{Device, Module, Tensor};
use dp_models::nn::{
    self, add_lora, loss, Executor, LoraConfig, ModuleClassifier, Transformer, TransformerConfig,
};
use dp_models::Error;

use super::check::{builder, check, random, tokens, Net};
use super::layers::select;

/// A one-block transformer of width 4 (for the refusals).
fn tiny_transformer(vb: &nn::DpVarBuilder) -> Transformer {
    let shape = TransformerConfig {
        vocab: 5,
        context: 2,
        width: 4,
        heads: 1,
        layers: 1,
        mlp_ratio: 1,
        causal: false,
    };
    Transformer::new(&shape, vb.clone()).expect("model")
}

fn config(rank: usize, alpha: f64, keep: &[&str]) -> LoraConfig {
    LoraConfig {
        rank,
        alpha,
        keep_trainable: keep.iter().map(|k| k.to_string()).collect(),
    }
}

/// Adapters of rank 2 on every block's q and v, the classification head kept trainable,
/// the rest frozen: the adapters' and the head's per-sample gradients, norms and clipped
/// sums against the per-example loop.
#[test]
fn adapters_on_q_and_v_match_the_per_example_loop() {
    let (varmap, taps, vb) = builder();
    let shape = TransformerConfig {
        vocab: 13,
        context: 6,
        width: 8,
        heads: 2,
        layers: 2,
        mlp_ratio: 2,
        causal: true,
    };
    let mut encoder = Transformer::new(&shape, vb.pp("encoder")).expect("model");
    let head = nn::linear(8, 3, vb.pp("head")).expect("head");
    let selected = |name: &str| name.ends_with(".q") || name.ends_with(".v");
    let adapted = add_lora(&mut encoder, &vb, &config(2, 4.0, &["head"]), selected);
    assert_eq!(adapted.expect("adapters"), 4);
    let names: Vec<String> = taps.params().into_iter().map(|p| p.name).collect();
    assert_eq!(names.len(), 4 * 2 + 2, "{names:?}");
    assert!(names.contains(&"encoder.blocks.1.attn.v.lora_b.weight".to_string()));
    for (i, p) in taps.frozen_params().iter().enumerate() {
        let fixed = random(500 + i as u64, p.var.as_tensor().dims(), 0.5);
        p.var.set(&fixed).expect("frozen values");
    }
    let ids = tokens(31, 4, 6, 13);
    let labels = tokens(32, 4, 1, 3).squeeze(1).expect("labels");
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
    check(&net, "transformer with LoRA on q and v");
}

/// `B = 0` at the start, so the adapted layer is its base; with B set, it adds
/// `(α/r)·B(Ax)` to the base's output.
#[test]
fn an_adapted_layer_adds_the_scaled_low_rank_update() {
    let (_varmap, taps, vb) = builder();
    let base = nn::linear(5, 4, vb.pp("fc")).expect("layer");
    base.weight().set(&random(2, &[4, 5], 1.0)).expect("W");
    let x = random(3, &[6, 5], 1.0);
    let adapted = base
        .with_lora(&config(2, 3.0, &[]), vb.pp("fc"))
        .expect("adapter");
    assert_eq!(taps.frozen_params().len(), 2, "the base is frozen");
    // The base's output on the frozen (constant) path that the adapted layer takes.
    let before = base.forward(&x).expect("base");
    let diff = (adapted.forward(&x).expect("fwd") - &before).expect("diff");
    let zero = diff.abs().and_then(|d| d.max_all()).expect("max");
    assert_eq!(zero.to_scalar::<f32>().expect("scalar"), 0.0);
    let (a, b) = adapted.lora_factors().expect("factors");
    b.weight().set(&random(4, &[4, 2], 1.0)).expect("B");
    let by_hand = || -> candle_core::Result<Tensor> {
        let ax = a.weight().as_tensor().matmul(&x.t()?)?;
        let update = b.weight().as_tensor().matmul(&ax)?.t()?;
        (update * 1.5)? + &before
    };
    let got = adapted.forward(&x).expect("fwd");
    let diff = (got - by_hand().expect("by hand")).expect("diff");
    let err = diff
        .abs()
        .and_then(|d| d.max_all())
        .and_then(|d| d.to_scalar::<f32>())
        .expect("error");
    assert!(err < 1e-5, "{err}");
}

#[test]
fn bad_adapters_are_refused() {
    let (_varmap, _taps, vb) = builder();
    let fc = nn::linear(3, 2, vb.pp("fc")).expect("layer");
    for (rank, alpha) in [(0, 1.0), (2, f64::NAN), (2, 0.0)] {
        let refused = fc.with_lora(&config(rank, alpha, &[]), vb.pp("fc"));
        assert!(matches!(
            refused,
            Err(Error::InvalidModel { part: "LoRA", .. })
        ));
    }
    let once = fc
        .with_lora(&config(1, 1.0, &[]), vb.pp("fc"))
        .expect("once");
    let twice = once.with_lora(&config(1, 1.0, &[]), vb.pp("fc2"));
    assert!(matches!(
        twice,
        Err(Error::InvalidModel { part: "LoRA", .. })
    ));
    let (_v, _t, vb) = builder();
    let mut model = tiny_transformer(&vb);
    let none = add_lora(&mut model, &vb, &config(1, 1.0, &[]), |_| false);
    assert!(matches!(
        none,
        Err(Error::InvalidModel { part: "LoRA", .. })
    ));
}

/// An adapted or frozen layer is outside the fused and staged executors: a Sequential
/// with one trains on the general path.
#[test]
fn a_sequential_with_an_adapter_or_a_frozen_layer_takes_the_general_path() {
    for frozen_only in [false, true] {
        let (varmap, taps, vb) = builder();
        let fc1 = nn::linear(4, 6, vb.pp("fc1")).expect("layer");
        let fc1 = if frozen_only {
            taps.freeze("fc1").expect("freeze");
            fc1
        } else {
            fc1.with_lora(&config(2, 2.0, &[]), vb.pp("fc1"))
                .expect("adapter")
        };
        let net = nn::Sequential::new()
            .linear(fc1)
            .tanh()
            .linear(nn::linear(6, 3, vb.pp("fc2")).expect("layer"));
        let model = ModuleClassifier::new(net, &varmap, &taps, &Device::Cpu).expect("model");
        assert_eq!(
            model.executor(),
            Executor::General,
            "frozen only: {frozen_only}"
        );
    }
}

/// Adapters come before the private model: afterwards they are refused and nothing is
/// registered; a `keep_trainable` that names nothing is refused; the adapters' scale is
/// part of the architecture fingerprint.
#[test]
fn adapters_are_refused_late_and_their_scale_is_fingerprinted() {
    let (varmap, taps, vb) = builder();
    let fc = nn::linear(3, 2, vb.pp("fc")).expect("layer");
    let _net = nn::PrivateNet::new(&varmap, &taps, &Device::Cpu, |_: &Rows, _: &[usize]| {
        unreachable!("never run")
    })
    .expect("model");
    let late = fc.with_lora(&config(1, 1.0, &[]), vb.pp("fc"));
    assert!(matches!(
        late,
        Err(Error::InvalidModel { part: "LoRA", .. })
    ));
    assert_eq!(taps.params().len(), 2, "nothing registered");

    let fingerprint = |alpha: f64| {
        let (_v, taps, vb) = builder();
        let fc = nn::linear(3, 2, vb.pp("fc")).expect("layer");
        let _a = fc
            .with_lora(&config(1, alpha, &[]), vb.pp("fc"))
            .expect("adapter");
        taps.architecture()
    };
    assert_ne!(fingerprint(1.0), fingerprint(2.0));

    let (_v, _t, vb) = builder();
    let mut model = tiny_transformer(&vb);
    let typo = add_lora(&mut model, &vb, &config(1, 1.0, &["haed"]), |_| true);
    assert!(matches!(
        typo,
        Err(Error::InvalidModel { part: "LoRA", .. })
    ));
}

struct Rows;

impl dp_models::TrainingData for Rows {
    fn len(&self) -> usize {
        0
    }
    fn validate(&self) -> dp_models::Result<()> {
        Ok(())
    }
    fn digest(&self) -> String {
        String::new()
    }
}
