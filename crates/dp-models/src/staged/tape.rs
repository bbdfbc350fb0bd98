//! The taps of one forward: each parametric layer's input and output probe, and the
//! per-sample rows a layer may keep between its norm and clipped-sum passes.

use std::sync::OnceLock;

use candle_core::{DType, Tensor, TensorId, Var};

use crate::cpu;
use crate::error::Result;

/// Default most floats of per-sample conv gradients kept between the norm and clipped-sum
/// passes (128 MiB); larger layers recompute them sample by sample instead.
pub const DEFAULT_KEPT_ROWS_LIMIT: usize = 32 << 20;

/// One tap of the forward: the layer's (detached) input and its output probe.
#[derive(Debug)]
pub struct TapeEntry {
    /// Index of the layer in the model.
    pub layer: usize,
    /// The layer's input, detached.
    pub input: Tensor,
    /// The zero `Var` added to the layer's output for Candle's backward to fill; `None` in
    /// the direct backward, which hands each layer its output gradient itself.
    pub probe: Option<Var>,
    /// Whether the layer may use the CPU custom ops on this entry (not in portable mode).
    pub cpu_ops: bool,
    /// Per-sample gradient rows a layer's norm pass materialised for its clipped sum, keyed
    /// by the output gradient they came from (a different gradient misses the cache).
    per_sample_rows: OnceLock<(TensorId, Tensor)>,
    /// Most floats of per-sample rows a layer may keep for this entry.
    pub(super) rows_limit: usize,
}

impl TapeEntry {
    pub(super) fn keep_rows(&self, grad_out: &Tensor, rows: Tensor) {
        // Set once per tap; a second norm pass on the same tap recomputes the same rows.
        let _ = self.per_sample_rows.set((grad_out.id(), rows));
    }

    pub(super) fn rows_for(&self, grad_out: &Tensor) -> Option<&Tensor> {
        match self.per_sample_rows.get() {
            Some((id, rows)) if *id == grad_out.id() => Some(rows),
            _ => None,
        }
    }
}

/// The taps of one forward.
#[derive(Debug, Default)]
pub struct Tape {
    /// Entries in forward order.
    pub entries: Vec<TapeEntry>,
    /// Use Candle's own ops only, as on CUDA, even where the CPU ops apply.
    pub portable: bool,
    /// Direct backward: no probes; the model records each stage's input and walks the
    /// stages in reverse itself instead of running Candle's backward.
    pub direct: bool,
    /// With `direct`: the input of every stage, in order.
    pub stage_inputs: Vec<Tensor>,
    /// Most floats of per-sample gradients a layer keeps between its norm and clipped-sum
    /// passes (0 keeps none).
    pub rows_limit: usize,
}

impl Tape {
    /// Whether the layers may use the CPU custom ops on `t`.
    pub fn cpu_ops_apply(&self, t: &Tensor) -> bool {
        !self.portable && cpu::applies(t)
    }
}

/// Adds a zero probe to a layer's output `z` and records the tap (input kept as given:
/// callers pass it detached or, for token ids, as is).
pub(super) fn tap(z: Tensor, input: Tensor, tape: &mut Tape, layer: usize) -> Result<Tensor> {
    let (z, probe) = if tape.direct {
        (z, None)
    } else {
        let probe = Var::zeros(z.shape(), DType::F32, z.device())?;
        ((z + probe.as_tensor())?, Some(probe))
    };
    let cpu_ops = tape.cpu_ops_apply(&input);
    tape.entries.push(TapeEntry {
        layer,
        input,
        probe,
        cpu_ops,
        per_sample_rows: OnceLock::new(),
        rows_limit: tape.rows_limit,
    });
    Ok(z)
}
