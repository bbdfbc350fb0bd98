//! A user's Candle network made trainable by a DP engine: its `VarMap`, the [`Taps`] of
//! its DP layers, and a closure from a batch of its data to per-example losses.

use std::marker::PhantomData;

use candle_core::{Device, Tensor, Var};
use candle_nn::VarMap;

use super::contribution::NormMethod;
use super::taps::Taps;
use crate::error::{Error, Result};
use crate::private_model::PrivateModel;
use crate::training_data::TrainingData;
use crate::ClipRule;
use crate::ClippedGradient;

/// A network built from DP layers, as a [`PrivateModel`]: `losses(data, batch)` runs the
/// forward on the examples `batch` of `data` and returns their losses (B,) — any model,
/// any per-example loss, any targets.
pub struct PrivateNet<D: ?Sized, F> {
    varmap: VarMap,
    taps: Taps,
    losses: F,
    device: Device,
    method: NormMethod,
    on_device: bool,
    _data: PhantomData<fn(&D)>,
}

impl<D, F> PrivateNet<D, F>
where
    D: TrainingData + ?Sized,
    F: Fn(&D, &[usize]) -> Result<Tensor>,
{
    /// Fails closed unless every variable of `varmap` belongs to a DP layer of `taps`.
    pub fn new(varmap: &VarMap, taps: &Taps, device: &Device, losses: F) -> Result<Self> {
        taps.check_covers(varmap)?;
        if taps.params().is_empty() {
            return Err(Error::invalid_model(
                "DP layer",
                "the network has no trainable DP-layer parameter",
            ));
        }
        taps.seal();
        Ok(PrivateNet {
            varmap: varmap.clone(),
            taps: taps.clone(),
            losses,
            device: device.clone(),
            method: NormMethod::Auto,
            on_device: !device.is_cpu(),
            _data: PhantomData,
        })
    }

    /// How squared norms are computed (default [`NormMethod::Auto`]).
    pub fn with_norm_method(mut self, method: NormMethod) -> Self {
        self.method = method;
        self
    }

    /// Whether the engine keeps θ, the clipped sums and the moments as tensors on the
    /// network's device ([`PrivateModel::device_parameters`]). The default: on any device
    /// but the CPU, where the flat host path is as fast and bit-for-bit the engine's
    /// reference.
    pub fn with_parameters_on_device(mut self, on_device: bool) -> Self {
        self.on_device = on_device;
        self
    }

    /// The taps.
    pub fn taps(&self) -> &Taps {
        &self.taps
    }

    /// The device the network lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The private backward of `batch` (checked covered; an empty batch is zero sums).
    fn private_gradients(
        &self,
        data: &D,
        batch: &[usize],
        rule: ClipRule,
    ) -> Result<ClippedGradient> {
        self.taps.check_covers(&self.varmap)?;
        if batch.is_empty() {
            return self.taps.zero_gradients();
        }
        let losses = || {
            let losses = (self.losses)(data, batch)?;
            if losses.dims() != [batch.len()] {
                return Err(Error::invalid_model(
                    "loss",
                    format!(
                        "the loss closure returned shape {:?} for {} records drawn: it must \
                         return one loss per record, shape ({},) (a loss per token or per \
                         pair would be clipped per row, not per record)",
                        losses.dims(),
                        batch.len(),
                        batch.len()
                    ),
                ));
            }
            Ok(losses)
        };
        self.taps.clipped_gradients(losses, rule, self.method)
    }

    /// The per-example losses of `batch`, outside a private forward (evaluation).
    pub fn losses(&self, data: &D, batch: &[usize]) -> Result<Tensor> {
        (self.losses)(data, batch)
    }
}

impl<D, F> PrivateModel for PrivateNet<D, F>
where
    D: TrainingData + ?Sized,
    F: Fn(&D, &[usize]) -> Result<Tensor>,
{
    type Data = D;

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
        data: &D,
        batch: &[usize],
        rule: ClipRule,
    ) -> Result<ClippedGradient> {
        self.private_gradients(data, batch, rule)
    }

    fn architecture(&self) -> String {
        self.taps.architecture()
    }

    fn device_parameters(&self) -> Option<Vec<Var>> {
        self.on_device.then(|| self.taps.vars())
    }
}
