//! Network specifications of the papers' models.

use candle_core::{Device, Tensor, Var};
use candle_nn::VarMap;
use dp_mechanisms::NoiseSource;

use crate::error::{Error, Result};
use crate::fused::{LayerSpec, NetSpec, TorchLayer};
use crate::nn;

/// The activation of a CNN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// tanh (Papernot et al.'s tempered sigmoid; Tramèr & Boneh).
    Tanh,
    /// ReLU.
    Relu,
}

impl Activation {
    fn layer(self) -> LayerSpec {
        match self {
            Activation::Tanh => LayerSpec::Tanh,
            Activation::Relu => LayerSpec::Relu,
        }
    }
}

/// The MNIST / Fashion-MNIST CNN of Tramèr & Boneh (and Papernot et al.), 26,010
/// parameters (`docs/reproduction/sa-dpsgd.md`, "Experimental setup"): Conv(1→16, k8, s2, p2) → act → MaxPool(2, 1)
/// → Conv(16→32, k4, s2) → act → MaxPool(2, 1) → Flatten(512) → Linear(32) → act →
/// Linear(10).
pub fn mnist_cnn(activation: Activation) -> Result<NetSpec> {
    let act = activation.layer();
    NetSpec::new(
        1,
        28,
        28,
        &[
            LayerSpec::Conv2d {
                out_channels: 16,
                kernel: 8,
                stride: 2,
                padding: 2,
            },
            act,
            LayerSpec::MaxPool {
                kernel: 2,
                stride: 1,
            },
            LayerSpec::Conv2d {
                out_channels: 32,
                kernel: 4,
                stride: 2,
                padding: 0,
            },
            act,
            LayerSpec::MaxPool {
                kernel: 2,
                stride: 1,
            },
            LayerSpec::Flatten,
            LayerSpec::Linear { out_features: 32 },
            act,
            LayerSpec::Linear { out_features: 10 },
        ],
    )
}

/// The CIFAR-10 CNN of Tramèr & Boneh (and Papernot et al.), 550,570 parameters
/// (`docs/reproduction/sa-dpsgd.md`, "Experimental setup"): [Conv3×3(p1) → act] × 2 per block with 32, 64 and 128
/// channels, MaxPool(2, 2) after each block, Flatten(2048) → Linear(128) → act →
/// Linear(10).
pub fn cifar10_cnn(activation: Activation) -> Result<NetSpec> {
    let act = activation.layer();
    let conv = |out_channels| LayerSpec::Conv2d {
        out_channels,
        kernel: 3,
        stride: 1,
        padding: 1,
    };
    let pool = LayerSpec::MaxPool {
        kernel: 2,
        stride: 2,
    };
    let mut layers = Vec::new();
    for channels in [32, 64, 128] {
        layers.extend([conv(channels), act, conv(channels), act, pool]);
    }
    layers.extend([
        LayerSpec::Flatten,
        LayerSpec::Linear { out_features: 128 },
        act,
        LayerSpec::Linear { out_features: 10 },
    ]);
    NetSpec::new(3, 32, 32, &layers)
}

/// The GDP paper's MNIST CNN (Bu et al. 2020; the authors' PyTorch twin of their TF
/// model, `docs/reproduction/gdp.md`, "Experiment settings"): Conv(1→16, k8, s2, p3) → ReLU → MaxPool(2, 1) →
/// Conv(16→32, k4, s2) → ReLU → MaxPool(2, 1) → Flatten(512) → Linear(32) → ReLU →
/// Linear(10); 26,010 parameters. Feature maps 14 → 13 → 5 → 4, as TF's `'same'` padding.
pub fn gdp_mnist_cnn() -> Result<NetSpec> {
    let conv = |out_channels, kernel, padding| LayerSpec::Conv2d {
        out_channels,
        kernel,
        stride: 2,
        padding,
    };
    let pool = LayerSpec::MaxPool {
        kernel: 2,
        stride: 1,
    };
    NetSpec::new(
        1,
        28,
        28,
        &[
            conv(16, 8, 3),
            LayerSpec::Relu,
            pool,
            conv(32, 4, 0),
            LayerSpec::Relu,
            pool,
            LayerSpec::Flatten,
            LayerSpec::Linear { out_features: 32 },
            LayerSpec::Relu,
            LayerSpec::Linear { out_features: 10 },
        ],
    )
}

/// A multilayer perceptron on flat inputs: Linear → act for each hidden width, then a
/// Linear to `classes`.
pub fn mlp(
    inputs: usize,
    hidden: &[usize],
    classes: usize,
    activation: Activation,
) -> Result<NetSpec> {
    let mut layers = Vec::new();
    for &width in hidden {
        layers.push(LayerSpec::Linear {
            out_features: width,
        });
        layers.push(activation.layer());
    }
    layers.push(LayerSpec::Linear {
        out_features: classes,
    });
    NetSpec::new(inputs, 1, 1, &[&[LayerSpec::Flatten][..], &layers].concat())
}

/// Sets a layer's parameters to PyTorch-layout weights.
fn set_layer(weight: &Var, bias: Option<&Var>, torch: &TorchLayer) -> Result<()> {
    let (w, b) = torch.to_tensors(weight.device())?;
    weight.set(&w)?;
    bias.ok_or_else(|| Error::invalid_model("MNIST CNN", "a layer without bias"))?
        .set(&b)?;
    Ok(())
}

/// The MNIST CNN's four DP layers, with their `VarMap` and taps.
struct MnistCnnLayers {
    conv1: nn::Conv2d,
    conv2: nn::Conv2d,
    fc1: nn::Linear,
    fc2: nn::Linear,
    varmap: VarMap,
    taps: nn::Taps,
}

