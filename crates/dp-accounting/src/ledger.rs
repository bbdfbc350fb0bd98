//! The ledger of a run: every event composed, in order, serialisable and replayable into
//! any accountant (`replay.rs`).
//!
//! **Contract.** Ledgers outlive the code that wrote them (checkpoints, committed results,
//! a resumed run replays its ledger into a fresh accountant under its budget), so an
//! event's meaning never changes once released: a `DpEvent` variant or field is never
//! removed or reinterpreted, only added (`event.rs` states the same from its side), and
//! a ledger read back is validated event by event.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::event::{DpEvent, NeighbouringRelation};

/// One composed event and how many times it was composed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// The event.
    pub event: DpEvent,
    /// The count it was composed with.
    pub count: u64,
}

/// Everything composed into an accountant, in order: serialisable to JSON and replayable
/// into any accountant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    /// The neighbouring relation the events were accounted under.
    pub relation: NeighbouringRelation,
    /// The composed events.
    pub entries: Vec<LedgerEntry>,
}

impl Ledger {
    /// An empty ledger.
    pub fn new(relation: NeighbouringRelation) -> Self {
        Ledger {
            relation,
            entries: Vec::new(),
        }
    }

    /// Appends an entry; consecutive identical events merge their counts.
    pub fn record(&mut self, event: DpEvent, count: u64) {
        if let Some(last) = self.entries.last_mut() {
            if last.event == event {
                last.count = last.count.saturating_add(count);
                return;
            }
        }
        self.entries.push(LedgerEntry { event, count });
    }

    /// The whole ledger as one event tree.
    pub fn to_event(&self) -> DpEvent {
        DpEvent::Composed {
            events: self
                .entries
                .iter()
                .map(|e| DpEvent::self_composed(e.event.clone(), e.count))
                .collect(),
        }
    }

    /// Each distinct event with its total count, in the order first recorded: the same
    /// composition as the entries (composition commutes), in as few terms as possible.
    pub fn tally(&self) -> Vec<LedgerEntry> {
        let mut tally: Vec<LedgerEntry> = Vec::new();
        for entry in &self.entries {
            match tally.iter_mut().find(|t| t.event == entry.event) {
                Some(t) => t.count = t.count.saturating_add(entry.count),
                None => tally.push(entry.clone()),
            }
        }
        tally
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(self).map_err(|e| Error::Serialization(e.to_string()))
    }

    /// Parses JSON written by [`to_json`](Self::to_json), validating every event.
    pub fn from_json(json: &str) -> Result<Self> {
        let ledger: Ledger =
            serde_json::from_str(json).map_err(|e| Error::Serialization(e.to_string()))?;
        for entry in &ledger.entries {
            entry.event.validate()?;
        }
        Ok(ledger)
    }
}
