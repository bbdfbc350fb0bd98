//! The fused executor as the CPU fast path of a [`Sequential`]: the same network, the
//! same parameters (read from the DP layers' variables before every use), the same
//! clipped sums within float rounding (tests/nn/fused_route.rs), at the fused tier's
//! speed.
//!
//! A `Sequential` takes this path when every step is one the executor runs (Conv2d and
//! Linear with bias, tanh, ReLU, max and average pooling, flatten), its parameters are
//! exactly the taps' (one owner per layer, so per-layer clipping groups the same way),
//! everything is f32 and the device is the CPU. Otherwise it takes the general path.

use std::ops::Range;

use candle_core::{DType, Device, Tensor, Var};

use super::route_taps::{check_step, check_unchanged, layer_slots};
use super::sequential::{Sequential, Step};
use super::taps::Taps;
use crate::error::Result;
use crate::fused::{from_torch, to_torch, Flops, FusedModel, LayerSpec, NetSpec, TorchLayer};
use crate::private_model::Classifier;
use crate::staged::DpLayer;
use crate::ClipRule;
use crate::ClippedGradient;

/// Where one parametric layer's tensors sit in the taps' flat θ.
struct Slot {
    weight: Range<usize>,
    weight_shape: Vec<usize>,
    bias: Range<usize>,
}

/// A [`Sequential`] planned onto the fused executor.
pub(crate) struct FusedRoute {
    model: FusedModel,
    slots: Vec<Slot>,
    num_params: usize,
}

impl FusedRoute {
    /// The route, if `net` (with `taps`, on `device`) is one the executor runs.
    pub(crate) fn plan(net: &Sequential, taps: &Taps, device: &Device) -> Option<Self> {
        if !device.is_cpu() {
            return None;
        }
        let (specs, layers) = specs(net)?;
        let input = match net.image() {
            Some((c, h, w)) => (c, h, w),
            None => (first_linear_inputs(&layers)?, 1, 1),
        };
        let spec = NetSpec::new(input.0, input.1, input.2, &specs).ok()?;
        let (slots, num_params) = slots(&layers, taps)?;
        if spec.num_params() != num_params {
            return None;
        }
        let model = FusedModel::from_theta(spec.clone(), vec![0.0; spec.num_params()]).ok()?;
        let route = FusedRoute {
            model,
            slots,
            num_params,
        };
        // The layers' shapes must be the spec's: the layout conversion checks each one.
        route.load(&taps.flat_parameters().ok()?).ok()?;
        Some(route)
    }

    /// Sets the executor's θ from the taps' flat θ.
    fn load(&self, theta: &[f32]) -> Result<()> {
        let layers: Vec<TorchLayer> = self
            .slots
            .iter()
            .map(|slot| TorchLayer {
                weight: theta[slot.weight.clone()].to_vec(),
                weight_shape: slot.weight_shape.clone(),
                bias: theta[slot.bias.clone()].to_vec(),
            })
            .collect();
        let internal = from_torch(self.model.spec(), &layers)?;
        let n = internal.len();
        self.model
            .theta()
            .set(&Tensor::from_vec(internal, n, &Device::Cpu)?)?;
        Ok(())
    }

    /// The executor's count of floating-point operations per sample.
    pub(crate) fn flops_per_sample(&self) -> Flops {
        self.model.spec().flops_per_sample()
    }

    /// Logits of flat inputs `x` at the taps' θ.
    pub(crate) fn logits(&self, taps: &Taps, x: &Tensor) -> Result<Vec<f32>> {
        check_unchanged(taps, self.num_params, 2 * self.slots.len())?;
        self.load(&taps.flat_parameters()?)?;
        self.model.logits(x)
    }

    /// The clipped cross-entropy gradient at the taps' θ, its sum in the taps' layout;
    /// fail-closed as the general path: every variable of the taps' maps must be a DP
    /// layer's.
    pub(crate) fn clipped_cross_entropy_gradient(
        &self,
        taps: &Taps,
        x: &Tensor,
        labels: &[u32],
        classes: usize,
        rule: ClipRule,
    ) -> Result<ClippedGradient> {
        check_step(taps, self.num_params, 2 * self.slots.len())?;
        self.load(&taps.flat_parameters()?)?;
        let fused = self
            .model
            .clipped_cross_entropy_gradient(x, labels, classes, rule)?;
        let fused_sum = fused.sum.into_flat()?;
        let mut sum = vec![0.0f32; self.num_params];
        for (slot, layer) in self
            .slots
            .iter()
            .zip(to_torch(self.model.spec(), &fused_sum))
        {
            sum[slot.weight.clone()].copy_from_slice(&layer.weight);
            sum[slot.bias.clone()].copy_from_slice(&layer.bias);
        }
        Ok(ClippedGradient {
            sum: sum.into(),
            squared_norms: fused.squared_norms,
            losses: fused.losses,
        })
    }
}

/// A parametric layer's weight and bias.
type WeightAndBias = (Var, Var);

/// The executor's layer specs and the parametric layers' (weight, bias), or `None` if a
/// step is not one it runs.
fn specs(net: &Sequential) -> Option<(Vec<LayerSpec>, Vec<WeightAndBias>)> {
    let (mut specs, mut layers) = (Vec::new(), Vec::new());
    for step in net.steps() {
        specs.push(match step {
            // The layers' own fused form (bias required), as the staged executor uses it.
            Step::Conv2d(conv) => {
                layers.push((conv.weight().clone(), conv.bias()?.clone()));
                conv.fused_layer()?
            }
            // A LoRA adapter is outside the fused executor's layers.
            Step::Linear(linear) if linear.lora_factors().is_some() => return None,
            Step::Linear(linear) => {
                layers.push((linear.weight().clone(), linear.bias()?.clone()));
                linear.fused_layer()?
            }
            Step::Tanh => LayerSpec::Tanh,
            Step::Relu => LayerSpec::Relu,
            Step::MaxPool { kernel, stride } => LayerSpec::MaxPool {
                kernel: *kernel,
                stride: *stride,
            },
            Step::AvgPool { kernel, stride } => LayerSpec::AvgPool {
                kernel: *kernel,
                stride: *stride,
            },
            Step::Flatten => LayerSpec::Flatten,
            Step::Embedding(_) | Step::MeanOverTime | Step::Module(_) => return None,
        });
    }
    let f32_only = layers
        .iter()
        .all(|(w, b)| w.dtype() == DType::F32 && b.dtype() == DType::F32);
    f32_only.then_some((specs, layers))
}

/// A flat network's input size: the first parametric layer's, which must be a Linear.
fn first_linear_inputs(layers: &[WeightAndBias]) -> Option<usize> {
    let dims = layers.first()?.0.dims();
    (dims.len() == 2).then(|| dims[1])
}

/// Each layer's place in the taps' flat θ ([`layer_slots`]); with the count of
/// parameters.
fn slots(layers: &[WeightAndBias], taps: &Taps) -> Option<(Vec<Slot>, usize)> {
    let vars: Vec<Vec<Var>> = layers
        .iter()
        .map(|(w, b)| vec![w.clone(), b.clone()])
        .collect();
    let (ranges, num_params) = layer_slots(&vars, taps)?;
    let slots = layers
        .iter()
        .zip(ranges)
        .map(|((weight, _), mut r)| {
            let (bias, weight_range) = (r.pop()?, r.pop()?);
            Some(Slot {
                weight: weight_range,
                weight_shape: weight.dims().to_vec(),
                bias,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some((slots, num_params))
}
