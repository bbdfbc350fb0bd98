//! The contract every accountant must satisfy (see the `Accountant` trait docs).

use dp_accounting::{
    Accountant, ApproxDpConfig, Conversion, DpEvent, Error, GdpConfig, PldConfig, RdpConfig,
    Result, ZcdpConfig,
};

/// Runs the contract on an accountant factory and an event it supports.
fn accountant_contract<A: Accountant + Clone>(
    make: impl Fn() -> Result<A>,
    supported: DpEvent,
) -> Result<()> {
    // An empty accountant has spent nothing.
    let empty = make()?;
    assert_eq!(empty.epsilon(1e-5)?, 0.0, "{}: empty epsilon", empty.name());
    assert!(empty.delta(1.0)? <= 1e-15, "{}: empty delta", empty.name());

    // An unsupported event at any depth is an error and changes nothing.
    let mut acc = make()?;
    acc.compose(&supported, 1)?;
    let before = acc.epsilon(1e-5)?;
    let ledger_before = acc.ledger().clone();
    let unsupported = DpEvent::Composed {
        events: vec![
            supported.clone(),
            DpEvent::self_composed(
                DpEvent::sampled_without_replacement(10, 11, DpEvent::NoOp),
                2,
            ),
        ],
    };
    assert!(
        acc.compose(&unsupported, 1).is_err(),
        "{}: invalid nested event",
        acc.name()
    );
    let nan = DpEvent::Composed {
        events: vec![supported.clone(), DpEvent::gaussian(f64::NAN)],
    };
    assert!(
        matches!(acc.compose(&nan, 1), Err(Error::InvalidParameter { .. })),
        "{}: NaN",
        acc.name()
    );
    assert_eq!(
        acc.epsilon(1e-5)?,
        before,
        "{}: state changed by a refused event",
        acc.name()
    );
    assert_eq!(acc.ledger(), &ledger_before);

    // count = k, k separate compositions and SelfComposed(k) agree.
    let k = 3;
    let mut by_count = make()?;
    by_count.compose(&supported, k)?;
    let mut one_by_one = make()?;
    for _ in 0..k {
        one_by_one.compose(&supported, 1)?;
    }
    let mut nested = make()?;
    nested.compose(&DpEvent::self_composed(supported.clone(), k), 1)?;
    let (a, b, c) = (
        by_count.epsilon(1e-5)?,
        one_by_one.epsilon(1e-5)?,
        nested.epsilon(1e-5)?,
    );
    // PLD discretises each composition step, so it may differ in the 4th digit.
    let tol = 2e-3 * a.max(1.0);
    assert!(
        (a - b).abs() <= tol && (a - c).abs() <= tol,
        "{}: {a} {b} {c}",
        by_count.name()
    );
    assert!(
        a > before,
        "{}: composing more must cost more",
        by_count.name()
    );

    // δ(ε(δ)) ≤ δ: the two directions agree (tightness of the round trip is pinned per
    // accountant by the vectors, e.g. A19, A20; step-shaped δ curves need not be tight).
    for delta in [1e-6, 1e-3] {
        let eps = by_count.epsilon(delta)?;
        if eps > 0.0 && eps.is_finite() {
            let back = by_count.delta(eps)?;
            assert!(
                back <= delta * 1.001,
                "{}: delta({eps}) = {back} > {delta}",
                by_count.name()
            );
        }
    }

    // Bad targets are typed errors.
    assert!(
        by_count.epsilon(0.0).is_err()
            && by_count.epsilon(1.0).is_err()
            && by_count.epsilon(f64::NAN).is_err()
    );
    assert!(by_count.delta(-1.0).is_err() && by_count.delta(f64::NAN).is_err());
    Ok(())
}

fn dp_sgd_step() -> DpEvent {
    DpEvent::poisson_sampled(0.01, DpEvent::gaussian(1.0))
}

