//! A Candle module built from DP layers as a [`Classifier`] on a labelled [`Dataset`].

use candle_core::{Device, Module, Tensor, Var};
use candle_nn::VarMap;

use super::contribution::NormMethod;
use super::fused_route::FusedRoute;
use super::gradients::PrivateGradients;
use super::loss;
use super::sequential::Sequential;
use super::taps::Taps;
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::private_model::{
    clipped_gradient_of_batch, Classifier, ClippedGradient, DeviceClippedGradient, PrivateModel,
};
use crate::ClipRule;

/// A module of DP layers that maps a batch of flat examples (B, example size) to logits
/// (B, classes) — reshaping inside, if it needs images — trained with per-example
/// cross-entropy. On a device other than the CPU the engine keeps its parameters there.
///
/// A [`Sequential`] of steps the fused executor runs (Conv2d, Linear, tanh, ReLU,
/// pooling, flatten) trains on it on the CPU — the same clipped sums within float
/// rounding, several times faster; every other module takes the general path of
/// [`Taps::clipped_gradients`](super::PrivateGradients).
pub struct ModuleClassifier<M> {
    module: M,
    taps: Taps,
    device: Device,
    method: NormMethod,
    fused: Option<FusedRoute>,
}

impl<M: Module + 'static> ModuleClassifier<M> {
    /// Fails closed unless every variable of `varmap` belongs to a DP layer of `taps`.
    pub fn new(module: M, varmap: &VarMap, taps: &Taps, device: &Device) -> Result<Self> {
        taps.check_covers(varmap)?;
        let any: &dyn std::any::Any = &module;
        let fused = any
            .downcast_ref::<Sequential>()
            .and_then(|net| FusedRoute::plan(net, taps, device));
        Ok(ModuleClassifier {
            module,
            taps: taps.clone(),
            device: device.clone(),
            method: NormMethod::Auto,
            fused,
        })
    }

    /// The general path even where the fused executor applies (to compare the two).
    pub fn without_fused_executor(mut self) -> Self {
        self.fused = None;
        self
    }

    /// Whether the fused executor computes this model's gradients.
    pub fn is_fused(&self) -> bool {
        self.fused.is_some()
    }

    /// The module.
    pub fn module(&self) -> &M {
        &self.module
    }

    /// The taps.
    pub fn taps(&self) -> &Taps {
        &self.taps
    }

    /// The private backward of cross-entropy on `x` (moved to the module's device).
    fn private_gradients(
        &self,
        x: &Tensor,
        labels: &[u32],
        classes: usize,
        rule: ClipRule,
    ) -> Result<PrivateGradients> {
        if labels.is_empty() {
            return self.taps.zero_gradients();
        }
        let x = x.to_device(&self.device)?;
        crate::loss::check_labels(labels.len() * classes, labels, classes)?;
        let y = Tensor::from_slice(labels, labels.len(), &self.device)?;
        let losses = || {
            let logits = self.module.forward(&x)?;
            if logits.dims() != [labels.len(), classes] {
                return Err(Error::invalid_model(
                    "labels",
                    format!(
                        "logits {:?} for {} labels of {classes} classes",
                        logits.dims(),
                        labels.len()
                    ),
                ));
            }
            Ok(loss::cross_entropy(&logits, &y, None)?)
        };
        self.taps.clipped_gradients(losses, rule, self.method)
    }
}

impl<M: Module + 'static> PrivateModel for ModuleClassifier<M> {
    type Data = Dataset;

    fn num_params(&self) -> usize {
        self.taps.num_params()
    }

    fn parameters(&self) -> Result<Vec<f32>> {
        self.taps.flat_parameters()
    }

    fn set_parameters(&mut self, theta: &[f32]) -> Result<()> {
        self.taps.set_flat_parameters(theta)
    }

    fn clipped_gradient(
        &self,
        data: &Dataset,
        batch: &[usize],
        rule: ClipRule,
    ) -> Result<ClippedGradient> {
        clipped_gradient_of_batch(self, data, batch, rule)
    }

    fn architecture(&self) -> String {
        self.taps.architecture()
    }

    fn device_parameters(&self) -> Option<Vec<Var>> {
        (!self.device.is_cpu()).then(|| self.taps.vars())
    }

    fn clipped_gradient_on_device(
        &self,
        data: &Dataset,
        batch: &[usize],
        rule: ClipRule,
    ) -> Result<DeviceClippedGradient> {
        let (x, labels) = data.gather(batch)?;
        self.private_gradients(&x, &labels, data.classes, rule)?
            .into_device()
    }
}

impl<M: Module + 'static> Classifier for ModuleClassifier<M> {
    fn logits(&self, x: &Tensor) -> Result<Vec<f32>> {
        if let Some(route) = &self.fused {
            return route.logits(&self.taps, x);
        }
        let x = x.to_device(&self.device)?;
        Ok(self.module.forward(&x)?.flatten_all()?.to_vec1()?)
    }

    fn clipped_cross_entropy_gradient(
        &self,
        x: &Tensor,
        labels: &[u32],
        classes: usize,
        rule: ClipRule,
    ) -> Result<ClippedGradient> {
        if let (Some(route), false) = (&self.fused, labels.is_empty()) {
            return route.clipped_cross_entropy_gradient(&self.taps, x, labels, classes, rule);
        }
        self.private_gradients(x, labels, classes, rule)?
            .into_host()
    }
}
