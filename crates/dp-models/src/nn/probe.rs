//! The probe a DP layer attaches to its output in a private forward, from which the
//! layer's `dL/dz` is read after the backward.
//!
//! On the CPU (F32), where the output is already in Candle's graph, the probe is an
//! identity op whose backward keeps the gradient it is handed: one copy in the forward,
//! nothing extra in the backward. Elsewhere (and on a first layer) it is a zero
//! `Var` added to the output (Candle keeps the gradients of variables), which costs a
//! zero tensor and an addition in the forward and a second accumulation in the backward.
//! A layer whose last op is one of the CPU ops can have that op keep the gradient itself
//! ([`cpu::GradientSlot`]), with no probe op at all.

use std::sync::{Arc, Mutex};

use candle_core::{backprop::GradStore, CpuStorage, CustomOp1, DType, Layout, Shape, Tensor, Var};

use crate::cpu;

/// Where one layer output's gradient is found after the backward.
pub(super) enum Probe {
    /// A zero variable added to the output (any device).
    Zero(Var),
    /// The op that caught the gradient (CPU): the identity, or the layer's own last op.
    Catch(cpu::GradientSlot),
}

impl Probe {
    /// Attaches a probe to `output`; returns the probed output to use downstream.
    pub(super) fn attach(output: Tensor) -> candle_core::Result<(Tensor, Probe)> {
        // An output that depends on no variable (the first layer's, on data) is not in
        // Candle's graph: only a variable puts it there.
        if cpu::applies(&output) && output.track_op() {
            let slot: cpu::GradientSlot = Arc::new(Mutex::new(None));
            let probed = output.apply_op1(Catch(slot.clone()))?;
            return Ok((probed, Probe::Catch(slot)));
        }
        let zero = Var::zeros(output.shape(), DType::F32, output.device())?;
        Ok(((output + zero.as_tensor())?, Probe::Zero(zero)))
    }

    /// `dL/dz` of the probed output, or `None` where the output does not reach the loss.
    pub(super) fn gradient(&self, grads: &GradStore) -> Option<Tensor> {
        match self {
            Probe::Zero(var) => grads.get(var.as_tensor()).cloned(),
            Probe::Catch(slot) => slot.lock().unwrap_or_else(|e| e.into_inner()).take(),
        }
    }
}

/// The identity whose backward stores the gradient it passes through.
struct Catch(cpu::GradientSlot);

impl CustomOp1 for Catch {
    fn name(&self) -> &'static str {
        "dp-probe"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = cpu::f32_slice(storage, layout)?;
        Ok((CpuStorage::F32(x.to_vec()), layout.shape().clone()))
    }

    fn bwd(
        &self,
        _arg: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        cpu::keep_gradient(Some(&self.0), grad_res);
        Ok(Some(grad_res.clone()))
    }
}
