//! The taps of a private network: the parameters its DP layers registered and, during a
//! private forward, one record per layer use — a probe on the layer's
//! output, and how the layer turns that output's gradient into per-sample gradients.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use candle_core::{Tensor, Var};
use candle_nn::VarMap;

use super::contribution::Contribution;
use super::probe::Probe;
use crate::error::{Error, Result};

/// How one use of a layer turns the gradient of the summed per-example loss with respect
/// to its output, `dL/dz` (B, …), into per-sample gradient contributions, one per
/// parameter it touched.
pub type Resolve = Box<dyn FnOnce(&Tensor) -> Result<Vec<(Var, Contribution)>> + Send>;

/// A parameter a DP layer registered.
#[derive(Clone, Debug)]
pub struct Param {
    /// Its full name in the `VarMap` (`blocks.0.attn.q.weight`).
    pub name: String,
    /// The layer that owns it (its `VarBuilder` prefix): the unit of per-layer clipping.
    pub owner: String,
    /// The variable.
    pub var: Var,
}

/// One use of a layer in a private forward.
pub(super) struct Record {
    pub(super) probe: Probe,
    pub(super) resolve: Resolve,
    /// The output's shape.
    pub(super) shape: Vec<usize>,
}

#[derive(Default)]
struct State {
    params: Vec<Param>,
    /// Parameters declared frozen (public): used as constants, never clipped, noised or
    /// updated.
    frozen: Vec<Param>,
    /// A private model has been built over these taps: its trainable parameters are
    /// fixed (the engine's θ, moments and checkpoints are laid out on them).
    sealed: bool,
    /// Settings of layers that shape the model without being parameters (a LoRA
    /// adapter's scale), for the architecture fingerprint.
    notes: Vec<String>,
    recording: Option<Vec<Record>>,
    /// The maps the DP layers' builders created parameters in: every variable of each
    /// must belong to a DP layer before any private gradient is returned.
    varmaps: Vec<VarMap>,
    /// The shapes (loss, then each recorded output) whose batch axis has been verified.
    verified: HashSet<Vec<Vec<usize>>>,
}

/// The registry and recorder shared by the DP layers of one network (cheap to clone).
///
/// Outside a private forward the layers are plain Candle layers (their weights are
/// graph variables, so a non-private backward and evaluation work as usual). Inside one
/// ([`Taps::clipped_gradients`]), every DP layer uses its weights
/// as constants and marks its output — the built-in layers' own CPU ops keep its gradient,
/// a layer written outside this crate gets a probe ([`Taps::tap`]): one backward of the
/// summed per-example loss then gives each use of each layer its `dL/dz`, and nothing
/// else.
#[derive(Clone, Default)]
pub struct Taps {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Taps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Taps")
            .field("params", &state.params.len())
            .field("recording", &state.recording.is_some())
            .finish()
    }
}

