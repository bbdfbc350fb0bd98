//! The papers' networks, written with the DP layers.
//!
//! Each is an [`nn::Sequential`] trained as an [`nn::ModuleClassifier`] (a [`Network`]): the
//! same public path a user's own network takes, on the fastest executor that covers it
//! (the fused executor on the CPU for the CNNs and MLPs). Parameters are named as in a
//! PyTorch `nn.Sequential` of the same steps (`"{index}.weight"`, `"{index}.bias"`) and
//! initialised as PyTorch does by default, drawn from a [`NoiseSource`] so that a seeded
//! source gives identical weights.

use candle_core::{Device, Tensor, Var};
use candle_nn::{Conv2dConfig, VarMap};
use dp_mechanisms::NoiseSource;

use crate::error::Result;
use crate::nn;

/// A network of DP layers in order, as a classifier: what the papers' models are.
pub type Network = nn::ModuleClassifier<nn::Sequential>;

/// The activation of a CNN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// tanh (Papernot et al.'s tempered sigmoid; Tramèr & Boneh).
    Tanh,
    /// ReLU, max(x, 0).
    Relu,
}

impl Activation {
    fn apply(self, net: nn::Sequential) -> nn::Sequential {
        match self {
            Activation::Tanh => net.tanh(),
            Activation::Relu => net.relu(),
        }
    }
}

/// Builds a [`Network`] step by step, naming each layer by its index in the stack and
/// initialising it from the noise source.
struct Builder<'a> {
    net: nn::Sequential,
    varmap: VarMap,
    taps: nn::Taps,
    noise: &'a mut NoiseSource,
}

impl<'a> Builder<'a> {
    fn new(net: nn::Sequential, noise: &'a mut NoiseSource) -> Self {
        Builder {
            net,
            varmap: VarMap::new(),
            taps: nn::Taps::new(),
            noise,
        }
    }

    fn vb(&self) -> nn::DpVarBuilder {
        nn::DpVarBuilder::from_varmap(&self.varmap, &self.taps, &Device::Cpu).pp(self.net.len())
    }

    /// A convolution with bias, `kernel × kernel`.
    fn conv2d(
        mut self,
        cin: usize,
        cout: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
    ) -> Result<Self> {
        let config = Conv2dConfig {
            stride,
            padding,
            ..Default::default()
        };
        let layer = nn::conv2d(cin, cout, kernel, config, self.vb())?;
        torch_default_init(
            layer.weight(),
            layer.bias(),
            cin * kernel * kernel,
            self.noise,
        )?;
        self.net = self.net.conv2d(layer);
        Ok(self)
    }

    /// A linear layer with bias.
    fn linear(mut self, inputs: usize, outputs: usize) -> Result<Self> {
        let layer = nn::linear(inputs, outputs, self.vb())?;
        torch_default_init(layer.weight(), layer.bias(), inputs, self.noise)?;
        self.net = self.net.linear(layer);
        Ok(self)
    }

    /// A step without parameters.
    fn then(mut self, step: impl FnOnce(nn::Sequential) -> nn::Sequential) -> Self {
        self.net = step(self.net);
        self
    }

    fn build(self) -> Result<Network> {
        nn::ModuleClassifier::new(self.net, &self.varmap, &self.taps, &Device::Cpu)
    }
}

/// PyTorch's default initialisation of a Conv2d or Linear: weight and bias
/// U(−1/√fan_in, 1/√fan_in), the weight's values first in PyTorch's layout.
fn torch_default_init(
    weight: &Var,
    bias: Option<&Var>,
    fan_in: usize,
    noise: &mut NoiseSource,
) -> Result<()> {
    let bound = 1.0 / (fan_in as f64).sqrt();
    for var in std::iter::once(weight).chain(bias) {
        var.set(&uniform_tensor(var.shape().clone(), bound, noise)?)?;
    }
    Ok(())
}

