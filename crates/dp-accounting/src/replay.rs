//! Replaying a [`Ledger`] into an accountant: what a resumed run, a checkpoint reader or
//! a report does to recompute ε from the events alone.

use crate::accountant::Accountant;
use crate::error::{Error, Result};
use crate::ledger::Ledger;

impl Ledger {
    /// Composes every entry into `accountant` (which must use the same relation).
    pub fn replay(&self, accountant: &mut dyn Accountant) -> Result<()> {
        self.check_relation(accountant)?;
        for entry in &self.entries {
            accountant.compose(&entry.event, entry.count)?;
        }
        Ok(())
    }

    /// [`replay`](Self::replay) of the [`tally`](Self::tally): the whole ledger, each
    /// distinct event composed once at its total count. Every accountant here is
    /// order-independent, so ε is the same; an accountant whose cost grows with the
    /// number of compositions (PLD) reads an alternating ledger (SA-DPSGD's steps and
    /// acceptance tests) in two compositions instead of thousands.
    pub fn replay_tallied(&self, accountant: &mut dyn Accountant) -> Result<()> {
        self.check_relation(accountant)?;
        for entry in self.tally() {
            accountant.compose(&entry.event, entry.count)?;
        }
        Ok(())
    }

    fn check_relation(&self, accountant: &dyn Accountant) -> Result<()> {
        if accountant.relation() != self.relation {
            return Err(Error::Unsupported {
                accountant: accountant.name(),
                event: "ledger".to_string(),
                reason: format!(
                    "the ledger was kept under {} neighbours, the accountant uses {}",
                    self.relation,
                    accountant.relation()
                ),
            });
        }
        Ok(())
    }
}
