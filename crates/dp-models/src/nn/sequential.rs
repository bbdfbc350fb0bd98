//! A stack of DP layers applied in order, as `candle_nn::Sequential` is for its layers.
//!
//! Its steps are named (embedding, convolution, linear, activation, pooling, flatten, mean
//! over time), so the library can see the whole network and a
//! [`ModuleClassifier`](super::ModuleClassifier) of it picks the fastest
//! [`Executor`](super::Executor) that covers it, with no tier to name: on the CPU the
//! fused executor (one pass per sample computing gradient, norm, clip and clipped sum),
//! else the staged executor (layer by layer, a direct backward without Candle's graph).
//! Any other module can be a step ([`Sequential::module`]); the network then takes the
//! general path.

use candle_core::{Module, Tensor};

use super::conv2d::Conv2d;
use super::embedding::Embedding;
use super::linear::Linear;
use super::ops;

/// One step of a [`Sequential`].
pub(crate) enum Step {
    Embedding(Embedding),
    Conv2d(Conv2d),
    Linear(Linear),
    Tanh,
    Relu,
    MaxPool { kernel: usize, stride: usize },
    AvgPool { kernel: usize, stride: usize },
    Flatten,
    MeanOverTime,
    Module(Box<dyn Module + Send + Sync>),
}

/// DP layers in order, on flat inputs (B, n) or, with [`Sequential::images`], on flat
/// images (B, C·H·W, channel-major as datasets store them) reshaped to (B, C, H, W).
///
/// ```no_run
/// use candle_core::Device;
/// use candle_nn::{Conv2dConfig, VarMap};
/// use dp_models::nn::{self, DpVarBuilder, Taps};
///
/// # fn main() -> dp_models::Result<()> {
/// let (varmap, taps, device) = (VarMap::new(), Taps::new(), Device::Cpu);
/// let vb = DpVarBuilder::from_varmap(&varmap, &taps, &device);
/// let conv = |stride, padding| Conv2dConfig { stride, padding, ..Default::default() };
/// let net = nn::Sequential::images(1, 28, 28)
///     .conv2d(nn::conv2d(1, 16, 8, conv(2, 2), vb.pp("conv1"))?)
///     .tanh()
///     .max_pool2d(2, 1)
///     .conv2d(nn::conv2d(16, 32, 4, conv(2, 0), vb.pp("conv2"))?)
///     .tanh()
///     .max_pool2d(2, 1)
///     .flatten()
///     .linear(nn::linear(512, 32, vb.pp("fc1"))?)
///     .tanh()
///     .linear(nn::linear(32, 10, vb.pp("fc2"))?);
/// let model = nn::ModuleClassifier::new(net, &varmap, &taps, &device)?;
/// # Ok(()) }
/// ```
#[derive(Default)]
pub struct Sequential {
    image: Option<(usize, usize, usize)>,
    steps: Vec<Step>,
}

impl Sequential {
    /// An empty stack on flat inputs (B, n).
    pub fn new() -> Self {
        Sequential::default()
    }

    /// An empty stack on images of `channels × height × width`, given flat.
    pub fn images(channels: usize, height: usize, width: usize) -> Self {
        Sequential {
            image: Some((channels, height, width)),
            steps: Vec::new(),
        }
    }

    fn push(mut self, step: Step) -> Self {
        self.steps.push(step);
        self
    }

    /// A DP embedding of token ids (B, T), given as integers or as the floats datasets
    /// store them in: (B, T) → (B, T, D).
    pub fn embedding(self, layer: Embedding) -> Self {
        self.push(Step::Embedding(layer))
    }

    /// A DP 2-D convolution.
    pub fn conv2d(self, layer: Conv2d) -> Self {
        self.push(Step::Conv2d(layer))
    }

    /// A DP linear layer (on a flat activation: [`flatten`](Self::flatten) after images).
    pub fn linear(self, layer: Linear) -> Self {
        self.push(Step::Linear(layer))
    }

    /// tanh of every element (no parameters).
    pub fn tanh(self) -> Self {
        self.push(Step::Tanh)
    }

    /// ReLU, max(x, 0), of every element (no parameters).
    pub fn relu(self) -> Self {
        self.push(Step::Relu)
    }

    /// Max pooling over `kernel × kernel` windows every `stride` (PyTorch's tie rule).
    pub fn max_pool2d(self, kernel: usize, stride: usize) -> Self {
        self.push(Step::MaxPool { kernel, stride })
    }

    /// Average pooling over `kernel × kernel` windows every `stride` (no padding). Off the
    /// fused executor (another device, another step in the stack) Candle's backward needs
    /// `stride == kernel`.
    pub fn avg_pool2d(self, kernel: usize, stride: usize) -> Self {
        self.push(Step::AvgPool { kernel, stride })
    }

    /// (B, C, H, W) → (B, C·H·W).
    pub fn flatten(self) -> Self {
        self.push(Step::Flatten)
    }

    /// The mean over the sequence: (B, T, D) → (B, D), padding included (as Keras's
    /// `GlobalAveragePooling1D` without a mask).
    pub fn mean_over_time(self) -> Self {
        self.push(Step::MeanOverTime)
    }

    /// Any other module (its DP layers still tapped); the network then trains on the
    /// general path.
    pub fn module<M: Module + Send + Sync + 'static>(self, module: M) -> Self {
        self.push(Step::Module(Box::new(module)))
    }

    /// The number of steps.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Whether there is no step.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    pub(crate) fn steps(&self) -> &[Step] {
        &self.steps
    }

    pub(crate) fn image(&self) -> Option<(usize, usize, usize)> {
        self.image
    }
}

/// The steps, for checkpoint fingerprints: two stacks with the same parameters but
/// another activation, pooling or convolution geometry describe differently.
impl std::fmt::Debug for Sequential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let steps: Vec<String> = self.steps.iter().map(Step::describe).collect();
        f.debug_struct("Sequential")
            .field("image", &self.image)
            .field("steps", &steps)
            .finish()
    }
}

impl Step {
    fn describe(&self) -> String {
        match self {
            Step::Embedding(_) => "embedding".into(),
            Step::Conv2d(layer) => {
                let c = layer.config();
                format!("conv2d(stride {}, padding {})", c.stride, c.padding)
            }
            Step::Linear(_) => "linear".into(),
            Step::Tanh => "tanh".into(),
            Step::Relu => "relu".into(),
            Step::MaxPool { kernel, stride } => format!("max_pool2d({kernel}, {stride})"),
            Step::AvgPool { kernel, stride } => format!("avg_pool2d({kernel}, {stride})"),
            Step::Flatten => "flatten".into(),
            Step::MeanOverTime => "mean_over_time".into(),
            Step::Module(_) => "module".into(),
        }
    }
}

impl Module for Sequential {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let mut x = match self.image {
            Some((c, h, w)) => x.reshape(((), c, h, w))?,
            None => x.clone(),
        };
        for step in &self.steps {
            x = match step {
                Step::Embedding(layer) => layer.forward(&x)?,
                Step::Conv2d(layer) => layer.forward(&x)?,
                Step::Linear(layer) => layer.forward(&x)?,
                Step::Tanh => ops::tanh(&x)?,
                Step::Relu => x.relu()?,
                Step::MaxPool { kernel, stride } => ops::max_pool2d(&x, *kernel, *stride)?,
                Step::AvgPool { kernel, stride } => x.avg_pool2d_with_stride(*kernel, *stride)?,
                Step::Flatten => x.flatten_from(1)?,
                Step::MeanOverTime => x.mean(1)?,
                Step::Module(module) => module.forward(&x)?,
            };
        }
        Ok(x)
    }
}
