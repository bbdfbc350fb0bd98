//! Cross-crate end-to-end tests, through the crates' public APIs only.

mod new_algorithm;

use dp_accounting::{Accountant, AccountantKind, DpEvent, Ledger, NeighbouringRelation, OrderGrid};

/// A run's ledger, written as JSON and read back, replays into every accountant to the
/// same ε as composing the events directly.
#[test]
fn ledger_json_replays_into_every_accountant() -> dp_accounting::Result<()> {
    let events = [
        DpEvent::dp_sgd(0.01, 1.2, 300),
        DpEvent::dp_sgd(0.02, 2.0, 100),
    ];
    for kind in AccountantKind::DP_SGD {
        let mut direct = kind.build(NeighbouringRelation::AddOrRemoveOne, &OrderGrid::Opacus)?;
        for e in &events {
            direct.compose(e, 1)?;
        }
        let ledger = Ledger::from_json(&direct.ledger().to_json()?)?;
        let mut replayed = kind.build(NeighbouringRelation::AddOrRemoveOne, &OrderGrid::Opacus)?;
        ledger.replay(&mut replayed)?;
        assert_eq!(direct.epsilon(1e-5)?, replayed.epsilon(1e-5)?, "{kind}");
        // A ledger kept under another relation is refused, not silently re-interpreted.
        let mut other = kind.build(NeighbouringRelation::ReplaceOne, &OrderGrid::Opacus)?;
        assert!(ledger.replay(&mut other).is_err(), "{kind}");
    }
    Ok(())
}
