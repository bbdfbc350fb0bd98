//! Snapshots of θ and the optimiser moments, to undo later updates (SA-DPSGD's rejected
//! steps): nothing is released by a rollback, and the ledger keeps every charge.

use dp_models::PrivateModel;

use super::PrivacyEngine;
use crate::error::Result;

/// θ and the optimiser moments at one point of a run, to undo later updates (the ledger
/// keeps every charge made since: rolling back does not un-spend ε).
#[derive(Clone, Debug)]
pub struct Snapshot {
    theta: Vec<f32>,
    moments: Vec<Vec<f32>>,
}

impl<M: PrivateModel> PrivacyEngine<M> {
    /// θ and the optimiser moments now.
    pub fn snapshot(&self) -> Result<Snapshot> {
        Ok(Snapshot {
            theta: self.model.parameters()?,
            moments: self.moments.to_host()?,
        })
    }

    /// Puts back a [`snapshot`](Self::snapshot) (the ledger and the step count keep
    /// every step since: they did touch the data).
    pub fn rollback(&mut self, snapshot: Snapshot) -> Result<()> {
        self.model.set_parameters(&snapshot.theta)?;
        self.moments.set_from_host(&snapshot.moments)
    }
}