impl Taps {
    /// An empty registry.
    pub fn new() -> Self {
        Taps::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic inside a forward leaves nothing half-written in the state worth
        // refusing: the next private forward starts a fresh recording.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a parameter owned by `owner`; a name registered twice is an error.
    pub fn register(&self, name: &str, owner: &str, var: Var) -> Result<()> {
        let mut state = self.lock();
        if state
            .params
            .iter()
            .chain(&state.frozen)
            .any(|p| p.name == name)
        {
            return Err(Error::invalid_model(
                "DP layer",
                format!("parameter {name} is registered twice"),
            ));
        }
        state.params.push(Param {
            name: name.to_string(),
            owner: owner.to_string(),
            var,
        });
        Ok(())
    }

    /// Remembers `varmap` as one the network's parameters live in (a [`DpVarBuilder`]
    /// does this), so every private gradient first checks it is covered.
    ///
    /// [`DpVarBuilder`]: super::DpVarBuilder
    pub(super) fn watch(&self, varmap: &VarMap) {
        let mut state = self.lock();
        if !state
            .varmaps
            .iter()
            .any(|m| std::ptr::eq(m.data(), varmap.data()))
        {
            state.varmaps.push(varmap.clone());
        }
    }

    /// The maps the network's parameters were created in.
    pub(super) fn varmaps(&self) -> Vec<VarMap> {
        self.lock().varmaps.clone()
    }

    /// Whether outputs of these shapes have had their batch axis verified.
    pub(super) fn is_verified(&self, shapes: &[Vec<usize>]) -> bool {
        self.lock().verified.contains(shapes)
    }

    /// Records that outputs of these shapes have their batch axis verified.
    pub(super) fn set_verified(&self, shapes: Vec<Vec<usize>>) {
        self.lock().verified.insert(shapes);
    }

    /// Every trainable registered parameter, sorted by name (the flat parameter order):
    /// the parameters that get clipped per-sample gradients, noise and updates.
    pub fn params(&self) -> Vec<Param> {
        let mut params = self.lock().params.clone();
        params.sort_by(|a, b| a.name.cmp(&b.name));
        params
    }

    /// Every frozen parameter, sorted by name.
    pub fn frozen_params(&self) -> Vec<Param> {
        let mut frozen = self.lock().frozen.clone();
        frozen.sort_by(|a, b| a.name.cmp(&b.name));
        frozen
    }

    /// Whether `var` was registered here, trainable or frozen.
    pub fn is_registered(&self, var: &Var) -> bool {
        let id = var.as_tensor().id();
        let state = self.lock();
        state
            .params
            .iter()
            .chain(&state.frozen)
            .any(|p| p.var.as_tensor().id() == id)
    }

    /// The layer (prefix) that owns `var`, trainable or frozen.
    pub fn owner_of(&self, var: &Var) -> Option<String> {
        let id = var.as_tensor().id();
        let state = self.lock();
        state
            .params
            .iter()
            .chain(&state.frozen)
            .find(|p| p.var.as_tensor().id() == id)
            .map(|p| p.owner.clone())
    }

    /// Whether `var` is a frozen parameter of these taps.
    pub fn is_frozen(&self, var: &Var) -> bool {
        let id = var.as_tensor().id();
        self.lock()
            .frozen
            .iter()
            .any(|p| p.var.as_tensor().id() == id)
    }

    /// Fixes the trainable parameters: a private model is being built over them.
    pub(super) fn seal(&self) {
        self.lock().sealed = true;
    }

    /// Whether a private model has been built over these taps.
    pub(super) fn is_sealed(&self) -> bool {
        self.lock().sealed
    }

    /// Records a setting that shapes the model without being a parameter.
    pub(super) fn note(&self, text: String) {
        self.lock().notes.push(text);
    }

    /// The recorded settings, sorted.
    pub(super) fn notes(&self) -> Vec<String> {
        let mut notes = self.lock().notes.clone();
        notes.sort();
        notes
    }

    /// Moves the trainable parameters `select` picks to the frozen ones and returns how
    /// many it moved; refused while a private forward is recorded.
    pub(super) fn freeze_where(&self, select: impl Fn(&Param) -> bool) -> Result<usize> {
        let mut state = self.lock();
        if state.recording.is_some() || state.sealed {
            return Err(Error::invalid_model(
                "freeze",
                "parameters must be frozen before the private model is built over them \
                 (PrivateNet::new, ModuleClassifier::new), not after or during a forward",
            ));
        }
        let (frozen, trainable): (Vec<Param>, Vec<Param>) = std::mem::take(&mut state.params)
            .into_iter()
            .partition(select);
        state.params = trainable;
        let moved = frozen.len();
        state.frozen.extend(frozen);
        Ok(moved)
    }

    /// Whether a private forward is being recorded.
    pub fn is_recording(&self) -> bool {
        self.lock().recording.is_some()
    }

    /// In a private forward, probes a layer's `output` — an identity op that keeps the
    /// gradient passing through it, or, for an output not yet in Candle's graph (a first
    /// layer on data), the addition of a zero variable whose gradient it is — and keeps
    /// `resolve` for after the backward; outside one, returns `output` unchanged. This is
    /// the seam for a DP layer written outside this crate.
    pub fn tap(
        &self,
        output: Tensor,
        resolve: impl FnOnce(&Tensor) -> Result<Vec<(Var, Contribution)>> + Send + 'static,
    ) -> candle_core::Result<Tensor> {
        let mut state = self.lock();
        let Some(records) = state.recording.as_mut() else {
            return Ok(output);
        };
        let shape = output.dims().to_vec();
        let (output, probe) = Probe::attach(output)?;
        records.push(Record {
            probe,
            resolve: Box::new(resolve),
            shape,
        });
        Ok(output)
    }

    /// [`Taps::tap`] for an output whose last op keeps its gradient in `slot` itself (the
    /// CPU ops of the built-in layers): no probe op is added.
    pub(super) fn tap_caught(
        &self,
        output: Tensor,
        slot: crate::cpu::GradientSlot,
        resolve: impl FnOnce(&Tensor) -> Result<Vec<(Var, Contribution)>> + Send + 'static,
    ) -> Tensor {
        let mut state = self.lock();
        if let Some(records) = state.recording.as_mut() {
            records.push(Record {
                probe: Probe::Catch(slot),
                resolve: Box::new(resolve),
                shape: output.dims().to_vec(),
            });
        }
        output
    }

    /// Runs `forward` with recording on and returns its result with the records; the
    /// recording is switched off again whatever `forward` does.
    pub(super) fn record<T>(
        &self,
        forward: impl FnOnce() -> Result<T>,
    ) -> Result<(T, Vec<Record>)> {
        {
            let mut state = self.lock();
            if state.recording.is_some() {
                return Err(Error::invalid_model(
                    "DP layer",
                    "a private forward is already being recorded on these taps",
                ));
            }
            state.recording = Some(Vec::new());
        }
        struct Stop<'a>(&'a Taps);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.lock().recording = None;
            }
        }
        let stop = Stop(self);
        let out = forward()?;
        let records = self.lock().recording.take().unwrap_or_default();
        drop(stop);
        Ok((out, records))
    }
}
