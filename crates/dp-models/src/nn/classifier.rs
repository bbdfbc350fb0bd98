//! A Candle module built from DP layers as a [`Classifier`] on a labelled [`Dataset`].

use candle_core::{Device, Module, Tensor, Var};
use candle_nn::VarMap;

use super::contribution::NormMethod;
use super::executor::{Executor, Route};
use super::loss;
use super::taps::Taps;
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::private_model::{clipped_gradient_of_batch, Classifier, PrivateModel};
use crate::{ClipRule, ClippedGradient};

/// A module of DP layers that maps a batch of flat examples (B, example size) to logits
/// (B, classes) — reshaping inside, if it needs images — trained with per-example
/// cross-entropy. On a device other than the CPU the engine keeps its parameters there.
///
/// The private backward runs on the fastest [`Executor`] that covers the module: a
/// [`Sequential`](super::Sequential) of steps the fused executor runs (Conv2d, Linear,
/// tanh, ReLU, pooling, flatten) trains on it on the CPU — the same clipped sums within
/// float rounding, several times faster; one the staged executor runs trains there;
/// every other module takes the general path of [`Taps::clipped_gradients`].
pub struct ModuleClassifier<M> {
    module: M,
    taps: Taps,
    device: Device,
    method: NormMethod,
    route: Route,
}

impl<M: Module + 'static> ModuleClassifier<M> {
    /// Fails closed unless every variable of `varmap` belongs to a DP layer of `taps`.
    pub fn new(module: M, varmap: &VarMap, taps: &Taps, device: &Device) -> Result<Self> {
        taps.check_covers(varmap)?;
        if taps.params().is_empty() {
            return Err(Error::invalid_model(
                "DP layer",
                "the network has no trainable DP-layer parameter",
            ));
        }
        taps.seal();
        Ok(ModuleClassifier {
            route: Route::plan(&module, taps, device, None)?,
            module,
            taps: taps.clone(),
            device: device.clone(),
            method: NormMethod::Auto,
        })
    }

    /// The same model on `executor` (to compare executors); an error if it does not
    /// cover the module.
    pub fn with_executor(mut self, executor: Executor) -> Result<Self> {
        self.route = Route::plan(&self.module, &self.taps, &self.device, Some(executor))?;
        Ok(self)
    }

    /// The executor that computes this model's private gradients.
    pub fn executor(&self) -> Executor {
        self.route.executor()
    }

    /// The floating-point operations of one sample's forward and private backward, as
    /// the fused executor counts them (its convolutions' and linear layers'
    /// multiply-adds), where that executor runs the model.
    pub fn flops_per_sample(&self) -> Option<super::Flops> {
        self.route.flops_per_sample()
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
    ) -> Result<ClippedGradient> {
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
        // The steps where the library can see them (a Sequential), so that another
        // activation or pooling over the same parameters describes differently.
        match (&self.module as &dyn std::any::Any).downcast_ref::<super::Sequential>() {
            Some(steps) => format!("{steps:?} {}", self.taps.architecture()),
            None => self.taps.architecture(),
        }
    }

    fn device_parameters(&self) -> Option<Vec<Var>> {
        (!self.device.is_cpu()).then(|| self.taps.vars())
    }
}

impl<M: Module + 'static> Classifier for ModuleClassifier<M> {
    fn logits(&self, x: &Tensor) -> Result<Vec<f32>> {
        if let Some(logits) = self.route.logits(&self.taps, x) {
            return logits;
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
        if !labels.is_empty() {
            if let Some(gradient) = self
                .route
                .clipped_cross_entropy_gradient(&self.taps, x, labels, classes, rule)
            {
                return gradient;
            }
        }
        self.private_gradients(x, labels, classes, rule)
    }
}