/// [`MnistCnnLayers`] from PyTorch-layout weights.
fn mnist_cnn_layers(weights: &[TorchLayer]) -> Result<MnistCnnLayers> {
    if weights.len() != 4 {
        return Err(Error::invalid_model(
            "MNIST CNN weights",
            format!(
                "the MNIST CNN has 4 parametric layers, got {}",
                weights.len()
            ),
        ));
    }
    let (varmap, taps, device) = (VarMap::new(), nn::Taps::new(), Device::Cpu);
    let vb = nn::DpVarBuilder::from_varmap(&varmap, &taps, &device);
    let conv = |stride, padding| candle_nn::Conv2dConfig {
        stride,
        padding,
        ..Default::default()
    };
    let conv1 = nn::conv2d(1, 16, 8, conv(2, 2), vb.pp("conv1"))?;
    let conv2 = nn::conv2d(16, 32, 4, conv(2, 0), vb.pp("conv2"))?;
    let fc1 = nn::linear(32 * 4 * 4, 32, vb.pp("fc1"))?;
    let fc2 = nn::linear(32, 10, vb.pp("fc2"))?;
    set_layer(conv1.weight(), conv1.bias(), &weights[0])?;
    set_layer(conv2.weight(), conv2.bias(), &weights[1])?;
    set_layer(fc1.weight(), fc1.bias(), &weights[2])?;
    set_layer(fc2.weight(), fc2.bias(), &weights[3])?;
    Ok(MnistCnnLayers {
        conv1,
        conv2,
        fc1,
        fc2,
        varmap,
        taps,
    })
}

/// The MNIST CNN of [`mnist_cnn`] written with the DP layers, as a user writes it: an
/// [`nn::Sequential`] on flat (B, 784) images, from PyTorch-layout weights (for example
/// `FusedModel::to_torch()`, so that both can run the same network). On the CPU it
/// trains on the fused executor (the [`nn::ModuleClassifier`] chooses it).
pub fn mnist_cnn_nn(
    activation: Activation,
    weights: &[TorchLayer],
) -> Result<nn::ModuleClassifier<nn::Sequential>> {
    let MnistCnnLayers {
        conv1,
        conv2,
        fc1,
        fc2,
        varmap,
        taps,
    } = mnist_cnn_layers(weights)?;
    let act = |net: nn::Sequential| match activation {
        Activation::Tanh => net.tanh(),
        Activation::Relu => net.relu(),
    };
    let net = act(nn::Sequential::images(1, 28, 28).conv2d(conv1)).max_pool2d(2, 1);
    let net = act(net.conv2d(conv2)).max_pool2d(2, 1).flatten();
    let net = act(net.linear(fc1)).linear(fc2);
    nn::ModuleClassifier::new(net, &varmap, &taps, &Device::Cpu)
}

/// The GDP paper's Adult model: 123 binary features → Dense(16, ReLU) → Dense(2), 2,018
/// parameters (`docs/reproduction/gdp.md`, "Experiment settings").
pub fn adult_mlp() -> Result<NetSpec> {
    mlp(123, &[16], 2, Activation::Relu)
}

/// Values uniform on (−bound, bound) from `noise`.
fn uniform_tensor(shape: (usize, usize), bound: f64, noise: &mut NoiseSource) -> Result<Tensor> {
    let values: Vec<f32> = (0..shape.0 * shape.1)
        .map(|_| ((2.0 * noise.uniform() - 1.0) * bound) as f32)
        .collect();
    Ok(Tensor::from_vec(values, shape, &Device::Cpu)?)
}

/// A Keras-initialised dense layer (Glorot-uniform weights, zero bias), PyTorch layout.
fn keras_dense(
    inputs: usize,
    outputs: usize,
    noise: &mut NoiseSource,
    vb: nn::DpVarBuilder,
) -> Result<nn::Linear> {
    let bound = (6.0 / (inputs + outputs) as f64).sqrt();
    let layer = nn::linear(inputs, outputs, vb)?;
    layer
        .weight()
        .set(&uniform_tensor((outputs, inputs), bound, noise)?)?;
    if let Some(bias) = layer.bias() {
        bias.set(&bias.as_tensor().zeros_like()?)?;
    }
    Ok(layer)
}

/// The GDP paper's IMDB model (its TF code): Embedding(`num_words`, `dim`) → average
/// over the sequence (padding included, as Keras's `GlobalAveragePooling1D` without a
/// mask) → Dense(`hidden`, ReLU) → Dense(2); 160,306 parameters for (10,000, 16, 16).
/// Keras initialisation (embedding U(−0.05, 0.05), Glorot dense) from `noise`.
pub fn imdb_embedding_average(
    num_words: usize,
    dim: usize,
    hidden: usize,
    noise: &mut NoiseSource,
) -> Result<nn::ModuleClassifier<nn::Sequential>> {
    let (varmap, taps, device) = (VarMap::new(), nn::Taps::new(), Device::Cpu);
    let vb = nn::DpVarBuilder::from_varmap(&varmap, &taps, &device);
    let embedding = nn::embedding(num_words, dim, vb.pp("embedding"))?;
    embedding
        .embeddings()
        .set(&uniform_tensor((num_words, dim), 0.05, noise)?)?;
    let net = nn::Sequential::new()
        .embedding(embedding)
        .mean_over_time()
        .linear(keras_dense(dim, hidden, noise, vb.pp("dense1"))?)
        .relu()
        .linear(keras_dense(hidden, 2, noise, vb.pp("dense2"))?);
    nn::ModuleClassifier::new(net, &varmap, &taps, &device)
}
