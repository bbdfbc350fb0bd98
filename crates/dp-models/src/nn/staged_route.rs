//! The staged executor as the CPU fast path of a [`Sequential`] the fused executor does
//! not cover (a Linear or Conv2d without bias, say): the layers one by one with their
//! own CPU backward, no Candle graph — the same network, the same parameters (the DP
//! layers' variables, shared), the same clipped sums within float rounding
//! (tests/nn/executors.rs).
//!
//! A `Sequential` takes this path when every step has a direct CPU backward (Conv2d,
//! Linear, tanh, ReLU, max pooling, flatten), its parameters are exactly the taps' with
//! one owner per layer (so per-layer clipping groups the same way), and the device is
//! the CPU. Otherwise it takes the general path.

use std::ops::Range;

use candle_core::{Device, Tensor, Var};

use super::route_taps::{check_step, layer_slots};
use super::sequential::{Sequential, Step};
use super::taps::Taps;
use crate::error::Result;
use crate::private_model::Classifier;
use crate::staged::{DpLayer, Stage, StagedModel};
use crate::ClipRule;
use crate::ClippedGradient;

/// A [`Sequential`] planned onto the staged executor.
pub(crate) struct StagedRoute {
    model: StagedModel,
    /// Where each of the model's variables (in its order) sits in the taps' flat θ.
    slots: Vec<Range<usize>>,
    num_params: usize,
}

impl StagedRoute {
    /// The route, if `net` (with `taps`, on `device`) is one the executor runs directly.
    pub(crate) fn plan(net: &Sequential, taps: &Taps, device: &Device) -> Option<Self> {
        if !device.is_cpu() {
            return None;
        }
        let (stages, layers) = stages(net)?;
        let (slots, num_params) = layer_slots(&layers, taps)?;
        let slots = slots.into_iter().flatten().collect();
        let model = StagedModel::new(stages);
        Some(StagedRoute {
            model,
            slots,
            num_params,
        })
    }

    /// Logits of flat inputs `x`.
    pub(crate) fn logits(&self, x: &Tensor) -> Result<Vec<f32>> {
        self.model.logits(x)
    }

    /// The clipped cross-entropy gradient, its sum in the taps' layout; fail-closed as
    /// the general path: every variable of the taps' maps must be a DP layer's.
    pub(crate) fn clipped_cross_entropy_gradient(
        &self,
        taps: &Taps,
        x: &Tensor,
        labels: &[u32],
        classes: usize,
        rule: ClipRule,
    ) -> Result<ClippedGradient> {
        check_step(taps, self.num_params, self.slots.len())?;
        let staged = self
            .model
            .clipped_cross_entropy_gradient(x, labels, classes, rule)?;
        let staged_sum = staged.sum.into_flat()?;
        let mut sum = vec![0.0f32; self.num_params];
        let mut offset = 0;
        for slot in &self.slots {
            let n = slot.len();
            sum[slot.clone()].copy_from_slice(&staged_sum[offset..offset + n]);
            offset += n;
        }
        Ok(ClippedGradient {
            sum: sum.into(),
            squared_norms: staged.squared_norms,
            losses: staged.losses,
        })
    }
}

/// The executor's stages and each parametric layer's variables, or `None` if a step has
/// no direct CPU backward.
fn stages(net: &Sequential) -> Option<(Vec<Stage>, Vec<Vec<Var>>)> {
    let mut stages = Vec::with_capacity(net.len() + 1);
    if let Some((channels, height, width)) = net.image() {
        stages.push(Stage::Image {
            channels,
            height,
            width,
        });
    }
    let mut layers = Vec::new();
    for step in net.steps() {
        let layer: Box<dyn DpLayer> = match step {
            Step::Conv2d(conv) => Box::new(conv.clone()),
            Step::Linear(linear) if linear.lora_factors().is_some() => return None,
            Step::Linear(linear) => Box::new(linear.clone()),
            Step::Tanh => {
                stages.push(Stage::Tanh);
                continue;
            }
            Step::Relu => {
                stages.push(Stage::Relu);
                continue;
            }
            Step::MaxPool { kernel, stride } => {
                stages.push(Stage::MaxPool {
                    kernel: *kernel,
                    stride: *stride,
                });
                continue;
            }
            Step::Flatten => {
                stages.push(Stage::Flatten);
                continue;
            }
            Step::Embedding(_) | Step::MeanOverTime | Step::AvgPool { .. } | Step::Module(_) => {
                return None
            }
        };
        if !layer.has_input_gradient() {
            return None;
        }
        layers.push(layer.vars());
        stages.push(Stage::Layer(layer));
    }
    Some((stages, layers))
}
