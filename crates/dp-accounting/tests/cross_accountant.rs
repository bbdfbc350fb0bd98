//! Independent checks: quadrature oracles, analytic Gaussian, and bounds between
//! accountants.

use dp_accounting::gdp::{delta_for_mu, epsilon_for_mu};
use dp_accounting::rdp::curves::poisson_gaussian;
use dp_accounting::{
    advanced_composition, amplify, sampled_advanced_composition, zcdp_to_epsilon, Accountant,
    Amplification, ApproxDpConfig, Conversion, DpEvent, FractionalSeries, GdpConfig, OrderGrid,
    PldConfig, RdpConfig, Result, ZcdpConfig, ZcdpConversion,
};

/// `A_α = E_{z∼N(0,σ²)}[(1 − q + q e^{(2z−1)/(2σ²)})^α]` by composite Simpson on
/// [−30σ, 30σ + α/σ²·σ²]: an oracle independent of the series.
fn log_a_by_quadrature(q: f64, sigma: f64, alpha: f64) -> f64 {
    let lo = -30.0 * sigma;
    let hi = 30.0 * sigma + alpha;
    let n = 400_000;
    let h = (hi - lo) / n as f64;
    let f = |z: f64| {
        let density =
            (-z * z / (2.0 * sigma * sigma)).exp() / (sigma * (2.0 * std::f64::consts::PI).sqrt());
        let ratio = 1.0 - q + q * ((2.0 * z - 1.0) / (2.0 * sigma * sigma)).exp();
        density * ratio.powf(alpha)
    };
    let mut sum = f(lo) + f(hi);
    for i in 1..n {
        let weight = if i % 2 == 1 { 4.0 } else { 2.0 };
        sum += weight * f(lo + i as f64 * h);
    }
    (sum * h / 3.0).ln()
}

#[test]
fn fractional_rdp_matches_quadrature() {
    for &(q, sigma) in &[(0.01, 1.0), (0.05, 0.8), (0.2, 2.0), (0.004, 1.1)] {
        for &alpha in &[1.3, 2.7, 4.5, 7.9] {
            let series = poisson_gaussian(q, sigma, alpha, FractionalSeries::Signed);
            let oracle = log_a_by_quadrature(q, sigma, alpha) / (alpha - 1.0);
            assert!(
                ((series - oracle) / oracle).abs() < 1e-7,
                "q={q} σ={sigma} α={alpha}: series {series:e} vs quadrature {oracle:e}"
            );
        }
    }
}

fn epsilons(event: &DpEvent, delta: f64) -> Result<(f64, f64)> {
    let mut rdp = RdpConfig::default().build()?;
    rdp.compose(event, 1)?;
    let mut pld = PldConfig::default().build()?;
    pld.compose(event, 1)?;
    Ok((rdp.epsilon(delta)?, pld.epsilon(delta)?))
}

/// PLD is the tight accountant: never above RDP for the same run.
#[test]
fn pld_never_above_rdp() -> Result<()> {
    for &(q, sigma, steps) in &[
        (0.004, 1.1, 2000),
        (0.02, 0.8, 500),
        (0.1, 2.0, 100),
        (0.001, 0.6, 5000),
    ] {
        let (rdp, pld) = epsilons(&DpEvent::dp_sgd(q, sigma, steps), 1e-5)?;
        assert!(
            pld <= rdp,
            "q={q} σ={sigma} T={steps}: pld {pld} > rdp {rdp}"
        );
    }
    Ok(())
}

/// Without sampling, the composed Gaussian is exactly μ-GDP with μ = √T/σ: its analytic
/// ε (Balle & Wang) lies below PLD (pessimistic, close) and RDP (loose).
#[test]
fn unsampled_gaussian_is_bracketed_by_analytic_value() -> Result<()> {
    for &(sigma, steps) in &[(3.0, 10u64), (10.0, 100), (1.0, 1)] {
        let event = DpEvent::self_composed(DpEvent::gaussian(sigma), steps);
        let exact = epsilon_for_mu(1e-5, (steps as f64).sqrt() / sigma);
        let (rdp, pld) = epsilons(&event, 1e-5)?;
        assert!(
            exact <= pld + 1e-9 && pld <= rdp,
            "σ={sigma} T={steps}: {exact} {pld} {rdp}"
        );
        assert!(pld - exact < 2e-3, "PLD is tight: {pld} vs {exact}");
        let mut gdp = GdpConfig::default().build()?;
        gdp.compose(&event, 1)?;
        assert_eq!(gdp.guarantee(), dp_accounting::Guarantee::UpperBound);
        assert!((gdp.epsilon(1e-5)? - exact).abs() < 1e-9);
    }
    Ok(())
}

