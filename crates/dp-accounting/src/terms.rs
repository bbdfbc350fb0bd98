//! The one walk of an event tree. Every accountant reads a leaf event as its own term —
//! an RDP curve, a PLD leaf, ρ and ξ, μ², an (ε, δ) pair — and this walk does the rest,
//! once for all of them (in the spirit of dp_accounting's `_maybe_compose`): the event is
//! validated, `NoOp` adds nothing, `SelfComposed` multiplies the count (saturating),
//! `Composed` visits its parts in order.

use crate::error::Result;
use crate::event::DpEvent;

/// An accountant's reading of the leaf events (every event but `NoOp`, `SelfComposed`
/// and `Composed`).
pub(crate) trait LeafTerms {
    /// What the accountant adds up for one leaf.
    type Term;

    /// The term of one occurrence of `leaf`, or why the accountant cannot take it.
    fn leaf_term(&self, leaf: &DpEvent) -> Result<Self::Term>;

    /// The terms of `event` composed `count` times, each with its count, in tree order;
    /// validated first, so that an accountant can check the whole event before it
    /// changes anything.
    fn terms(&self, event: &DpEvent, count: u64) -> Result<Vec<(Self::Term, u64)>> {
        event.validate()?;
        let mut out = Vec::new();
        walk(event, count, &mut |leaf, n| {
            out.push((self.leaf_term(leaf)?, n));
            Ok(())
        })?;
        Ok(out)
    }
}

/// Calls `visit` with each leaf of `event` and its count (`count` times the counts of the
/// `SelfComposed` nodes above it).
fn walk(
    event: &DpEvent,
    count: u64,
    visit: &mut impl FnMut(&DpEvent, u64) -> Result<()>,
) -> Result<()> {
    match event {
        DpEvent::NoOp => Ok(()),
        DpEvent::SelfComposed {
            event,
            count: inner,
        } => walk(event, count.saturating_mul(*inner), visit),
        DpEvent::Composed { events } => events.iter().try_for_each(|e| walk(e, count, visit)),
        leaf => visit(leaf, count),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Names;
    impl LeafTerms for Names {
        type Term = String;
        fn leaf_term(&self, leaf: &DpEvent) -> Result<String> {
            Ok(leaf.to_string())
        }
    }

    /// Counts multiply down the tree, `NoOp` vanishes, parts keep their order.
    #[test]
    fn the_walk_multiplies_counts_and_keeps_order() -> Result<()> {
        let g = DpEvent::gaussian(1.0);
        let l = DpEvent::Laplace {
            noise_multiplier: 2.0,
        };
        let tree = DpEvent::Composed {
            events: vec![
                DpEvent::self_composed(
                    DpEvent::Composed {
                        events: vec![g.clone(), DpEvent::NoOp, l.clone()],
                    },
                    3,
                ),
                g.clone(),
            ],
        };
        let terms = Names.terms(&tree, 5)?;
        let expected = vec![(g.to_string(), 15), (l.to_string(), 15), (g.to_string(), 5)];
        assert_eq!(terms, expected);
        Ok(())
    }
}
