//! Where a step's vectors live: flat on the host (the engine's reference path, for every
//! model), or as tensors on the model's device (a model that keeps its parameters there,
//! [`PrivateModel::device_parameters`]): the clipped sum, θ and the optimizer's moments
//! stay on the device and only the noise, drawn on the host from the ChaCha20 source,
//! crosses.

use candle_core::Tensor;
use dp_mechanisms::{GaussianMechanism, NoiseSource};
use dp_models::flat::{flatten, unflatten};
use dp_models::{GradientSum, PrivateModel};

use crate::error::{Error, Result};
use crate::optimizer::Optimizer;

/// A gradient sum: flat on the host, or one tensor per device parameter.
#[derive(Clone, Debug)]
pub(super) enum Gradient {
    Host(Vec<f32>),
    Device(Vec<Tensor>),
}

impl Gradient {
    /// A zero sum of `model`'s parameters where `moments` are kept (the sum of an empty
    /// batch, and where a batch's slices are summed).
    pub(super) fn zeros<M: PrivateModel>(moments: &Moments, model: &M) -> Result<Self> {
        if let Moments::Host(_) = moments {
            return Ok(Gradient::Host(vec![0.0; model.num_params()]));
        }
        let vars = model.device_parameters().ok_or_else(|| {
            Error::UnprotectedParameter(
                "the model no longer keeps its parameters on a device".into(),
            )
        })?;
        Ok(Gradient::Device(
            vars.iter()
                .map(|v| v.as_tensor().zeros_like())
                .collect::<candle_core::Result<_>>()?,
        ))
    }

    /// A model's clipped sum where `self` lives (flattened to the host, or split onto the
    /// device), checked to cover exactly `self`'s parameters.
    pub(super) fn like(&self, sum: GradientSum) -> Result<Gradient> {
        match self {
            Gradient::Host(v) => {
                let flat = sum.into_flat()?;
                if flat.len() != v.len() {
                    return Err(Error::UnprotectedParameter(format!(
                        "the model's clipped sum covers {} of its {} parameters",
                        flat.len(),
                        v.len()
                    )));
                }
                Ok(Gradient::Host(flat))
            }
            Gradient::Device(ts) => sum
                .into_tensors_like(ts)
                .map(Gradient::Device)
                .map_err(|e| {
                    Error::UnprotectedParameter(format!(
                        "the model's clipped sums do not cover its {} parameter tensors: {e}",
                        ts.len()
                    ))
                }),
        }
    }

    /// Adds `other` (of the same kind and shapes).
    pub(super) fn accumulate(&mut self, other: Gradient) -> Result<()> {
        match (self, other) {
            (Gradient::Host(a), Gradient::Host(b)) => {
                a.iter_mut().zip(&b).for_each(|(g, s)| *g += s)
            }
            (Gradient::Device(a), Gradient::Device(b)) => {
                for (t, s) in a.iter_mut().zip(&b) {
                    *t = (&*t + s)?;
                }
            }
            _ => {
                return Err(Error::UnprotectedParameter(
                    "a host and a device sum mixed".into(),
                ))
            }
        }
        Ok(())
    }

    /// The first parameter (flat index on the host, tensor index on the device) whose
    /// value is not finite.
    pub(super) fn first_nonfinite(&self) -> Result<Option<String>> {
        Ok(match self {
            Gradient::Host(v) => v
                .iter()
                .position(|g| !g.is_finite())
                .map(|j| format!("parameter {j}")),
            Gradient::Device(ts) => {
                let mut bad = None;
                for (i, t) in ts.iter().enumerate() {
                    // 0·x is 0 for every finite x and NaN for ±∞ and NaN.
                    let probe = t.affine(0.0, 0.0)?.sum_all()?.to_scalar::<f32>()?;
                    if !probe.is_finite() {
                        bad = Some(format!("parameter tensor {i}"));
                        break;
                    }
                }
                bad
            }
        })
    }