/// The CLT is not a bound: with few steps it reports less than the (pessimistic, hence
/// valid) PLD value — here 1.62 against 2.85.
#[test]
fn clt_can_under_report() -> Result<()> {
    let event = DpEvent::dp_sgd(0.1, 1.0, 10);
    let mut gdp = GdpConfig::default().build()?;
    gdp.compose(&event, 1)?;
    let report = gdp.epsilon_report(1e-5)?;
    assert_eq!(report.guarantee, dp_accounting::Guarantee::Asymptotic);
    assert!(!report.warnings.is_empty());
    let (_, pld) = epsilons(&event, 1e-5)?;
    assert!(report.epsilon < pld, "CLT {} vs PLD {pld}", report.epsilon);
    Ok(())
}

/// zCDP of a Gaussian: tight conversion ≤ simple, and both above the exact value.
#[test]
fn zcdp_conversions_bracket_the_gaussian() -> Result<()> {
    let sigma = 5.0;
    let rho = 0.5 / (sigma * sigma) * 20.0;
    let exact = epsilon_for_mu(1e-6, 20f64.sqrt() / sigma);
    let tight = zcdp_to_epsilon(rho, 0.0, 1e-6, ZcdpConversion::Tight)?;
    let simple = zcdp_to_epsilon(rho, 0.0, 1e-6, ZcdpConversion::Simple)?;
    assert!(
        exact <= tight && tight <= simple,
        "{exact} {tight} {simple}"
    );
    // The tight conversion of ρ·α equals the improved RDP conversion over a fine grid.
    let orders: Vec<f64> = (1..20_000).map(|i| 1.0 + f64::from(i) * 0.01).collect();
    let mut rdp = RdpConfig {
        orders: OrderGrid::Custom(orders),
        ..RdpConfig::default()
    }
    .build()?;
    rdp.compose(&DpEvent::self_composed(DpEvent::gaussian(sigma), 20), 1)?;
    assert!((rdp.epsilon(1e-6)? - tight).abs() < 1e-4);
    let mut acc = ZcdpConfig::default().build()?;
    acc.compose(&DpEvent::gaussian(sigma), 20)?;
    assert!((acc.epsilon(1e-6)? - tight).abs() < 1e-12);
    assert!((acc.delta(tight)? - 1e-6).abs() < 1e-9);
    Ok(())
}

/// Dwork–Roth Thm 3.20 by hand, and the accountant's heterogeneous form reducing to it.
#[test]
fn advanced_composition_matches_theorem() -> Result<()> {
    let (eps, delta) = advanced_composition(0.1, 1e-7, 100, 1e-6)?;
    let by_hand = (2.0 * 100.0 * (1e6f64).ln()).sqrt() * 0.1 + 100.0 * 0.1 * 0.1f64.exp_m1();
    assert!((eps - by_hand).abs() < 1e-12);
    assert!((delta - (100.0 * 1e-7 + 1e-6)).abs() < 1e-18);
    let mut acc = ApproxDpConfig {
        theorem: dp_accounting::CompositionTheorem::Advanced,
        ..ApproxDpConfig::default()
    }
    .build()?;
    acc.compose(
        &DpEvent::EpsilonDelta {
            epsilon: 0.1,
            delta: 1e-7,
        },
        100,
    )?;
    assert!((acc.epsilon(100.0 * 1e-7 + 1e-6)? - by_hand).abs() < 1e-9);
    // Best-of picks basic composition when it is smaller.
    let mut best = ApproxDpConfig::default().build()?;
    best.compose(
        &DpEvent::EpsilonDelta {
            epsilon: 1.0,
            delta: 0.0,
        },
        2,
    )?;
    assert!((best.epsilon(1e-5)? - 2.0).abs() < 1e-12);
    Ok(())
}

/// Amplification bounds and their composition.
#[test]
fn amplification_and_its_composition() -> Result<()> {
    let (eps, delta) = amplify(1.0, 1e-6, 0.01, Amplification::Tight)?;
    assert!((eps - (0.01 * 1f64.exp_m1()).ln_1p()).abs() < 1e-15 && (delta - 1e-8).abs() < 1e-20);
    let (eps, _) = amplify(0.5, 0.0, 0.01, Amplification::Loose)?;
    assert!((eps - 0.01).abs() < 1e-15);
    assert!(
        amplify(2.0, 0.0, 0.01, Amplification::Loose).is_err(),
        "loose bound needs ε ≤ 1"
    );

    // Sampled advanced composition: δ_tot = Tνδ + δ′ exactly.
    let (steps, rate, delta_total) = (10_000u64, 0.01, 1e-5);
    let delta_prime = delta_total / 2.0;
    let delta_iter = (delta_total - delta_prime) / (steps as f64 * rate);
    let (eps, delta) = sampled_advanced_composition(
        0.5,
        delta_iter,
        steps,
        rate,
        delta_prime,
        Amplification::Loose,
    )?;
    assert!((delta - delta_total).abs() < 1e-18);
    let (step, _) = amplify(0.5, delta_iter, rate, Amplification::Loose)?;
    assert_eq!(
        (eps, delta),
        advanced_composition(step, rate * delta_iter, steps, delta_prime)?
    );
    Ok(())
}

