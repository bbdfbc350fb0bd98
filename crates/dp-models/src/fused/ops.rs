//! The fused forward and DP backward as Candle custom ops, and the model that uses them.

use std::sync::{Arc, Mutex};

use candle_core::{CpuStorage, CustomOp2, Device, Layout, Shape, Tensor, Var};

use super::exec::{backward, forward, BackwardOutput, Keep, Workspace};
use super::spec::NetSpec;
use crate::cpu::f32_slice;
use crate::error::{Error, Result};
use crate::ClipRule;

fn lock(ws: &Mutex<Workspace>) -> candle_core::Result<std::sync::MutexGuard<'_, Workspace>> {
    ws.lock()
        .map_err(|_| candle_core::Error::Msg("fused workspace poisoned by an earlier panic".into()))
}

/// `(x: (B, C·H·W), θ: (P,)) → logits (B, O)`; keeps in the workspace what `keep` says.
struct FusedForward {
    spec: Arc<NetSpec>,
    ws: Arc<Mutex<Workspace>>,
    keep: Keep,
}

impl CustomOp2 for FusedForward {
    fn name(&self) -> &'static str {
        "dp-fused-forward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (batch, features) = l1.shape().dims2()?;
        if features != self.spec.input_size() || l2.shape().elem_count() != self.spec.num_params() {
            return Err(candle_core::Error::Msg(format!(
                "fused forward: input ({batch}, {features}) and θ {:?} do not fit the network",
                l2.shape()
            )));
        }
        let (x, theta) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?);
        let mut ws = lock(&self.ws)?;
        let logits = forward(&self.spec, theta, x, batch, &mut ws, self.keep);
        Ok((
            CpuStorage::F32(logits),
            Shape::from((batch, self.spec.output_size())),
        ))
    }
}

/// `(dlogits: (B, O), θ) → (P + B,)`: `[Σ cᵢ∇ℓᵢ | ‖∇ℓᵢ‖²]`.
struct FusedBackward {
    spec: Arc<NetSpec>,
    ws: Arc<Mutex<Workspace>>,
    rule: ClipRule,
}

impl CustomOp2 for FusedBackward {
    fn name(&self) -> &'static str {
        "dp-fused-backward"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (batch, outputs) = l1.shape().dims2()?;
        let mut ws = lock(&self.ws)?;
        if outputs != self.spec.output_size() {
            return Err(candle_core::Error::Msg(
                "fused backward: dlogits do not fit the network".into(),
            ));
        }
        if ws.batch() == 0 {
            return Err(candle_core::Error::Msg(
                "fused backward: no training forward to differentiate (none yet, or the last was an inference forward)".into(),
            ));
        }
        if batch != ws.batch() || l2.shape().elem_count() != self.spec.num_params() {
            return Err(candle_core::Error::Msg(format!(
                "fused backward: dlogits for {batch} samples after a forward of {}, or θ of the wrong size",
                ws.batch()
            )));
        }
        let (dlogits, theta) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?);
        let BackwardOutput {
            mut gradient_sum,
            squared_norms,
        } = backward(&self.spec, theta, dlogits, &mut ws, self.rule);
        gradient_sum.extend_from_slice(&squared_norms);
        let len = gradient_sum.len();
        Ok((CpuStorage::F32(gradient_sum), Shape::from(len)))
    }
}

/// A sequential network on the fused tier: one flat parameter `Var` θ in internal layout,
/// a forward and a DP backward that are each one Candle custom op.
#[derive(Clone)]
pub struct FusedModel {
    spec: Arc<NetSpec>,
    theta: Var,
    ws: Arc<Mutex<Workspace>>,
}

impl FusedModel {
    /// A model with the given θ (internal layout).
    pub fn from_theta(spec: NetSpec, theta: Vec<f32>) -> Result<Self> {
        if theta.len() != spec.num_params() {
            return Err(Error::invalid_model(
                "fused model",
                format!(
                    "θ has {} values, the network {}",
                    theta.len(),
                    spec.num_params()
                ),
            ));
        }
        let theta = Var::from_tensor(&Tensor::from_vec(theta, spec.num_params(), &Device::Cpu)?)?;
        Ok(FusedModel {
            spec: Arc::new(spec),
            theta,
            ws: Arc::new(Mutex::new(Workspace::default())),
        })
    }

    /// The network.
    pub fn spec(&self) -> &NetSpec {
        &self.spec
    }

    /// θ, the one trainable `Var`.
    pub fn theta(&self) -> &Var {
        &self.theta
    }

    /// θ as values.
    pub fn theta_values(&self) -> Result<Vec<f32>> {
        Ok(self.theta.as_tensor().to_vec1::<f32>()?)
    }

