//! The fused tier as the fast path of the sequential models it covers.
//!
//! An [`AutogradModel`] whose stages are all in the fused vocabulary — `nn::Conv2d` and
//! `nn::Linear` with biases, tanh, ReLU, max-pool, flatten, on flat or image inputs — is
//! also compiled at construction into a [`FusedModel`] of the same network; on the CPU its
//! private gradients then come from the fused kernels (one op forward, one op backward,
//! about twice the stage path's speed on the MNIST CNN, `cargo xtask bench dp-sgd`). The
//! layers' `Var`s stay the model's parameters: each call copies them into the fused θ
//! and maps the fused clipped sum back to stage order, so a weight set on a layer directly
//! is never stale. [`AutogradModel::without_fused`] keeps the stage path (the reference
//! the fused path is tested against).

use candle_core::{Device, Tensor};

use super::model::AutogradModel;
use super::stage::Stage;
use crate::error::{Error, Result};
use crate::fused::{from_torch, to_torch, FusedModel, LayerSpec, NetSpec, TorchLayer};
use crate::private_model::{Classifier, ClippedGradient};
use crate::ClipRule;

/// The fused network of `stages`, where the fused tier covers every stage.
pub(super) fn fused_network(stages: &[Stage]) -> Option<FusedModel> {
    let mut layers = Vec::with_capacity(stages.len() + 1);
    let input = match stages.first()? {
        Stage::Image {
            channels,
            height,
            width,
        } => (*channels, *height, *width),
        Stage::Layer(layer) => {
            // Flat (B, in) inputs: the first layer's weight is (out, in).
            let inputs = layer.vars().first()?.as_tensor().dims2().ok()?.1;
            layers.push(LayerSpec::Flatten);
            (inputs, 1, 1)
        }
        _ => return None,
    };
    for (i, stage) in stages.iter().enumerate() {
        layers.push(match stage {
            Stage::Image { .. } if i == 0 => continue,
            Stage::Layer(layer) => layer.fused_layer()?,
            Stage::Tanh => LayerSpec::Tanh,
            Stage::Relu => LayerSpec::Relu,
            Stage::MaxPool { kernel, stride } => LayerSpec::MaxPool {
                kernel: *kernel,
                stride: *stride,
            },
            Stage::Flatten => LayerSpec::Flatten,
            Stage::Image { .. } | Stage::MeanOverTime => return None,
        });
    }
    let spec = NetSpec::new(input.0, input.1, input.2, &layers).ok()?;
    let theta = vec![0.0; spec.num_params()];
    FusedModel::from_theta(spec, theta).ok()
}

impl AutogradModel {
    /// The layers' parameters in PyTorch layout, one entry per parametric stage.
    fn torch_layers(&self) -> Result<Vec<TorchLayer>> {
        let mut layers = Vec::new();
        for stage in &self.stages {
            if let Stage::Layer(layer) = stage {
                let vars = layer.vars();
                let [weight, bias] = vars.as_slice() else {
                    return Err(Error::invalid_model(
                        "fused stage",
                        "a fused layer has exactly a weight and a bias",
                    ));
                };
                let (weight, bias) = (weight.as_tensor(), bias.as_tensor());
                layers.push(TorchLayer {
                    weight: weight.flatten_all()?.to_vec1()?,
                    weight_shape: weight.dims().to_vec(),
                    bias: bias.to_vec1()?,
                });
            }
        }
        Ok(layers)
    }

    /// The private gradients by the fused tier, where it covers this model and input (CPU,
    /// flat inputs of the network's size); `None` where the stage path must run.
    pub(crate) fn fused_gradient(
        &self,
        x: &Tensor,
        labels: &[u32],
        classes: usize,
        rule: ClipRule,
    ) -> Result<Option<ClippedGradient>> {
        let Some(fused) = &self.fused else {
            return Ok(None);
        };
        let spec = fused.spec();
        if !x.device().is_cpu() || x.rank() != 2 || x.dim(1)? != spec.input_size() {
            return Ok(None);
        }
        let theta = from_torch(spec, &self.torch_layers()?)?;
        fused
            .theta()
            .set(&Tensor::from_vec(theta, spec.num_params(), &Device::Cpu)?)?;
        let out = fused.clipped_cross_entropy_gradient(x, labels, classes, rule)?;
        let sum = to_torch(spec, &out.sum)
            .into_iter()
            .flat_map(|layer| layer.weight.into_iter().chain(layer.bias))
            .collect();
        Ok(Some(ClippedGradient { sum, ..out }))
    }
}