/// The RDP accountant's classic conversion is never below the improved one.
#[test]
fn improved_conversion_is_tighter() -> Result<()> {
    let event = DpEvent::dp_sgd(0.01, 1.0, 1000);
    let mut classic = RdpConfig {
        conversion: Conversion::Classic,
        ..RdpConfig::default()
    }
    .build()?;
    classic.compose(&event, 1)?;
    let mut improved = RdpConfig::default().build()?;
    improved.compose(&event, 1)?;
    assert!(improved.epsilon(1e-5)? < classic.epsilon(1e-5)?);
    assert!(improved.delta(2.0)? < classic.delta(2.0)?);
    Ok(())
}

/// An analytic Gaussian sanity check on δ(ε; μ) in the far tail (log-space second term).
#[test]
fn gdp_delta_is_accurate_in_the_tail() {
    let d = delta_for_mu(30.0, 2.0);
    assert!(d > 0.0 && d < 1e-40, "{d}");
    assert_eq!(epsilon_for_mu(1e-5, 1e-12), 0.0, "tiny μ must not fail");
}

/// Poisson sampling of a mechanism that is not Gaussian-like takes Zhu & Wang's general
/// bound: for a Gaussian forced through it (composed with a negligible exponential
/// mechanism) it is never below the exact sampled-Gaussian RDP and stays within a small
/// factor (2×) of it; at q = 1 it is the unsampled composition; for a pure ε-DP mechanism it
/// never exceeds the amplified pure bound; sampled or δ > 0 inner events are refused.
#[test]
fn general_poisson_bound_is_an_upper_bound_and_close_for_the_gaussian() -> Result<()> {
    let orders = OrderGrid::Int2To64;
    let rdp = |event: &DpEvent| -> Result<dp_accounting::RdpAccountant> {
        let mut a = RdpConfig {
            orders: orders.clone(),
            ..RdpConfig::default()
        }
        .build()?;
        a.compose(event, 1)?;
        Ok(a)
    };
    for (q, sigma) in [(0.01, 1.0), (1e-4, 0.5), (0.05, 2.0)] {
        let exact = rdp(&DpEvent::poisson_sampled(q, DpEvent::gaussian(sigma)))?;
        let forced = rdp(&DpEvent::poisson_sampled(
            q,
            DpEvent::Composed {
                events: vec![
                    DpEvent::gaussian(sigma),
                    DpEvent::Exponential { epsilon: 1e-12 },
                ],
            },
        ))?;
        for (e, g) in exact.rdp().iter().zip(forced.rdp()) {
            assert!(
                *g >= *e * (1.0 - 1e-9),
                "q {q} σ {sigma}: general {g} < exact {e}"
            );
        }
        let (e, g) = (exact.epsilon(1e-5)?, forced.epsilon(1e-5)?);
        // The general bound pays for not knowing the mechanism: up to ~1.9× at σ = 0.5.
        assert!(
            g >= e && g <= 2.0 * e + 1e-3,
            "q {q} σ {sigma}: ε {g} vs exact {e}"
        );
    }
    // q = 1: no amplification, the inner curves themselves.
    let inner = DpEvent::Composed {
        events: vec![
            DpEvent::gaussian(2.0),
            DpEvent::Exponential { epsilon: 0.3 },
        ],
    };
    let (plain, sampled) = (rdp(&inner)?, rdp(&DpEvent::poisson_sampled(1.0, inner))?);
    assert_eq!(plain.rdp(), sampled.rdp());
    // Pure ε-DP: capped by ln(1 + q(e^ε − 1)) at every order.
    let (q, eps) = (0.02, 1.5);
    let pure = rdp(&DpEvent::poisson_sampled(
        q,
        DpEvent::SelfComposed {
            event: Box::new(DpEvent::Exponential { epsilon: 0.5 }),
            count: 3,
        },
    ))?;
    let cap = (q * f64::exp_m1(eps)).ln_1p();
    assert!(pure.rdp().iter().all(|&r| r <= cap + 1e-15 && r >= 0.0));
    // Refused: nested sampling, and δ > 0 inside (its δ would need its own amplification).
    for bad in [
        DpEvent::poisson_sampled(
            0.1,
            DpEvent::Composed {
                events: vec![
                    DpEvent::poisson_sampled(0.5, DpEvent::gaussian(1.0)),
                    DpEvent::Exponential { epsilon: 0.1 },
                ],
            },
        ),
        DpEvent::poisson_sampled(
            0.1,
            DpEvent::EpsilonDelta {
                epsilon: 0.5,
                delta: 1e-6,
            },
        ),
    ] {
        assert!(rdp(&bad).is_err());
    }
    Ok(())
}