/// The MNIST / Fashion-MNIST CNN of Tramèr & Boneh (and Papernot et al.), 26,010
/// parameters (`docs/reproduction/sa-dpsgd.md`, "Experimental setup"): Conv(1→16, k8, s2,
/// p2) → act → MaxPool(2, 1) → Conv(16→32, k4, s2) → act → MaxPool(2, 1) → Flatten(512) →
/// Linear(32) → act → Linear(10), on flat 28 × 28 images.
pub fn mnist_cnn(activation: Activation, noise: &mut NoiseSource) -> Result<Network> {
    mnist_cnn_with_padding(activation, 2, noise)
}

/// The GDP paper's MNIST CNN (Bu et al. 2020; the authors' PyTorch twin of their TF
/// model, `docs/reproduction/gdp.md`, "Experiment settings"): Conv(1→16, k8, s2, p3) → ReLU
/// → MaxPool(2, 1) → Conv(16→32, k4, s2) → ReLU → MaxPool(2, 1) → Flatten(512) →
/// Linear(32) → ReLU → Linear(10); 26,010 parameters. Feature maps 14 → 13 → 5 → 4, as
/// TF's `'same'` padding.
pub fn gdp_mnist_cnn(noise: &mut NoiseSource) -> Result<Network> {
    mnist_cnn_with_padding(Activation::Relu, 3, noise)
}

/// The two MNIST CNNs, which differ in the first convolution's padding.
fn mnist_cnn_with_padding(
    activation: Activation,
    padding: usize,
    noise: &mut NoiseSource,
) -> Result<Network> {
    let act = |net| activation.apply(net);
    Builder::new(nn::Sequential::images(1, 28, 28), noise)
        .conv2d(1, 16, 8, 2, padding)?
        .then(act)
        .then(|net| net.max_pool2d(2, 1))
        .conv2d(16, 32, 4, 2, 0)?
        .then(act)
        .then(|net| net.max_pool2d(2, 1).flatten())
        .linear(32 * 4 * 4, 32)?
        .then(act)
        .linear(32, 10)?
        .build()
}

/// The CIFAR-10 CNN of Tramèr & Boneh (and Papernot et al.), 550,570 parameters
/// (`docs/reproduction/sa-dpsgd.md`, "Experimental setup"): [Conv3×3(p1) → act] × 2 per
/// block with 32, 64 and 128 channels, MaxPool(2, 2) after each block, Flatten(2048) →
/// Linear(128) → act → Linear(10), on flat 3 × 32 × 32 images.
pub fn cifar10_cnn(activation: Activation, noise: &mut NoiseSource) -> Result<Network> {
    let act = |net| activation.apply(net);
    let mut builder = Builder::new(nn::Sequential::images(3, 32, 32), noise);
    let mut channels = 3;
    for width in [32, 64, 128] {
        builder = builder
            .conv2d(channels, width, 3, 1, 1)?
            .then(act)
            .conv2d(width, width, 3, 1, 1)?
            .then(act)
            .then(|net| net.max_pool2d(2, 2));
        channels = width;
    }
    builder
        .then(|net| net.flatten())
        .linear(128 * 4 * 4, 128)?
        .then(act)
        .linear(128, 10)?
        .build()
}

/// A multilayer perceptron on flat inputs: Linear → act for each hidden width, then a
/// Linear to `classes`.
pub fn mlp(
    inputs: usize,
    hidden: &[usize],
    classes: usize,
    activation: Activation,
    noise: &mut NoiseSource,
) -> Result<Network> {
    let mut builder = Builder::new(nn::Sequential::new(), noise);
    let mut width = inputs;
    for &next in hidden {
        builder = builder
            .linear(width, next)?
            .then(|net| activation.apply(net));
        width = next;
    }
    builder.linear(width, classes)?.build()
}

/// The GDP paper's Adult model: 123 binary features → Dense(16, ReLU) → Dense(2), 2,018
/// parameters (`docs/reproduction/gdp.md`, "Experiment settings").
pub fn adult_mlp(noise: &mut NoiseSource) -> Result<Network> {
    mlp(123, &[16], 2, Activation::Relu, noise)
}

/// Values uniform on (−bound, bound) from `noise`.
fn uniform_tensor(
    shape: impl Into<candle_core::Shape>,
    bound: f64,
    noise: &mut NoiseSource,
) -> Result<Tensor> {
    let shape = shape.into();
    let values: Vec<f32> = (0..shape.elem_count())
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
) -> Result<Network> {
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