    /// Logits for `x` (B, C·H·W), NCHW images flattened: a training forward, which keeps
    /// the activations that [`FusedModel::backward`] reads.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_keeping(x, Keep::Backward)
    }

    /// Logits for `x` keeping what `keep` says: [`Keep::Logits`] is an inference forward
    /// (evaluation, an energy), the same logits bit for bit without writing the batch's
    /// activations; a backward after it is refused.
    pub fn forward_keeping(&self, x: &Tensor, keep: Keep) -> Result<Tensor> {
        let x = x.contiguous()?;
        let op = FusedForward {
            spec: self.spec.clone(),
            ws: self.ws.clone(),
            keep,
        };
        Ok(x.apply_op2_no_bwd(self.theta.as_tensor(), &op)?)
    }

    /// The backward of the last forward, from d(Σᵢ ℓᵢ)/d logits: the combined gradient
    /// (P,) and per-sample squared norms (B,).
    pub fn backward(&self, dlogits: &Tensor, rule: ClipRule) -> Result<(Tensor, Tensor)> {
        let dlogits = dlogits.contiguous()?;
        let op = FusedBackward {
            spec: self.spec.clone(),
            ws: self.ws.clone(),
            rule,
        };
        let out = dlogits.apply_op2_no_bwd(self.theta.as_tensor(), &op)?;
        let p = self.spec.num_params();
        let batch = out.dim(0)? - p;
        Ok((out.narrow(0, 0, p)?, out.narrow(0, p, batch)?))
    }
}

/// Test-only constructors and views: PyTorch's initialisation and layout, safetensors in
/// PyTorch's names, and the per-sample gradients the backward never materialises.
#[cfg(test)]
impl FusedModel {
    /// A model from PyTorch-layout tensors.
    pub fn from_torch(spec: NetSpec, layers: &[super::layout::TorchLayer]) -> Result<Self> {
        let theta = super::layout::from_torch(&spec, layers)?;
        Self::from_theta(spec, theta)
    }

    /// A model with PyTorch's default initialisation (U(−1/√fan_in, 1/√fan_in) for weights
    /// and biases), drawn from `noise` so that a seeded source gives identical weights.
    pub fn new(spec: NetSpec, noise: &mut dp_mechanisms::NoiseSource) -> Result<Self> {
        let mut theta = vec![0.0f32; spec.num_params()];
        for layer in &spec.layers {
            let fan_in = match layer.kind {
                super::spec::Kind::Conv { kernel, cin, .. } => kernel * kernel * cin,
                super::spec::Kind::Linear { nin, .. } => nin,
                _ => continue,
            };
            let bound = 1.0 / (fan_in as f64).sqrt();
            for v in &mut theta[layer.params.0..][..layer.params.1] {
                *v = ((2.0 * noise.uniform() - 1.0) * bound) as f32;
            }
        }
        Self::from_theta(spec, theta)
    }

    /// The parameters in PyTorch layout.
    pub fn to_torch(&self) -> Result<Vec<super::layout::TorchLayer>> {
        Ok(super::layout::to_torch(&self.spec, &self.theta_values()?))
    }

    /// Saves the weights as safetensors in PyTorch layout, named like a PyTorch
    /// `nn.Sequential` of the same layers (`"{index}.weight"`, `"{index}.bias"`), so
    /// `model.load_state_dict(safetensors.torch.load_file(path))` works on the PyTorch side.
    pub fn save_safetensors(&self, path: &std::path::Path) -> Result<()> {
        let mut tensors = std::collections::HashMap::new();
        let indices = self
            .spec
            .layers
            .iter()
            .enumerate()
            .filter(|(_, l)| l.params.1 > 0)
            .map(|(i, _)| i);
        for (index, layer) in indices.zip(self.to_torch()?) {
            let (weight, bias) = layer.to_tensors(&Device::Cpu)?;
            tensors.insert(format!("{index}.weight"), weight);
            tensors.insert(format!("{index}.bias"), bias);
        }
        candle_core::safetensors::save(&tensors, path)?;
        Ok(())
    }

    /// Loads weights saved by [`save_safetensors`](Self::save_safetensors) (or by PyTorch
    /// from an `nn.Sequential` of the same layers).
    pub fn load_safetensors(spec: NetSpec, path: &std::path::Path) -> Result<Self> {
        let tensors = candle_core::safetensors::load(path, &Device::Cpu)?;
        let get = |name: String| {
            tensors.get(&name).cloned().ok_or_else(|| {
                Error::invalid_model(
                    "fused model",
                    format!("{}: no tensor {name}", path.display()),
                )
            })
        };
        let mut layers = Vec::new();
        for (index, _) in spec
            .layers
            .iter()
            .enumerate()
            .filter(|(_, l)| l.params.1 > 0)
        {
            let weight = get(format!("{index}.weight"))?.to_dtype(candle_core::DType::F32)?;
            let bias = get(format!("{index}.bias"))?.to_dtype(candle_core::DType::F32)?;
            layers.push(super::layout::TorchLayer {
                weight_shape: weight.dims().to_vec(),
                weight: weight.flatten_all()?.to_vec1()?,
                bias: bias.flatten_all()?.to_vec1()?,
            });
        }
        Self::from_torch(spec, &layers)
    }

    /// Per-sample gradients of the last forward (B × P), for tests.
    pub fn per_sample_gradients(&self, dlogits: &[f32]) -> Result<Vec<Vec<f32>>> {
        let theta = self.theta_values()?;
        let mut ws = self
            .ws
            .lock()
            .map_err(|_| Error::invalid_model("fused model", "workspace poisoned"))?;
        Ok(super::exec::per_sample_gradients(
            &self.spec, &theta, dlogits, &mut ws,
        ))
    }
}

impl std::fmt::Debug for FusedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FusedModel")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}
