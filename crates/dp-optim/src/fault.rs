//! Deliberate faults, for tests that show the privacy audit detects a broken engine.
//!
//! Compiled only with the `fault-injection` feature, which dp-optim's own tests enable;
//! a faulty engine keeps charging its ledger as if it were correct, which is exactly the
//! bug an audit must catch.

use dp_models::ClipRule;

/// What to break.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Add no noise to the clipped sum.
    SkipNoise,
    /// Sum the raw per-example gradients (the noise stays, scaled for the clip norm).
    SkipClipping,
}

impl Fault {
    /// The clipping rule applied under this fault (the engine still reports `rule`).
    pub fn clip_rule(self, rule: ClipRule) -> ClipRule {
        if self == Fault::SkipClipping {
            ClipRule::None
        } else {
            rule
        }
    }
}
