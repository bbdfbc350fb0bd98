//! A privacy budget and the filter that enforces it on an accountant: every charge is a
//! dry run first, and counts only when it fits.

use serde::{Deserialize, Serialize};

use crate::accountant::Accountant;
use crate::error::{Error, Result};
use crate::event::DpEvent;
use crate::ledger::Ledger;
use crate::validate;

/// A privacy budget (ε, δ).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// The largest ε allowed at `delta`.
    pub epsilon: f64,
    /// The δ that `epsilon` is allowed at, in (0, 1).
    pub delta: f64,
}

impl Budget {
    /// A validated budget.
    pub fn new(epsilon: f64, delta: f64) -> Result<Self> {
        validate::non_negative("epsilon", epsilon)?;
        validate::open_unit("delta", delta)?;
        Ok(Budget { epsilon, delta })
    }

    /// No limit on ε (δ is still where ε is reported): a [`BudgetFilter`] with it only
    /// records, and its reservations skip the ε computation.
    pub fn unbounded(delta: f64) -> Result<Self> {
        validate::open_unit("delta", delta)?;
        Ok(Budget {
            epsilon: f64::INFINITY,
            delta,
        })
    }

    /// Whether ε is limited.
    pub fn is_bounded(&self) -> bool {
        self.epsilon.is_finite()
    }
}

/// An accountant that refuses any composition that would take ε past a budget.
///
/// Every charge is composed into a scratch copy first; the real state changes only when
/// the result still fits, so a refused event leaves no trace. For a release that must be
/// charged *before* it happens, [`reserve`](Self::reserve) does the dry run and
/// [`commit`](Self::commit) makes it count: the caller releases in between, and only if
/// the reservation was granted.
#[derive(Clone, Debug)]
pub struct BudgetFilter<A> {
    accountant: A,
    budget: Budget,
}

/// A charge that fits the budget, not yet recorded: [`BudgetFilter::commit`] records it.
/// Under a bounded budget it holds the charge composed into a copy of the accountant
/// (the ε check needed it); under an unbounded one only the event, checked for support,
/// which `commit` composes (so a reservation costs no copy of a long ledger).
#[derive(Clone, Debug)]
pub struct Reservation<A> {
    scratch: Option<A>,
    event: DpEvent,
    count: u64,
    epsilon: Option<f64>,
    base: (usize, u64),
}

impl<A> Reservation<A> {
    /// ε after the charge (`None` under an unbounded budget, where it is not computed).
    pub fn epsilon(&self) -> Option<f64> {
        self.epsilon
    }
}

/// Where a ledger stands: its entry count and the last entry's count (every record
/// changes one of them).
fn position(ledger: &Ledger) -> (usize, u64) {
    (
        ledger.entries.len(),
        ledger.entries.last().map_or(0, |e| e.count),
    )
}

impl<A: Accountant + Clone> BudgetFilter<A> {
    /// Wraps `accountant` (which may already hold events) with `budget`.
    pub fn new(accountant: A, budget: Budget) -> Self {
        BudgetFilter { accountant, budget }
    }

    /// Whether `event` × `count` would still fit, and the ε it would reach.
    pub fn would_fit(&self, event: &DpEvent, count: u64) -> Result<(bool, f64)> {
        let mut scratch = self.accountant.clone();
        scratch.compose(event, count)?;
        let epsilon = scratch.epsilon(self.budget.delta)?;
        Ok((epsilon <= self.budget.epsilon, epsilon))
    }

    /// The dry run of a charge: refused with [`Error::BudgetExceeded`] when `event` ×
    /// `count` would take ε past the budget, or with the accountant's error when it
    /// cannot compose the event. Nothing changes here.
    pub fn reserve(&self, event: &DpEvent, count: u64) -> Result<Reservation<A>> {
        let base = position(self.accountant.ledger());
        if !self.budget.is_bounded() {
            self.accountant.supports(event)?;
            return Ok(Reservation {
                scratch: None,
                event: event.clone(),
                count,
                epsilon: None,
                base,
            });
        }
        let mut scratch = self.accountant.clone();
        scratch.compose(event, count)?;
        let epsilon = scratch.epsilon(self.budget.delta)?;
        // A NaN ε never fits.
        if epsilon.is_nan() || epsilon > self.budget.epsilon {
            return Err(Error::BudgetExceeded {
                epsilon,
                budget_epsilon: self.budget.epsilon,
                delta: self.budget.delta,
            });
        }
        Ok(Reservation {
            scratch: Some(scratch),
            event: event.clone(),
            count,
            epsilon: Some(epsilon),
            base,
        })
    }

    /// Records a reservation made on the current state. A reservation made before another
    /// charge was recorded is stale (it would drop that charge) and is refused.
    pub fn commit(&mut self, reservation: Reservation<A>) -> Result<()> {
        if reservation.base != position(self.accountant.ledger()) {
            return Err(Error::InvalidParameter {
                name: "reservation",
                value: reservation.base.1 as f64,
                reason: "stale: the ledger changed after it was made",
            });
        }
        match reservation.scratch {
            Some(scratch) => self.accountant = scratch,
            // An error here (a numerical limit `supports` cannot foresee) leaves the
            // accountant unchanged, by the `Accountant` contract.
            None => self
                .accountant
                .compose(&reservation.event, reservation.count)?,
        }
        Ok(())
    }

    /// Composes `event` × `count` if it fits; otherwise [`Error::BudgetExceeded`] and no
    /// state change. Returns ε after the charge (`∞`-budget filters compute it too).
    pub fn try_compose(&mut self, event: &DpEvent, count: u64) -> Result<f64> {
        let reservation = self.reserve(event, count)?;
        let epsilon = reservation.epsilon;
        self.commit(reservation)?;
        match epsilon {
            Some(e) => Ok(e),
            None => self.spent(),
        }
    }

    /// ε spent so far at the budget's δ.
    pub fn spent(&self) -> Result<f64> {
        self.accountant.epsilon(self.budget.delta)
    }

    /// The wrapped accountant.
    pub fn accountant(&self) -> &A {
        &self.accountant
    }

    /// The budget.
    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// A new budget over the same ledger (a resumed run with a changed target).
    pub fn set_budget(&mut self, budget: Budget) {
        self.budget = budget;
    }
}
