//! Property tests: monotonicity, calibration never overshoots, RDP never below PLD.

use dp_accounting::{
    calibrate_noise, calibrate_share, calibrate_steps, Accountant, CalibrationOptions, DpEvent,
    PldConfig, RdpConfig,
};
use proptest::prelude::*;

fn rdp_epsilon(q: f64, sigma: f64, steps: u64) -> f64 {
    let mut acc = RdpConfig::default()
        .build()
        .expect("default config is valid");
    acc.compose(&DpEvent::dp_sgd(q, sigma, steps), 1)
        .expect("valid event");
    acc.epsilon(1e-5).expect("valid delta")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn epsilon_monotone_in_steps_and_rate_antitone_in_sigma(
        q in 1e-4f64..0.5, sigma in 0.5f64..5.0, steps in 1u64..5000, extra in 1u64..5000,
        dq in 1e-5f64..0.3, dsigma in 0.01f64..2.0,
    ) {
        let base = rdp_epsilon(q, sigma, steps);
        prop_assert!(rdp_epsilon(q, sigma, steps + extra) >= base);
        prop_assert!(rdp_epsilon((q + dq).min(1.0), sigma, steps) >= base);
        prop_assert!(rdp_epsilon(q, sigma + dsigma, steps) <= base);
    }

    #[test]
    fn calibrated_sigma_never_overshoots(
        target in 0.3f64..10.0, q in 1e-3f64..0.1, steps in 10u64..3000,
    ) {
        let calibrated = calibrate_noise(
            || RdpConfig::default().build(),
            |s| DpEvent::dp_sgd(q, s, steps),
            target,
            1e-5,
            CalibrationOptions::default(),
        ).expect("calibration succeeds");
        prop_assert!(calibrated.epsilon <= target);
        prop_assert!(rdp_epsilon(q, calibrated.value, steps) <= target);
        // And it is tight: 0.1% less noise exceeds the target.
        prop_assert!(rdp_epsilon(q, calibrated.value * 0.999, steps) > target);
    }

    #[test]
    fn calibrated_steps_never_overshoot(target in 0.5f64..8.0, q in 1e-3f64..0.05, sigma in 0.7f64..3.0) {
        let make = || RdpConfig::default().build();
        let got = calibrate_steps(make, |t| DpEvent::dp_sgd(q, sigma, t), target, 1e-5)
            .expect("calibration succeeds");
        prop_assume!(got.value > 0);
        prop_assert!(rdp_epsilon(q, sigma, got.value) <= target);
        prop_assert!(rdp_epsilon(q, sigma, got.value + 1) > target);
    }

    /// A Laplace release of ε share x beside a DP-SGD run: the calibrated share keeps the
    /// run within the target, and any share 1e-9 larger would not (unless it is the cap).
    #[test]
    fn calibrated_share_never_overshoots(target in 1.0f64..8.0, q in 1e-3f64..0.05, sigma in 0.8f64..3.0) {
        let total = |x: f64| -> dp_accounting::Result<f64> {
            let mut acc = RdpConfig::default().build()?;
            let laplace = DpEvent::Laplace { noise_multiplier: 1.0 / x };
            acc.compose(&DpEvent::Composed { events: vec![DpEvent::dp_sgd(q, sigma, 500), laplace] }, 1)?;
            acc.epsilon(1e-5)
        };
        prop_assume!(total(1e-6).expect("valid") < target);
        let got = calibrate_share(total, 4.0, target).expect("a share fits");
        prop_assert!(got.epsilon <= target);
        prop_assert_eq!(got.epsilon, total(got.value).expect("valid"));
        if got.value < 4.0 {
            prop_assert!(total(got.value * (1.0 + 1e-9)).expect("valid") > target);
        }
    }
}

/// The share is the cap where the cap fits, the bisection's lower end otherwise (an
/// ε of 1 + x against 3: x = 2 to the last bits), and an error where nothing fits.
#[test]
fn calibrated_share_of_a_line() {
    let line = |x: f64| -> dp_accounting::Result<f64> { Ok(1.0 + x) };
    let capped = calibrate_share(line, 1.5, 3.0).expect("fits");
    assert_eq!((capped.value, capped.epsilon), (1.5, 2.5));
    let got = calibrate_share(line, 5.0, 3.0).expect("fits");
    assert!(got.value <= 2.0 && 2.0 - got.value < 1e-12, "{got:?}");
    assert!(calibrate_share(line, 5.0, 0.5).is_err());
    assert!(calibrate_share(line, 0.0, 3.0).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]

    #[test]
    fn rdp_never_below_pld(q in 1e-3f64..0.1, sigma in 0.6f64..3.0, steps in 10u64..2000) {
        let mut pld = PldConfig::default().build().expect("valid");
        pld.compose(&DpEvent::dp_sgd(q, sigma, steps), 1).expect("valid");
        prop_assert!(pld.epsilon(1e-5).expect("valid") <= rdp_epsilon(q, sigma, steps));
    }
}

