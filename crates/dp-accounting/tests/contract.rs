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

/// dp_accounting's exponential-mechanism branch forgets `count` (`docs/accounting.md`, "RDP"); ours does
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

/// ρ-zCDP does not imply √(2ρ)-GDP or the Gaussian's PLD: randomized response with
/// ε = √(2ρ) = 1 is 0.5-zCDP (Bun & Steinke 2016, Prop. 1.4) and has
/// δ(0) = TV = tanh(1/2) ≈ 0.462, so its ε at δ = 0.4 is ln(e − 0.4(1 + e)) ≈ 0.208, and
/// Poisson-sampled at q = 0.1 its δ(0) is q·tanh(1/2) ≈ 0.0462. Reading ZCdp(0.5) as the
/// Gaussian with σ = 1 gave ε = 0 at δ = 0.4 (GDP) and δ(0) ≈ 0.0383 (PLD): both
/// under-reports. Both accountants must refuse it, sampled or not.
#[test]
fn zcdp_is_not_read_as_a_gaussian() -> Result<()> {
    let rr_tv = (0.5f64).tanh();
    let rr_eps_at_04 = (1.0f64.exp() - 0.4 * (1.0 + 1.0f64.exp())).ln();
    assert!((rr_eps_at_04 - 0.2078).abs() < 1e-3);

    // What the Gaussian reading would have said, from the Gaussian itself.
    let mut gdp_gauss = GdpConfig::default().build()?;
    gdp_gauss.compose(&DpEvent::gaussian(1.0), 1)?;
    assert_eq!(gdp_gauss.epsilon(0.4)?, 0.0);
    let mut pld_gauss = PldConfig::default().build()?;
    pld_gauss.compose(&DpEvent::poisson_sampled(0.1, DpEvent::gaussian(1.0)), 1)?;
    let gauss_delta = pld_gauss.delta(0.0)?;
    assert!(gauss_delta < 0.1 * rr_tv - 5e-3, "{gauss_delta}");

    let zcdp = DpEvent::zcdp(0.5);
    let refusals: Vec<(Box<dyn Accountant>, DpEvent, &str)> = vec![
        (Box::new(GdpConfig::default().build()?), zcdp.clone(), "GDP"),
        (
            Box::new(GdpConfig::default().build()?),
            DpEvent::poisson_sampled(0.1, zcdp.clone()),
            "GDP",
        ),
        (
            Box::new(GdpConfig::default().build()?),
            DpEvent::sampled_without_replacement(100, 10, zcdp.clone()),
            "GDP",
        ),
        (
            Box::new(PldConfig::default().build()?),
            DpEvent::poisson_sampled(0.1, zcdp.clone()),
            "Gaussian privacy loss distribution",
        ),
        (
            Box::new(PldConfig::default().build()?),
            DpEvent::poisson_sampled(
                0.1,
                DpEvent::Composed {
                    events: vec![DpEvent::gaussian(2.0), zcdp.clone()],
                },
            ),
            "Gaussian privacy loss distribution",
        ),
        (
            Box::new(PldConfig::default().build()?),
            zcdp.clone(),
            "Gaussian privacy loss distribution",
        ),
    ];
    for (mut acc, event, why) in refusals {
        let err = acc.compose(&event, 1);
        assert!(
            matches!(&err, Err(Error::Unsupported { reason, .. })
                if reason.contains("zCDP does not imply") && reason.contains(why)),
            "{} on {event}: {err:?}",
            acc.name()
        );
        assert!(acc.ledger().entries.is_empty());
    }

    // Sampling without replacement in RDP has only the Gaussian's bound: refused too.
    let replace_one = RdpConfig {
        relation: dp_accounting::NeighbouringRelation::ReplaceOne,
        ..RdpConfig::default()
    }
    .build()?;
    let wor = DpEvent::sampled_without_replacement(100, 10, zcdp.clone());
    assert!(matches!(
        replace_one.supports(&wor),
        Err(Error::Unsupported { reason, .. }) if reason.contains("zCDP does not imply")
    ));
    Ok(())
}

/// RDP keeps ZCdp: unsampled it is exactly (α, ρα)-RDP (Bun & Steinke 2016, Def. 1.1);
/// Poisson-sampled it takes Zhu & Wang's general bound over the curve ρα, not the
/// subsampled Gaussian's curve. At α = 3 the general bound is
/// `ln[(1−q)²(1+2q) + 3q²(1−q)e^{2ρ} + q³e^{3·4ρ}]/2`; the Gaussian's has `e^{6ρ}` in the
/// last term.
#[test]
fn rdp_accounts_sampled_zcdp_by_the_general_bound() -> Result<()> {
    let (q, rho) = (0.1f64, 0.5f64);
    let config = RdpConfig {
        orders: dp_accounting::OrderGrid::Custom(vec![3.0]),
        ..RdpConfig::default()
    };
    let mut plain = config.clone().build()?;
    plain.compose(&DpEvent::zcdp(rho), 1)?;
    assert!((plain.rdp()[0] - 3.0 * rho).abs() < 1e-15);

    let mut sampled = config.clone().build()?;
    sampled.compose(&DpEvent::poisson_sampled(q, DpEvent::zcdp(rho)), 1)?;
    let general = ((1.0 - q).powi(2) * (1.0 + 2.0 * q)
        + 3.0 * q * q * (1.0 - q) * (2.0 * rho).exp()
        + q.powi(3) * (12.0 * rho).exp())
    .ln()
        / 2.0;
    let gaussian = ((1.0 - q).powi(2) * (1.0 + 2.0 * q)
        + 3.0 * q * q * (1.0 - q) * (2.0 * rho).exp()
        + q.powi(3) * (6.0 * rho).exp())
    .ln()
        / 2.0;
    let got = sampled.rdp()[0];
    assert!(
        (got - general).abs() < 1e-12 * general,
        "{got} vs {general}"
    );
    assert!(got > gaussian * 1.1, "{got} vs Gaussian {gaussian}");
    Ok(())
}

/// The PLD accountant composes a run incrementally (one PLD per distinct event, pending
/// counts self-composed when ε is asked): step by step, asked every step (as a budget
/// filter does) or only at the end, it gives the ε of the same run composed as one
/// `SelfComposed` event, within the discretisation's slack — and the same ε whichever
/// way the events interleave.
#[test]
fn pld_incremental_composition_matches_one_self_composition() -> Result<()> {
    let step = DpEvent::poisson_sampled(0.01, DpEvent::gaussian(1.1));
    let extra = DpEvent::gaussian(20.0);
    let steps = 300;
    let mut whole = PldConfig::default().build()?;
    whole.compose(&step, steps)?;
    whole.compose(&extra, 2)?;
    let reference = whole.epsilon(1e-5)?;
    let (mut lazy, mut eager) = (PldConfig::default().build()?, PldConfig::default().build()?);
    for i in 0..steps {
        lazy.compose(&step, 1)?;
        eager.compose(&step, 1)?;
        if i == 100 || i == 200 {
            lazy.compose(&extra, 1)?;
            eager.compose(&extra, 1)?;
        }
        let asked = eager.epsilon(1e-5)?;
        assert!(asked.is_finite() && asked <= reference * (1.0 + 1e-6));
    }
    for (name, acc) in [("asked at the end", &lazy), ("asked every step", &eager)] {
        let epsilon = acc.epsilon(1e-5)?;
        assert!(
            (epsilon - reference).abs() <= 1e-6 * reference,
            "{name}: {epsilon} vs {reference}"
        );
        assert_eq!(acc.ledger().to_event(), lazy.ledger().to_event());
    }
    Ok(())
}
