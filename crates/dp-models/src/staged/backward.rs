//! Each tapped layer's output gradient: by the direct CPU backward where every stage has
//! one, else by Candle's backward through the probes; and the cross-entropy it starts from.

use candle_core::{DType, Device, Tensor, D};

use super::model::StagedModel;
use super::stage::Stage;
use super::tape::Tape;
use crate::cpu::{self, MaxPool};
use crate::error::{Error, Result};

impl StagedModel {
    /// Whether the direct backward applies: CPU ops on, and every stage has a CPU backward
    /// of its own (parametric layers through [`DpLayer::input_gradient`](super::DpLayer::input_gradient)).
    fn direct_backward_applies(&self, x: &Tensor) -> bool {
        self.cpu_ops_apply(x)
            && self.stages.iter().all(|stage| match stage {
                Stage::Layer(l) => l.has_input_gradient(),
                Stage::Tanh
                | Stage::Relu
                | Stage::MaxPool { .. }
                | Stage::Flatten
                | Stage::Image { .. } => true,
            })
    }

    /// The tape of a forward, the per-example losses and each tapped layer's output
    /// gradient `dL/dz` (B, …), in tape order — by the direct backward where it applies,
    /// else by Candle's backward through the probes.
    pub(super) fn layer_output_gradients(
        &self,
        x: &Tensor,
        labels: &[u32],
    ) -> Result<(Tape, Vec<f32>, Vec<Tensor>)> {
        let mut tape = Tape {
            portable: self.portable,
            direct: self.direct && self.direct_backward_applies(x),
            rows_limit: self.rows_limit,
            ..Tape::default()
        };
        let logits = self.run(x, Some(&mut tape))?;
        if tape.direct {
            let (losses, dlogits) = cross_entropy_gradient(&logits, labels)?;
            let grad_outs = self.direct_backward(&tape, &logits, dlogits)?;
            return Ok((tape, losses, grad_outs));
        }
        let (losses, grads) = per_example_backward(&logits, labels)?;
        let mut grad_outs = Vec::new();
        for entry in &tape.entries {
            let probe = entry.probe.as_ref().ok_or_else(|| {
                Error::invalid_model(
                    "staged executor",
                    "a tape entry without a probe outside direct mode",
                )
            })?;
            grad_outs.push(grads.get(probe.as_tensor()).cloned().ok_or_else(|| {
                Error::invalid_model(
                    "staged executor",
                    format!(
                        "stage {} received no gradient: it is not on the loss's path",
                        entry.layer
                    ),
                )
            })?);
        }
        Ok((tape, losses, grad_outs))
    }

    /// Walks the stages in reverse from `dL/dlogits`, each with its CPU backward, and
    /// returns every tapped layer's output gradient in tape order. Stops at the first
    /// parametric layer: nothing below it has parameters.
    fn direct_backward(
        &self,
        tape: &Tape,
        logits: &Tensor,
        dlogits: Tensor,
    ) -> Result<Vec<Tensor>> {
        if tape.stage_inputs.len() != self.stages.len() {
            return Err(Error::invalid_model(
                "staged executor",
                "direct backward: the forward did not record every stage",
            ));
        }
        let first_layer = self
            .stages
            .iter()
            .position(|s| matches!(s, Stage::Layer(_)))
            .ok_or_else(|| {
                Error::invalid_model("staged executor", "the model has no parametric layer")
            })?;
        let mut grad_outs: Vec<Option<Tensor>> = vec![None; tape.entries.len()];
        let mut g = dlogits;
        for (i, stage) in self.stages.iter().enumerate().rev() {
            let input = &tape.stage_inputs[i];
            let output = tape.stage_inputs.get(i + 1).unwrap_or(logits);
            g = match stage {
                Stage::Layer(layer) => {
                    let slot = tape
                        .entries
                        .iter()
                        .position(|e| e.layer == i)
                        .ok_or_else(|| {
                            Error::invalid_model(
                                "staged executor",
                                format!("stage {i} recorded no tape entry"),
                            )
                        })?;
                    grad_outs[slot] = Some(g.clone());
                    if i == first_layer {
                        break;
                    }
                    layer.input_gradient(&tape.entries[slot], &g)?
                }
                Stage::Tanh => cpu::tanh_backward(output, &g)?,
                // PyTorch's convention: no gradient where the input is exactly 0.
                Stage::Relu => (g * input.gt(0.0)?.to_dtype(DType::F32)?)?,
                Stage::MaxPool { kernel, stride } => cpu::max_pool_backward(
                    MaxPool {
                        kernel: *kernel,
                        stride: *stride,
                    },
                    input,
                    &g,
                )?,
                Stage::Flatten | Stage::Image { .. } => g.reshape(input.shape())?,
            };
        }
        grad_outs
            .into_iter()
            .enumerate()
            .map(|(slot, g)| {
                g.ok_or_else(|| {
                    Error::invalid_model(
                        "staged executor",
                        format!(
                            "stage {} received no gradient: it is not on the loss's path",
                            tape.entries[slot].layer
                        ),
                    )
                })
            })
            .collect()
    }
}

/// Per-example cross-entropy of `logits (B, O)` and its gradient `softmax − onehot(y)`
/// (the gradient of the summed loss) as a tensor, labels checked.
fn cross_entropy_gradient(logits: &Tensor, labels: &[u32]) -> Result<(Vec<f32>, Tensor)> {
    let (b, classes) = logits.dims2()?;
    crate::loss::check_labels(b * classes, labels, classes)?;
    let (losses, grad) =
        crate::loss::cross_entropy(&logits.flatten_all()?.to_vec1::<f32>()?, labels, classes);
    Ok((
        losses,
        Tensor::from_vec(grad, (b, classes), logits.device())?,
    ))
}

/// Per-example cross-entropy and the gradients of their sum.
fn per_example_backward(
    logits: &Tensor,
    labels: &[u32],
) -> Result<(Vec<f32>, candle_core::backprop::GradStore)> {
    let device: &Device = logits.device();
    let y = Tensor::from_slice(labels, labels.len(), device)?;
    let log_probs = candle_nn::ops::log_softmax(logits, D::Minus1)?;
    let losses = log_probs.gather(&y.unsqueeze(1)?, 1)?.squeeze(1)?.neg()?;
    let grads = losses.sum_all()?.backward()?;
    Ok((losses.to_vec1()?, grads))
}
