//! A PyTorch model's state dict (float64, saved with safetensors by
//! `xtask/scripts/state_dict_fixture.py`) loaded onto the same network written with the
//! DP layers computes PyTorch's logits; shapes, missing and unexpected names are errors.

use std::path::PathBuf;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Conv2dConfig, VarMap};
use dp_models::nn::{self, DpVarBuilder, Sequential, StateDict, Taps};

use super::check::relative_error;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/torch_cnn.safetensors")
}

/// PyTorch's `Sequential(Conv2d(2, 3, 3, padding=1), Tanh, MaxPool2d(2, 1), Flatten,
/// Linear(75, 8), GELU, LayerNorm(8), Linear(8, 4))`, named as PyTorch numbers it.
fn network() -> (Sequential, VarMap) {
    let (varmap, taps) = (VarMap::new(), Taps::new());
    let vb = DpVarBuilder::from_varmap(&varmap, &taps, &Device::Cpu);
    let config = Conv2dConfig {
        padding: 1,
        ..Default::default()
    };
    let net = Sequential::images(2, 6, 6)
        .conv2d(nn::conv2d(2, 3, 3, config, vb.pp("0")).expect("conv"))
        .tanh()
        .max_pool2d(2, 1)
        .flatten()
        .linear(nn::linear(75, 8, vb.pp("4")).expect("linear"))
        .module(|x: &Tensor| nn::ops::gelu_erf(x))
        .module(nn::layer_norm(8, 1e-5, vb.pp("6")).expect("layer norm"))
        .linear(nn::linear(8, 4, vb.pp("7")).expect("linear"));
    (net, varmap)
}

#[test]
fn a_pytorch_state_dict_loads_by_name_and_gives_pytorchs_logits() {
    let dict = StateDict::read(&fixture()).expect("fixture");
    let (net, varmap) = network();
    let loaded = dict.load_into(&varmap, false).expect("load");
    assert_eq!(loaded.unexpected, ["input", "logits"]);
    assert!(
        loaded.missing.is_empty() && loaded.loaded.len() == 8,
        "{loaded:?}"
    );
    let tensors = candle_core::safetensors::load(fixture(), &Device::Cpu).expect("read");
    let x = tensors["input"].to_dtype(DType::F32).expect("f32");
    let want: Vec<f32> = tensors["logits"]
        .to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1())
        .expect("logits");
    let got: Vec<f32> = net
        .forward(&x)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1())
        .expect("forward");
    let err = relative_error(&got, &want);
    assert!(err < 1e-5, "relative error {err} against PyTorch");
    // Strict, after dropping the test's own tensors, it loads too.
    let strict = dict.rename(|n| (!["input", "logits"].contains(&n)).then(|| n.to_string()));
    assert_eq!(
        strict
            .load_into(&varmap, true)
            .expect("strict")
            .loaded
            .len(),
        8
    );
}

#[test]
fn a_wrong_shape_a_missing_or_an_unexpected_name_is_an_error() {
    let (_net, varmap) = network();
    let dict = StateDict::read(&fixture()).expect("fixture");
    let err = dict.load_into(&varmap, true).expect_err("strict");
    assert!(
        err.to_string().contains("unexpected input, logits"),
        "{err}"
    );
    let renamed = dict.clone().rename(|n| Some(n.replace("7.", "8.")));
    let err = renamed.load_into(&varmap, true).expect_err("missing");
    assert!(
        err.to_string().contains("missing 7.bias, 7.weight"),
        "{err}"
    );
    let bad = StateDict::from_tensors([(
        "4.weight".to_string(),
        Tensor::zeros((8, 74), DType::F64, &Device::Cpu).expect("t"),
    )]);
    let err = bad.load_into(&varmap, false).expect_err("shape");
    assert!(
        err.to_string().contains("4.weight has shape [8, 74]"),
        "{err}"
    );
    let missing_file = StateDict::read(&fixture().with_extension("none"));
    assert!(missing_file.is_err());
}
