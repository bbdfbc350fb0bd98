//! The sequential model of the staged executor: its stages, options and forward.

use candle_core::{Tensor, Var};

use super::layer::DpLayer;
use super::stage::{max_pool, Stage};
use super::tape::{Tape, DEFAULT_KEPT_ROWS_LIMIT};
use crate::cpu::{self, MaxPool, Tanh};
use crate::error::{Error, Result};

/// A sequential model on the staged executor.
pub struct StagedModel {
    pub(super) stages: Vec<Stage>,
    pub(super) portable: bool,
    pub(super) cpu_chunk: usize,
    pub(super) direct: bool,
    pub(super) rows_limit: usize,
}

/// Default most samples per private backward with the CPU ops: past ~256 MNIST-CNN
/// samples the activations and kept per-sample rows of one backward outgrow the cache, and
/// throughput per sample falls (`cargo xtask bench dp-sgd --tier nn-staged`, docs/training.md).
pub const DEFAULT_CPU_CHUNK: usize = 256;

impl StagedModel {
    /// From its stages.
    pub fn new(stages: Vec<Stage>) -> Self {
        StagedModel {
            stages,
            portable: false,
            cpu_chunk: DEFAULT_CPU_CHUNK,
            direct: true,
            rows_limit: DEFAULT_KEPT_ROWS_LIMIT,
        }
    }

    /// Most samples per backward when the CPU ops apply: larger batches are processed in
    /// chunks of this size and their clipped sums added (clipping is per sample, so the
    /// result is the same up to float summation order; fixed chunks keep it bit-reproducible).
    /// Portable mode (and so CUDA) always takes the whole batch at once.
    #[cfg(test)]
    pub fn with_cpu_chunk(mut self, samples: usize) -> Result<Self> {
        dp_accounting::validate::at_least_one("cpu_chunk", samples)?;
        self.cpu_chunk = samples;
        Ok(self)
    }

    /// Candle's own ops only (the CUDA path), even on the CPU, where the tier otherwise
    /// uses its CPU custom ops (unfold, input-gradient-only matmuls, max-pool, tanh): the
    /// reference the custom ops are tested against.
    #[cfg(test)]
    pub fn with_portable_ops(mut self) -> Self {
        self.portable = true;
        self
    }

    /// Most floats of per-sample gradients a layer may keep between its norm and
    /// clipped-sum passes (default [`DEFAULT_KEPT_ROWS_LIMIT`]); past it the norms are
    /// computed slice by slice and the clipped sum recomputes the gradients.
    #[cfg(test)]
    pub fn with_kept_rows_limit(mut self, floats: usize) -> Self {
        self.rows_limit = floats;
        self
    }

    /// Candle's backward through probes even where the direct CPU backward applies (the
    /// reference the direct backward is tested against).
    #[cfg(test)]
    pub fn with_candle_backward(mut self) -> Self {
        self.direct = false;
        self
    }

    pub(super) fn cpu_ops_apply(&self, t: &Tensor) -> bool {
        !self.portable && cpu::applies(t)
    }

    /// Every trainable var, in stage order.
    pub fn vars(&self) -> Vec<Var> {
        self.stages
            .iter()
            .flat_map(|s| match s {
                Stage::Layer(l) => l.vars(),
                _ => Vec::new(),
            })
            .collect()
    }

    pub(super) fn run(&self, x: &Tensor, mut tape: Option<&mut Tape>) -> Result<Tensor> {
        let mut a = x.clone();
        for (i, stage) in self.stages.iter().enumerate() {
            if let Some(tape) = tape.as_deref_mut().filter(|t| t.direct) {
                tape.stage_inputs.push(a.clone());
            }
            a = match stage {
                Stage::Layer(layer) => layer.forward(&a, tape.as_deref_mut().map(|t| (t, i)))?,
                Stage::Tanh if self.cpu_ops_apply(&a) => a.contiguous()?.apply_op1(Tanh)?,
                Stage::Tanh => a.tanh()?,
                Stage::Relu => a.relu()?,
                Stage::MaxPool { kernel, stride } if self.cpu_ops_apply(&a) => {
                    a.contiguous()?.apply_op1(MaxPool {
                        kernel: *kernel,
                        stride: *stride,
                    })?
                }
                Stage::MaxPool { kernel, stride } => max_pool(&a, *kernel, *stride)?,
                Stage::Flatten => a.flatten_from(1)?,
                Stage::Image {
                    channels,
                    height,
                    width,
                } => a.reshape(((), *channels, *height, *width))?,
            };
        }
        Ok(a)
    }

    /// Logits (no taps).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.run(x, None)
    }

    pub(super) fn layer(&self, index: usize) -> Result<&dyn DpLayer> {
        match self.stages.get(index) {
            Some(Stage::Layer(l)) => Ok(l.as_ref()),
            _ => Err(Error::invalid_model(
                "staged executor",
                format!("tape entry for stage {index}, which has no parameters"),
            )),
        }
    }
}
