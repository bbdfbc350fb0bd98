//! The sequential model of the autograd tier: its stages, options and forward.

use candle_core::{DType, Tensor, Var};

use super::fused::fused_network;
use super::layer::DpLayer;
use super::stage::{max_pool, Stage};
use super::tape::{Tape, DEFAULT_KEPT_ROWS_LIMIT};
use crate::cpu::{self, MaxPool, Tanh};
use crate::error::{Error, Result};
use crate::fused::FusedModel;

/// A sequential model on the autograd tier.
pub struct AutogradModel {
    pub(super) stages: Vec<Stage>,
    pub(super) portable: bool,
    pub(super) cpu_chunk: usize,
    pub(super) direct: bool,
    pub(super) rows_limit: usize,
    /// The same network on the fused tier, where it covers every stage.
    pub(super) fused: Option<FusedModel>,
}

/// Default most samples per private backward with the CPU ops: past ~256 MNIST-CNN
/// samples the activations and kept per-sample rows of one backward outgrow the cache, and
/// throughput per sample falls (`cargo xtask bench dp-sgd --tier autograd`, docs/training.md).
pub const DEFAULT_CPU_CHUNK: usize = 256;

impl AutogradModel {
    /// From its stages.
    pub fn new(stages: Vec<Stage>) -> Self {
        AutogradModel {
            fused: fused_network(&stages),
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
    pub fn with_cpu_chunk(mut self, samples: usize) -> Result<Self> {
        dp_accounting::validate::at_least_one("cpu_chunk", samples)?;
        self.cpu_chunk = samples;
        Ok(self)
    }

    /// Candle's own ops only (the CUDA path), even on the CPU, where the tier otherwise
    /// uses its CPU custom ops (unfold, input-gradient-only matmuls, max-pool, tanh): the
    /// reference the custom ops are tested against.
    pub fn with_portable_ops(mut self) -> Self {
        self.portable = true;
        self.fused = None;
        self
    }

    /// Most floats of per-sample gradients a layer may keep between its norm and
    /// clipped-sum passes (default [`DEFAULT_KEPT_ROWS_LIMIT`]); past it the norms are
    /// computed slice by slice and the clipped sum recomputes the gradients.
    pub fn with_kept_rows_limit(mut self, floats: usize) -> Self {
        self.rows_limit = floats;
        self
    }

    /// Candle's backward through probes even where the direct CPU backward applies (the
    /// reference the direct backward is tested against).
    pub fn with_candle_backward(mut self) -> Self {
        self.direct = false;
        self.fused = None;
        self
    }

    /// The stage path even where the fused tier covers the network (the reference the
    /// fused path is tested against, and the tier `cargo xtask bench --tier autograd`
    /// measures).
    pub fn without_fused(mut self) -> Self {
        self.fused = None;
        self
    }

    /// Whether private gradients on the CPU run on the fused tier.
    pub fn runs_fused(&self) -> bool {
        self.fused.is_some()
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
        let reads_ids = matches!(self.stages.first(), Some(Stage::Layer(l)) if l.takes_token_ids());
        let mut a = if reads_ids && x.dtype() != DType::U32 {
            x.to_dtype(DType::U32)?
        } else {
            x.clone()
        };
        for (i, stage) in self.stages.iter().enumerate() {
            if let Some(tape) = tape.as_deref_mut().filter(|t| t.direct) {
                tape.stage_inputs.push(a.clone());
            }
            a = match stage {
                Stage::Layer(layer) => layer.forward(&a, tape.as_deref_mut().map(|t| (t, i)))?,
                Stage::Tanh if self.cpu_ops_apply(&a) => a.contiguous()?.apply_op1(Tanh)?,
                Stage::Tanh => a.tanh()?,
                Stage::Relu => a.relu()?,
                Stage::MeanOverTime => a.mean(1)?,
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
                "autograd model",
                format!("tape entry for stage {index}, which has no parameters"),
            )),
        }
    }
}
