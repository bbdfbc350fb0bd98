//! What every mechanism shares.

use dp_accounting::DpEvent;

/// A mechanism is a validated value that knows its own privacy: the constructor fixes the
/// parameters, releases go through the same value, and [`event`](Mechanism::event) states
/// the guarantee for the ledger, so output and privacy claim cannot drift apart.
pub trait Mechanism {
    /// The accounting event of **one** release.
    fn event(&self) -> DpEvent;
}