/// A ledger replays into a fresh accountant to the same ε, and a budget filter refuses
/// the step that would overrun without changing state.
#[test]
fn ledger_replay_and_budget_filter() -> dp_accounting::Result<()> {
    use dp_accounting::{Budget, BudgetFilter, Error, Ledger};
    let mut acc = RdpConfig::default().build()?;
    acc.compose(&DpEvent::dp_sgd(0.01, 1.0, 100), 1)?;
    acc.compose(&DpEvent::laplace(5.0), 2)?;
    let json = acc.ledger().to_json()?;
    let ledger = Ledger::from_json(&json)?;
    let mut replayed = RdpConfig::default().build()?;
    ledger.replay(&mut replayed)?;
    assert_eq!(replayed.epsilon(1e-5)?, acc.epsilon(1e-5)?);
    assert!(Ledger::from_json("{\"relation\":\"add_or_remove_one\",\"entries\":[{\"event\":{\"type\":\"gaussian\",\"noise_multiplier\":-1},\"count\":1}]}").is_err());

    let step = DpEvent::poisson_sampled(0.01, DpEvent::gaussian(1.0));
    let mut filter = BudgetFilter::new(RdpConfig::default().build()?, Budget::new(2.0, 1e-5)?);
    let mut accepted = 0;
    loop {
        match filter.try_compose(&step, 10) {
            Ok(_) => accepted += 1,
            Err(Error::BudgetExceeded { epsilon, .. }) => {
                assert!(epsilon > 2.0);
                break;
            }
            Err(e) => return Err(e),
        }
    }
    assert!(accepted > 0 && filter.spent()? <= 2.0);
    let spent = filter.spent()?;
    assert!(filter.try_compose(&step, 10).is_err());
    assert_eq!(filter.spent()?, spent, "a refused event leaves no trace");
    Ok(())
}

/// A reservation is a dry run: nothing is recorded until it is committed, a refused one
/// carries the ε it would have reached, and a stale one (made before another charge was
/// recorded) cannot overwrite that charge. A boxed accountant of any kind can be filtered.
#[test]
fn budget_reservations_charge_before_release() -> dp_accounting::Result<()> {
    use dp_accounting::{
        AccountantKind, Budget, BudgetFilter, Error, NeighbouringRelation, OrderGrid,
    };
    let boxed =
        AccountantKind::Pld.build(NeighbouringRelation::AddOrRemoveOne, &OrderGrid::Opacus)?;
    let mut filter = BudgetFilter::new(boxed, Budget::new(1.0, 1e-5)?);
    let step = DpEvent::poisson_sampled(0.01, DpEvent::gaussian(1.0));
    let first = filter.reserve(&step, 1)?;
    assert!(first.epsilon().is_some_and(|e| e > 0.0 && e <= 1.0));
    assert!(
        filter.accountant().ledger().entries.is_empty(),
        "reserve records nothing"
    );
    let second = filter.reserve(&step, 1)?;
    filter.commit(first)?;
    assert_eq!(filter.accountant().ledger().entries[0].count, 1);
    assert!(
        filter.commit(second).is_err(),
        "a stale reservation is refused"
    );
    assert_eq!(filter.accountant().ledger().entries[0].count, 1);
    match filter.reserve(&step, 100_000) {
        Err(Error::BudgetExceeded { epsilon, .. }) => assert!(epsilon > 1.0 && epsilon.is_finite()),
        other => panic!("expected BudgetExceeded, got {other:?}"),
    }
    let open = BudgetFilter::new(filter.accountant().clone(), Budget::unbounded(1e-5)?);
    let reservation = open.reserve(&step, 100_000)?;
    assert_eq!(
        reservation.epsilon(),
        None,
        "an unbounded budget computes no epsilon"
    );
    Ok(())
}

/// A ledger read back from its JSON holds the very f64s it was written with (a resumed
/// run's ε must not move in the last digit): many σ drawn across magnitudes, each with
/// a full 53-bit mantissa, round-trip bit for bit.
#[test]
fn ledger_json_round_trips_every_bit() -> dp_accounting::Result<()> {
    use dp_accounting::{Ledger, NeighbouringRelation};
    let mut ledger = Ledger::new(NeighbouringRelation::AddOrRemoveOne);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..5000 {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        let mantissa = (state >> 11) as f64 / (1u64 << 53) as f64;
        let sigma = (0.5 + mantissa) * 10f64.powi((state % 9) as i32 - 4);
        ledger.record(DpEvent::gaussian(sigma), 1 + state % 3);
    }
    let back = Ledger::from_json(&ledger.to_json()?)?;
    assert_eq!(back, ledger);
    Ok(())
}
