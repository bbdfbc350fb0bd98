//! Deliberate faults, for tests that show the privacy audit detects a broken engine.
//!
//! Compiled only with the `fault-injection` feature, which dp-optim's own tests enable;
//! a faulty engine keeps charging its ledger as if it were correct, which is exactly the
//! bug an audit must catch.

use dp_models::fused::ClipRule;
use dp_models::PrivateModel;

use crate::engine::PrivacyEngine;

/// What to break.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Add no noise to the clipped sum.
    SkipNoise,
    /// Sum the raw per-example gradients (the noise stays, scaled for the clip norm).
    SkipClipping,
}

/// The noise standard deviation under `fault`.
pub(crate) fn noise_std(fault: Option<Fault>, std: f64) -> f64 {
    if fault == Some(Fault::SkipNoise) {
        0.0
    } else {
        std
    }
}

/// The clipping rule under `fault`.
pub(crate) fn clip_rule(fault: Option<Fault>, rule: ClipRule) -> ClipRule {
    if fault == Some(Fault::SkipClipping) {
        ClipRule::None
    } else {
        rule
    }
}

impl<M: PrivateModel> PrivacyEngine<M> {
    /// Breaks the engine (tests of the audit only).
    pub fn inject_fault(&mut self, fault: Fault) {
        self.set_fault(Some(fault));
    }
}