    /// Adds the mechanism's noise to every coordinate. On the device, one flat vector of
    /// noise is drawn on the host (the same draws, in the same order, as the host path)
    /// and copied to each tensor's device.
    pub(super) fn add_noise(
        &mut self,
        mechanism: &GaussianMechanism,
        noise: &mut NoiseSource,
    ) -> Result<()> {
        match self {
            Gradient::Host(v) => mechanism.release_in_place_f32(v, noise),
            Gradient::Device(ts) => {
                let mut draws = vec![0.0f32; ts.iter().map(Tensor::elem_count).sum()];
                mechanism.release_in_place_f32(&mut draws, noise);
                self.add_flat(&draws)?;
            }
        }
        Ok(())
    }

    /// The number of coordinates.
    pub(super) fn len(&self) -> usize {
        match self {
            Gradient::Host(v) => v.len(),
            Gradient::Device(ts) => ts.iter().map(Tensor::elem_count).sum(),
        }
    }

    /// Adds `values` (flat, in parameter order, one per coordinate) to every coordinate;
    /// on the device, copied to each tensor's device.
    pub(super) fn add_flat(&mut self, values: &[f32]) -> Result<()> {
        if values.len() != self.len() {
            return Err(Error::UnprotectedParameter(format!(
                "{} noise values for a sum of {} coordinates",
                values.len(),
                self.len()
            )));
        }
        match self {
            Gradient::Host(v) => v.iter_mut().zip(values).for_each(|(g, x)| *g += x),
            Gradient::Device(ts) => {
                let values = unflatten(values, ts)?;
                for (t, x) in ts.iter_mut().zip(values) {
                    *t = (&*t + x)?;
                }
            }
        }
        Ok(())
    }

    /// The values, flat, on the host.
    pub(super) fn to_host(&self) -> Result<Vec<f32>> {
        match self {
            Gradient::Host(v) => Ok(v.clone()),
            Gradient::Device(ts) => Ok(flatten(ts)?),
        }
    }
}

/// The optimizer's moments: flat on the host, or per device parameter.
#[derive(Clone, Debug)]
pub(super) enum Moments {
    Host(Vec<Vec<f32>>),
    Device(Vec<Vec<Tensor>>),
}

impl Moments {
    /// Zeroed moments where `model` keeps its parameters.
    pub(super) fn initial<M: PrivateModel>(optimizer: &Optimizer, model: &M) -> Result<Self> {
        let count = optimizer.moment_count();
        Ok(match model.device_parameters() {
            None => Moments::Host(optimizer.initial_moments(model.num_params())),
            Some(vars) => Moments::Device(
                (0..count)
                    .map(|_| {
                        vars.iter()
                            .map(|v| v.as_tensor().zeros_like())
                            .collect::<candle_core::Result<_>>()
                    })
                    .collect::<candle_core::Result<_>>()?,
            ),
        })
    }

    /// How many moment vectors (1 for SGD, 2 for Adam).
    pub(super) fn count(&self) -> usize {
        match self {
            Moments::Host(m) => m.len(),
            Moments::Device(m) => m.len(),
        }
    }

    /// Each moment flat on the host (for checkpoints and snapshots).
    pub(super) fn to_host(&self) -> Result<Vec<Vec<f32>>> {
        match self {
            Moments::Host(m) => Ok(m.clone()),
            Moments::Device(m) => m.iter().map(|ts| Ok(flatten(ts)?)).collect(),
        }
    }

    /// Replaces the moments from flat host vectors (an error unless each fits).
    pub(super) fn set_from_host(&mut self, host: &[Vec<f32>]) -> Result<()> {
        match self {
            Moments::Host(m) => *m = host.to_vec(),
            Moments::Device(m) => {
                for (tensors, flat) in m.iter_mut().zip(host) {
                    *tensors = unflatten(flat, tensors)?;
                }
            }
        }
        Ok(())
    }
}
