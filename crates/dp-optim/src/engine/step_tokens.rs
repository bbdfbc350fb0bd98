//! The values a private step hands from call to call — the reserved charge
//! ([`begin_step`](super::PrivacyEngine::begin_step)), the clipped sum
//! ([`clipped_sum`](super::PrivacyEngine::clipped_sum)) and the noisy gradient
//! ([`release`](super::PrivacyEngine::release)) — each made only by the engine, so that a
//! step's calls cannot be mixed with another's or repeated (step.rs).

use dp_accounting::{DpEvent, DynAccountant, Reservation};
use dp_mechanisms::GaussianMechanism;
use dp_models::ClipRule;

use super::device::Gradient;
use crate::error::Result;
use crate::sampler::ShuffleState;

/// The reserved charge of one step and the mechanism it was reserved for: the noise
/// [`release`](PrivacyEngine::release) adds and the event it commits come from this one
/// value. Dropping it charges nothing; [`release`](PrivacyEngine::release) consumes it, so
/// one charge releases once:
///
/// ```compile_fail
/// # fn f(e: &mut dp_optim::PrivacyEngine, data: &dp_models::data::Dataset) -> dp_optim::Result<()> {
/// let mut charge = e.begin_step(data)?;
/// let batch = e.draw_batch(&mut charge)?;
/// let first = e.clipped_sum(data, &batch)?;
/// let second = e.clipped_sum(data, &batch)?;
/// e.release(charge, first)?;
/// e.release(charge, second)?; // use of a moved value
/// # Ok(()) }
/// ```
pub struct StepCharge {
    pub(super) id: u64,
    pub(super) reservation: Option<Reservation<Box<dyn DynAccountant>>>,
    pub(super) mechanism: Option<GaussianMechanism>,
    /// The event of a second mechanism run on the same batch, reserved jointly with the
    /// Gaussian (sparse DP-SGD's coordinate selection).
    pub(super) also: Option<DpEvent>,
    /// Whether this charge's batch has been drawn.
    pub(super) drawn: bool,
    /// The sampler's state after this step's draw, taken by the engine at the release.
    pub(super) shuffle: Option<ShuffleState>,
    /// The noise multiplier (as configured) the charge was reserved at.
    pub(super) noise_multiplier: Option<f64>,
}

impl StepCharge {
    /// The Gaussian mechanism of the step (`None` for a non-private run): sensitivity
    /// `sum_sensitivity(C)` of the sampler's relation (C, or 2C under replace-one), noise
    /// standard deviation σC.
    pub fn mechanism(&self) -> Option<&GaussianMechanism> {
        self.mechanism.as_ref()
    }
}

/// The sum of a batch's clipped per-example gradients, covering every parameter. Only
/// the engine makes one; it is released through [`PrivacyEngine::release`].
#[derive(Clone, Debug)]
pub struct ClippedSum {
    pub(super) sum: Gradient,
    pub(super) rule: ClipRule,
    /// The id of the charge whose batch was summed.
    pub(super) charge: u64,
    pub(super) batch_size: usize,
    pub(super) loss_sum: f64,
    pub(super) nonfinite: usize,
}

impl ClippedSum {
    /// The rule each example's gradient was bounded by.
    pub fn rule(&self) -> ClipRule {
        self.rule
    }

    /// The examples summed.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }
}

/// A released (noisy) gradient sum, charged to the ledger, with the batch's statistics
/// that ε does **not** cover (loss, non-finite count; see [`StepReport`]).
#[derive(Clone, Debug)]
pub struct NoisyGradient {
    pub(super) sum: Gradient,
    pub(super) support: Option<Vec<usize>>,
    pub(super) batch_size: usize,
    pub(super) loss_sum: f64,
    pub(super) nonfinite: usize,
}

impl NoisyGradient {
    /// The noisy sum `Σᵢ cᵢ∇ℓᵢ + N(0, σ²C²I)`, flat in the model's parameter order (for a
    /// model that keeps its parameters on a device, copied from there).
    pub fn sum(&self) -> Result<Vec<f32>> {
        self.sum.to_host()
    }

    /// The coordinates the noise was added on, when the release was restricted to a
    /// support (sparse DP-SGD); `None` for a dense release.
    pub fn support(&self) -> Option<&[usize]> {
        self.support.as_deref()
    }
}
