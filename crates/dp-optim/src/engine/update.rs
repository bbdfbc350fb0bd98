//! The last stage of a step: the released sum divided by the configured batch size and
//! handed to the update rule, on the host or on the parameters' device (a sparse
//! release passes its support, for lazy rules).

use dp_models::PrivateModel;

use super::device::{Gradient, Moments};
use super::step_tokens::NoisyGradient;
use super::{PrivacyEngine, StepReport};
use crate::config::GradientNormalisation;
use crate::error::{Error, Result};

impl<M: PrivateModel> PrivacyEngine<M> {
    /// Divides the noisy sum by what the configuration names (the expected batch size by
    /// default) and applies the optimiser to θ.
    pub fn apply_update(&mut self, gradient: &NoisyGradient) -> Result<StepReport> {
        let b = gradient.batch_size;
        let divisor = match self.config.normalisation {
            GradientNormalisation::ExpectedBatchSize => {
                self.config.sampler.expected_batch_size(self.dataset_size)
            }
            GradientNormalisation::RealisedBatchSize => b as f64,
        };
        let step = self.steps.max(1);
        match (&gradient.sum, &mut self.moments) {
            (Gradient::Host(sum), Moments::Host(moments)) => {
                let scale = (1.0 / divisor.max(1.0)) as f32;
                let average: Vec<f32> = sum.iter().map(|g| g * scale).collect();
                let mut theta = self.model.parameters()?;
                self.config.optimizer.update_on(
                    &mut theta,
                    moments,
                    &average,
                    step,
                    gradient.support.as_deref(),
                );
                self.model.set_parameters(&theta)?;
            }
            (Gradient::Device(sum), Moments::Device(moments)) => {
                let vars = self.model.device_parameters().ok_or_else(|| {
                    Error::UnprotectedParameter(
                        "the model no longer keeps its parameters on a device".into(),
                    )
                })?;
                let scale = f64::from((1.0 / divisor.max(1.0)) as f32);
                self.config
                    .optimizer
                    .update_tensors(&vars, moments, sum, scale, step)?;
            }
            _ => {
                return Err(Error::UnprotectedParameter(
                    "a host gradient for device parameters, or the reverse".into(),
                ))
            }
        }
        Ok(StepReport {
            batch_size: b,
            mean_loss: if b == 0 {
                f64::NAN
            } else {
                gradient.loss_sum / b as f64
            },
            nonfinite_gradients: gradient.nonfinite,
        })
    }
}