#[test]
fn rdp_contract() -> Result<()> {
    accountant_contract(
        || RdpConfig::default().build(),
        DpEvent::self_composed(dp_sgd_step(), 50),
    )?;
    accountant_contract(
        || {
            RdpConfig {
                conversion: Conversion::Classic,
                ..RdpConfig::default()
            }
            .build()
        },
        DpEvent::laplace(2.0),
    )
}

#[test]
fn pld_contract() -> Result<()> {
    accountant_contract(
        || PldConfig::default().build(),
        DpEvent::self_composed(dp_sgd_step(), 50),
    )?;
    accountant_contract(|| PldConfig::default().build(), DpEvent::laplace(2.0))
}

#[test]
fn gdp_contract() -> Result<()> {
    accountant_contract(
        || GdpConfig::default().build(),
        DpEvent::self_composed(dp_sgd_step(), 50),
    )
}

#[test]
fn zcdp_contract() -> Result<()> {
    accountant_contract(|| ZcdpConfig::default().build(), DpEvent::gaussian(4.0))
}

#[test]
fn approx_dp_contract() -> Result<()> {
    accountant_contract(
        || ApproxDpConfig::default().build(),
        DpEvent::EpsilonDelta {
            epsilon: 0.1,
            delta: 1e-8,
        },
    )
}

/// Every accountant refuses what it cannot account for, naming the event.
#[test]
fn unsupported_events_are_named() -> Result<()> {
    let zcdp_err = ZcdpConfig::default().build()?.supports(&dp_sgd_step());
    assert!(
        matches!(&zcdp_err, Err(Error::Unsupported { reason, .. }) if reason.contains("subsampling"))
    );
    let gdp_err = GdpConfig::default()
        .build()?
        .supports(&DpEvent::laplace(1.0));
    assert!(matches!(gdp_err, Err(Error::Unsupported { .. })));
    let pld_err = PldConfig::default().build()?.supports(&DpEvent::zcdp(0.1));
    assert!(matches!(pld_err, Err(Error::Unsupported { .. })));
    let approx_err = ApproxDpConfig::default()
        .build()?
        .supports(&DpEvent::gaussian(1.0));
    assert!(matches!(approx_err, Err(Error::Unsupported { .. })));
    // Sampling scheme and neighbouring relation must match.
    let wor = DpEvent::sampled_without_replacement(1000, 10, DpEvent::gaussian(1.0));
    assert!(RdpConfig::default().build()?.supports(&wor).is_err());
    let replace_one = RdpConfig {
        relation: dp_accounting::NeighbouringRelation::ReplaceOne,
        ..RdpConfig::default()
    }
    .build()?;
    assert!(replace_one.supports(&wor).is_ok());
    assert!(replace_one.supports(&dp_sgd_step()).is_err());
    Ok(())
}

/// dp_accounting's exponential-mechanism branch forgets `count` (peers.md §2.2); ours does
/// not: SelfComposed(Exponential(1), 10) costs ten times one.
#[test]
fn exponential_mechanism_count_is_not_dropped() -> Result<()> {
    let mut once = RdpConfig::default().build()?;
    once.compose(&DpEvent::Exponential { epsilon: 1.0 }, 1)?;
    let mut ten = RdpConfig::default().build()?;
    ten.compose(
        &DpEvent::self_composed(DpEvent::Exponential { epsilon: 1.0 }, 10),
        1,
    )?;
    for (a, b) in once.rdp().iter().zip(ten.rdp()) {
        assert!((b - 10.0 * a).abs() <= 1e-12 * b.abs().max(1.0));
    }
    // PLD treats it as a generic 1-DP mechanism (randomized response): between the
    // bounded-range RDP value and basic composition.
    let mut pld = PldConfig::default().build()?;
    pld.compose(&DpEvent::Exponential { epsilon: 1.0 }, 10)?;
    let (rdp_eps, pld_eps) = (ten.epsilon(1e-5)?, pld.epsilon(1e-5)?);
    assert!(
        rdp_eps > once.epsilon(1e-5)? && rdp_eps < 10.0 && pld_eps < 10.0,
        "{rdp_eps} {pld_eps}"
    );
    Ok(())
}
