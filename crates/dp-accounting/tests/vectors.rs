//! The public test vectors of `docs/accounting.md`, "Test vectors" (tables A, B, C and
//! "The papers' numbers"), each pinned to its algorithm variant.

use dp_accounting::gdp::{self, epsilon_for_mu, mu_poisson, mu_uniform};
use dp_accounting::rdp::curves::{self, poisson_gaussian};
use dp_accounting::rdp::{delta_from_rdp, epsilon_from_rdp};
use dp_accounting::{
    calibrate_noise, Accountant, CalibrationOptions, Conversion, DpEvent, FractionalSeries,
    GdpConfig, OrderGrid, PldConfig, RdpConfig, Result,
};

use crate::support::*;

const SIGNED: FractionalSeries = FractionalSeries::Signed;

// ---- Table A ---------------------------------------------------------------------------

/// A1: opacus `tests/accountants_test.py:104` — σ=1.5, q=0.04, 2250 steps, δ=1e-5,
/// Opacus alphas, improved conversion.
#[test]
fn a1_opacus_rdp_epsilon() -> Result<()> {
    let mut acc = rdp(OrderGrid::Opacus, Conversion::Improved)?;
    acc.compose(&DpEvent::dp_sgd(0.04, 1.5, 2250), 1)?;
    let report = acc.epsilon_report(1e-5)?;
    assert_close(report.epsilon, 7.32911117143, PUBLISHED_DIGITS, "epsilon");
    assert_eq!(report.order, Some(3.9));
    Ok(())
}

/// A2: same run, Poisson CLT: μ = 1.41907, ε = 6.59982 (opacus test asserts 6.59 < ε < 6.6).
/// Opacus's GDP accountant counts `int(90 / 0.04)` steps, and 90/0.04 is
/// 2249.9999999999995 in floating point: 2249 steps.
#[test]
fn a2_opacus_gdp_epsilon() -> Result<()> {
    let mut acc = GdpConfig::default().build()?;
    acc.compose(&DpEvent::dp_sgd(0.04, 1.5, 2249), 1)?;
    assert_close(acc.mu(), 1.41907, 1e-5, "mu");
    let eps = acc.epsilon(1e-5)?;
    assert!(6.59 < eps && eps < 6.6, "{eps}");
    assert_close(eps, 6.59982, 1e-5, "epsilon");
    Ok(())
}

/// A4, A5: opacus `accountants_test.py:146,161` — calibrated σ for ε=8, δ=1e-5, q=0.04,
/// 90 epochs (2250 steps) and 2000 steps, with Opacus's search.
#[test]
fn a4_a5_opacus_calibration() -> Result<()> {
    let make = || rdp(OrderGrid::Opacus, Conversion::Improved);
    let epochs90 = calibrate_noise(
        make,
        |s| DpEvent::dp_sgd(0.04, s, 2250),
        8.0,
        1e-5,
        CalibrationOptions::opacus(),
    )?;
    assert_eq!(epochs90.value, 1.416015625);
    let steps2000 = calibrate_noise(
        make,
        |s| DpEvent::dp_sgd(0.04, s, 2000),
        8.0,
        1e-5,
        CalibrationOptions::opacus(),
    )?;
    assert_eq!(steps2000.value, 1.356201171875);
    assert!(epochs90.epsilon <= 8.0 && steps2000.epsilon <= 8.0);
    Ok(())
}

/// A7: opacus `accountants_test.py:234` — GDP calibration, 90 epochs: σ = 1.3232421875.
#[test]
fn a7_opacus_gdp_calibration() -> Result<()> {
    let got = calibrate_noise(
        || GdpConfig::default().build(),
        |s| DpEvent::dp_sgd(0.04, s, 2250),
        8.0,
        1e-5,
        CalibrationOptions::opacus(),
    )?;
    assert_eq!(got.value, 1.3232421875);
    Ok(())
}

/// A9: opacus `analysis/rdp.py:43` doc example — two heterogeneous runs, α = 2..32,
/// δ = 1e-5: (ε, α) = (0.336, 23); recomputed 0.33634 (improved conversion).
#[test]
fn a9_opacus_heterogeneous_doc_example() -> Result<()> {
    let orders = OrderGrid::Custom((2..=32).map(f64::from).collect());
    let mut acc = rdp(orders, Conversion::Improved)?;
    acc.compose(&DpEvent::dp_sgd(1e-5, 1.0, 10), 1)?;
    acc.compose(&DpEvent::dp_sgd(1e-4, 3.0, 4), 1)?;
    let report = acc.epsilon_report(1e-5)?;
    assert_close(report.epsilon, 0.33634, 1e-5, "epsilon");
    assert_eq!(report.order, Some(23.0));
    Ok(())
}

/// A10: opacus `scripts/compute_dp_sgd_privacy.py:37-40` — q=0.01, σ=1, 300 steps,
/// α ∈ {2,5,10,20,100}: improved 2.3933 (α=5), classic 3.019.
#[test]
fn a10_opacus_cli_doc_example() -> Result<()> {
    let orders = OrderGrid::Custom(vec![2.0, 5.0, 10.0, 20.0, 100.0]);
    let event = DpEvent::dp_sgd(0.01, 1.0, 300);
    let mut improved = rdp(orders.clone(), Conversion::Improved)?;
    improved.compose(&event, 1)?;
    let report = improved.epsilon_report(1e-5)?;
    assert_close(report.epsilon, 2.3933, FOUR_DIGITS, "improved");
    assert_eq!(report.order, Some(5.0));
    let mut classic = rdp(orders, Conversion::Classic)?;
    classic.compose(&event, 1)?;
    assert_close(classic.epsilon(1e-5)?, 3.019, 5e-4, "classic");
    Ok(())
}

/// A11–A13: TF Privacy `compute_dp_sgd_privacy_test.py:42-44` — legacy TF orders,
/// improved conversion (current TF delegates to dp_accounting's `RdpAccountant`).
#[test]
fn a11_a13_tf_compute_dp_sgd_privacy() -> Result<()> {
    let cases = [
        // (q, σ, steps, δ, ε, α)
        (150.0 / 60000.0, 1.3, 6000, 1e-5, 0.7242234026109595, 19.0),
        (100.0 / 100000.0, 1.0, 30000, 1e-7, 1.4154988495444842, 13.0),
        (1024.0 / 1e8, 0.1, 976563, 1e-7, 5907982.3113984, 1.25),
    ];
    for (q, sigma, steps, delta, want, order) in cases {
        let mut acc = rdp_abs(OrderGrid::TfLegacy, Conversion::Improved)?;
        acc.compose(&DpEvent::dp_sgd(q, sigma, steps), 1)?;
        let report = acc.epsilon_report(delta)?;
        assert_rel(report.epsilon, want, 1e-9, "tf epsilon");
        assert_eq!(report.order, Some(order));
    }
    Ok(())
}

/// A14, A15: TF `compute_dp_sgd_privacy_test.py:86-93` — example-level privacy,
/// 1.2 epochs at σ=0.7 (σ/2 with microbatching), δ=1e-5: full batch (2 Gaussian steps) and
/// q=0.01 (120 steps); RDP with dp_accounting's orders and conversion, and PLD.
#[test]
fn a14_a15_tf_example_level() -> Result<()> {
    let cases = [
        // (event, rdp ε, pld ε)
        (
            DpEvent::self_composed(DpEvent::gaussian(0.7), 2),
            10.8602036,
            10.1224946,
        ),
        (DpEvent::dp_sgd(0.01, 0.7, 120), 3.2392676, 2.4612381),
        (
            DpEvent::self_composed(DpEvent::gaussian(0.35), 2),
            26.2880374,
            24.7160779,
        ),
        (DpEvent::dp_sgd(0.01, 0.35, 120), 22.6248601, 18.6977407),
    ];
    for (event, want_rdp, want_pld) in cases {
        let mut acc = rdp_abs(OrderGrid::DpAccounting, Conversion::Improved)?;
        acc.compose(&event, 1)?;
        assert_close(acc.epsilon(1e-5)?, want_rdp, 1e-6, "rdp");
        let mut pld = PldConfig::default().build()?;
        pld.compose(&event, 1)?;
        assert_close(pld.epsilon(1e-5)?, want_pld, 2e-3, "pld");
    }
    Ok(())
}

/// A16: TF `compute_dp_sgd_privacy_test.py:199-200, 294-295` — privacy statement for
/// 10000 examples, batch 64, σ = 1.0 (2.0 with microbatching), 5 epochs, δ = 1e-6:
/// Poisson sampling over ⌈5·10000/64⌉ = 782 steps, RDP 1.616 / PLD 1.199; each example
/// once per epoch (5 unsampled Gaussians), RDP 13.376 / PLD 12.595.
#[test]
fn a16_tf_privacy_statement() -> Result<()> {
    let cases = [
        (DpEvent::dp_sgd(64.0 / 10000.0, 1.0, 782), 1.616, 1.199),
        (
            DpEvent::self_composed(DpEvent::gaussian(1.0), 5),
            13.376,
            12.595,
        ),
    ];
    for (event, want_rdp, want_pld) in cases {
        let mut acc = rdp_abs(OrderGrid::DpAccounting, Conversion::Improved)?;
        acc.compose(&event, 1)?;
        assert_close(acc.epsilon(1e-6)?, want_rdp, 5e-4, "rdp");
        let mut pld = PldConfig::default().build()?;
        pld.compose(&event, 1)?;
        assert_close(pld.epsilon(1e-6)?, want_pld, 5e-4, "pld");
    }
    Ok(())
}

/// A17: opacus issue #643 — σ=3, q=0.2, 50 steps, δ=1/48000: GDP 1.8385, RDP 2.1690.
#[test]
fn a17_gdp_below_rdp() -> Result<()> {
    let event = DpEvent::dp_sgd(0.2, 3.0, 50);
    let mut g = GdpConfig::default().build()?;
    g.compose(&event, 1)?;
    assert_close(g.epsilon(1.0 / 48000.0)?, 1.8385, FOUR_DIGITS, "gdp");
    let mut r = rdp(OrderGrid::Opacus, Conversion::Improved)?;
    r.compose(&event, 1)?;
    assert_close(r.epsilon(1.0 / 48000.0)?, 2.1690, FOUR_DIGITS, "rdp");
    Ok(())
}

/// A18: dp_accounting `rdp_privacy_accountant_test.py:508-535` — PoissonSampled(0.01,
/// Gaussian 2.5) × 50, dp_accounting's conservative (absolute) series, rtol 1e-4; plus
/// the exact signed value at α = 1.5 (table B).
#[test]
fn a18_dp_accounting_rdp_values() {
    let orders = [1.5, 2.5, 5.0, 50.0, 100.0];
    let want = [
        6.70579741e-4,
        1.08548710e-3,
        2.18075656e-3,
        2.38460375e-2,
        1.67416308e2,
    ];
    for (a, w) in orders.iter().zip(want) {
        let got = 50.0 * poisson_gaussian(0.01, 2.5, *a, FractionalSeries::Absolute);
        assert_rel(got, w, 1e-4, &format!("alpha {a}"));
    }
    assert_rel(
        50.0 * poisson_gaussian(0.01, 2.5, 1.5, SIGNED),
        6.50070897186739e-4,
        1e-9,
        "exact 1.5",
    );
    assert!(poisson_gaussian(0.01, 2.5, f64::INFINITY, SIGNED).is_infinite());
}

/// A19: dp_accounting test :720-735 — constant RDP 1.1 at α = 2..32, δ = 1e-5:
/// ε = 1.32783806176 at α = 32, and δ(ε) returns 1e-5.
#[test]
fn a19_constant_rdp_conversion() {
    let orders: Vec<f64> = (2..=32).map(f64::from).collect();
    let rdp = vec![1.1; orders.len()];
    let (eps, order) = epsilon_from_rdp(&orders, &rdp, 1e-5, Conversion::Improved);
    assert_close(eps, 1.32783806176, 1e-10, "epsilon");
    assert_eq!(order, 32.0);
    assert_rel(
        delta_from_rdp(&orders, &rdp, eps, Conversion::Improved),
        1e-5,
        1e-8,
        "delta",
    );
}

/// A20: dp_accounting test :737-749 — Gaussian σ = 4.530877117, orders 1.000..99.999 step
/// 0.001: exactly (ε = 1, δ = 1e-6) in both directions.
#[test]
fn a20_gaussian_fine_orders_round_trip() -> Result<()> {
    let orders: Vec<f64> = (1..99_000).map(|i| 1.0 + f64::from(i) * 0.001).collect();
    let mut acc = rdp(OrderGrid::Custom(orders), Conversion::Improved)?;
    acc.compose(&DpEvent::gaussian(4.530877117), 1)?;
    assert_close(acc.epsilon(1e-6)?, 1.0, 1e-6, "epsilon");
    assert_rel(acc.delta(1.0)?, 1e-6, 1e-5, "delta");
    Ok(())
}

/// A21: dp_accounting test :483-488 — ExponentialMechanism(ε = 1) at α = 1 and 1000.
#[test]
fn a21_exponential_mechanism_curve() {
    assert_close(
        curves::exponential_mechanism(1.0, 1.0),
        0.123301561,
        1e-9,
        "alpha 1",
    );
    assert_close(
        curves::exponential_mechanism(1.0, 1000.0),
        1.0,
        1e-12,
        "alpha 1000",
    );
}

/// A23: dp_accounting `pld_privacy_accountant_test.py:253-274` — Gaussian σ = √3 × 3
/// (μ = 1): δ(ε = 1) = 0.126936 (analytic 0.1269367).
#[test]
fn a23_pld_gaussian_composition() -> Result<()> {
    let mut pld = PldConfig::default().build()?;
    pld.compose(&DpEvent::gaussian(3f64.sqrt()), 3)?;
    let delta = pld.delta(1.0)?;
    assert_close(delta, 0.126936, 1e-5, "delta");
    assert!(delta >= gdp::delta_for_mu(1.0, 1.0), "pessimistic");
    Ok(())
}

/// A24: same file :276-301 — PoissonSampled(0.2, Gaussian 0.5) × 3: δ(ε = 1) = 0.15594.
#[test]
fn a24_pld_subsampled_gaussian() -> Result<()> {
    let mut pld = PldConfig::default().build()?;
    pld.compose(&DpEvent::poisson_sampled(0.2, DpEvent::gaussian(0.5)), 3)?;
    assert_close(pld.delta(1.0)?, 0.15594, 1e-3, "delta");
    Ok(())
}

/// A25: same file :303-330 — Laplace b=1 × 3 then b=2 × 2 is 4-DP (δ(4) ≈ 0); and
/// PoissonSampled(0.2, Laplace 0.5) × 3 is 3·ln(1 + 0.2(e² − 1)) = 2.46964-DP.
#[test]
fn a25_pld_laplace() -> Result<()> {
    let mut pld = PldConfig::default().build()?;
    pld.compose(&DpEvent::laplace(1.0), 3)?;
    pld.compose(&DpEvent::laplace(2.0), 2)?;
    assert!(pld.delta(4.0)? < 1e-12);
    assert!(
        pld.delta(3.9)? > 1e-4,
        "the bound is tight, not trivially zero"
    );
    let mut sampled = PldConfig::default().build()?;
    sampled.compose(&DpEvent::poisson_sampled(0.2, DpEvent::laplace(0.5)), 3)?;
    let eps = sampled.epsilon(1e-12)?;
    assert!((2.46964 - 1e-5..=2.46964 + 1e-3).contains(&eps), "{eps}");
    Ok(())
}

/// A26, A27: autodp `test/unit_test_dp_sgd_poisson_sampling_add_remove.py` — per-step
/// RDP of the sampled Gaussian (q = 0.01) against TF's signed series.
#[test]
fn a26_a27_autodp_table() {
    let cases = [
        (0.1, 1.25, 39.47435359280898),
        (0.1, 2.0, 90.7896596280238),
        (0.1, 4.5, 219.07906690372957),
        (0.1, 128.0, 6395.3585686314445),
        (0.25, 1.25, 0.1103603174246269),
    ];
    for (sigma, alpha, want) in cases {
        assert_rel(
            poisson_gaussian(0.01, sigma, alpha, SIGNED),
            want,
            1e-9,
            &format!("σ={sigma} α={alpha}"),
        );
    }
    assert_rel(
        poisson_gaussian(0.01, 0.25, 1.25, FractionalSeries::Absolute),
        0.110573,
        1e-5,
        "abs series",
    );
}

// ---- Table B: exact quadrature of A_α (mpmath, 30–40 digits) ------------------------------

#[test]
fn b_signed_series_equals_quadrature() {
    let cases = [
        (0.01, 1.0, 1.5, 1.2725374332742382e-4),
        (0.01, 1.0, 2.0, 1.7181342207453059e-4),
        (0.01, 1.0, 32.0, 11.246275937048069),
        (0.04, 1.5, 3.9, 1.8332021995838121e-3),
        (0.004, 1.1, 8.4, 9.0761384861160652e-5),
        (0.2, 3.0, 8.4, 2.2535508963739546e-2),
        (0.01, 2.5, 1.5, 1.300141794373e-5),
        (0.01, 0.25, 1.25, 0.11036031742426847),
    ];
    for (q, sigma, alpha, want) in cases {
        let got = poisson_gaussian(q, sigma, alpha, SIGNED);
        // The series stops once its terms fall below e^-30 (as Opacus and TF do), which
        // bounds the relative error by ~2e-9 when A_α − 1 is ~1e-4.
        assert_rel(got, want, 1e-8, &format!("q={q} σ={sigma} α={alpha}"));
        let conservative = poisson_gaussian(q, sigma, alpha, FractionalSeries::Absolute);
        assert!(
            conservative >= got * (1.0 - 1e-12),
            "absolute series is an upper bound"
        );
    }
}

// ---- Table C: tutorial tables -----------------------------------------------------------

/// TF Privacy MNIST tutorial (`tutorials/README.md:96-128`): N = 60000, batch 256,
/// δ = 1e-5, 14063 steps at 60 epochs; classic conversion with TF's legacy orders.
#[test]
fn c_tf_tutorial_table() -> Result<()> {
    let q = 256.0 / 60000.0;
    let cases = [(1.1, 14063, 3.0092), (1.3, 3516, 1.1923)];
    for (sigma, steps, want) in cases {
        let mut acc = rdp(OrderGrid::TfLegacy, Conversion::Classic)?;
        acc.compose(&DpEvent::dp_sgd(q, sigma, steps), 1)?;
        assert_close(acc.epsilon(1e-5)?, want, FOUR_DIGITS, "classic");
    }
    let mut improved = rdp(OrderGrid::TfLegacy, Conversion::Improved)?;
    improved.compose(&DpEvent::dp_sgd(q, 1.1, 14063), 1)?;
    assert_close(
        improved.epsilon(1e-5)?,
        2.5971,
        FOUR_DIGITS,
        "improved tf orders",
    );
    let mut dpa = rdp(OrderGrid::DpAccounting, Conversion::Improved)?;
    dpa.compose(&DpEvent::dp_sgd(q, 1.1, 14063), 1)?;
    assert_close(
        dpa.epsilon(1e-5)?,
        2.5967,
        FOUR_DIGITS,
        "improved dp_accounting orders",
    );
    Ok(())
}

/// Opacus MNIST README (`examples/mnist_README.md:46-60`): q = 0.004, 60/15/45 epochs,
/// classic conversion with Opacus's orders.
#[test]
fn c_opacus_mnist_table() -> Result<()> {
    let cases = [
        (1.1, 15000, 2.9050, 2.5029),
        (1.3, 3750, 1.1597, 0.9220),
        (0.7, 11250, 6.8589, 6.0925),
    ];
    for (sigma, steps, classic, improved) in cases {
        let event = DpEvent::dp_sgd(0.004, sigma, steps);
        let mut c = rdp(OrderGrid::Opacus, Conversion::Classic)?;
        c.compose(&event, 1)?;
        assert_close(c.epsilon(1e-5)?, classic, FOUR_DIGITS, "classic");
        let mut i = rdp(OrderGrid::Opacus, Conversion::Improved)?;
        i.compose(&event, 1)?;
        assert_close(i.epsilon(1e-5)?, improved, FOUR_DIGITS, "improved");
    }
    Ok(())
}

// ---- the papers' numbers: the GDP paper and Tramèr–Boneh -------------------------------------

/// Moments-accountant ε of the GDP repository (`compute_epsilon`): T = epochs·n/B steps
/// (not an integer), the GDP-repo order grid, classic conversion.
fn gdp_repo_moments_epsilon(sigma: f64, epochs: f64) -> f64 {
    let q = 256.0 / 60000.0;
    let steps = epochs * 60000.0 / 256.0;
    // The GDP repository's grid: 1 + x/10 (x = 1..=99), 12 + 0.2k below 60, 60..=99.
    let orders: Vec<f64> = (1..=99)
        .map(|x| 1.0 + f64::from(x) / 10.0)
        .chain((0..240).map(|k| 12.0 + 0.2 * f64::from(k)))
        .chain((60..=99).map(f64::from))
        .collect();
    let rdp: Vec<f64> = orders
        .iter()
        .map(|&a| steps * poisson_gaussian(q, sigma, a, SIGNED))
        .collect();
    epsilon_from_rdp(&orders, &rdp, 1e-5, Conversion::Classic).0
}

#[test]
fn gdp_paper_values() -> Result<()> {
    let q = 256.0 / 60000.0;
    let steps = 15.0 * 60000.0 / 256.0;
    assert_close(
        gdp_repo_moments_epsilon(1.3, 15.0),
        1.1912,
        FOUR_DIGITS,
        "MA",
    );
    let mu = mu_poisson(q, 1.3, steps);
    assert_close(mu, 0.2273, FOUR_DIGITS, "mu");
    assert_close(epsilon_for_mu(1e-5, mu), 0.8345, FOUR_DIGITS, "CLT poisson");
    assert_close(
        epsilon_for_mu(1e-5, mu_uniform(q, 1.3, steps)),
        1.0685,
        FOUR_DIGITS,
        "CLT uniform",
    );
    // Figure 4: σ̃ matching ε_MA.
    let ma20 = gdp_repo_moments_epsilon(1.3, 20.0);
    assert_close(ma20, 1.3498, FOUR_DIGITS, "MA 20 epochs");
    let sigma_tilde = gdp::recalibrate_sigma(ma20, 1e-5, q, 20.0 * 60000.0 / 256.0)?;
    assert_close(sigma_tilde, 1.0560, FOUR_DIGITS, "sigma tilde 20 epochs");
    let ma70 = gdp_repo_moments_epsilon(0.7, 70.0);
    assert_close(ma70, 8.6758, FOUR_DIGITS, "MA 70 epochs");
    let sigma_tilde = gdp::recalibrate_sigma(ma70, 1e-5, q, 70.0 * 60000.0 / 256.0)?;
    assert_close(sigma_tilde, 0.6385, FOUR_DIGITS, "sigma tilde 70 epochs");
    Ok(())
}

/// Tramèr–Boneh settings (ftramer/Handcrafted-DP README), as SA-DPSGD accounts them:
/// α ∈ {2..64}, classic conversion; and the tight (improved) conversion beside them.
#[test]
fn tramer_boneh_settings() -> Result<()> {
    let cases = [
        (512.0 / 60000.0, 1.23, 4680, 2.994, 2.579),
        (2048.0 / 60000.0, 2.15, 1160, 3.003, 2.591),
        (1024.0 / 50000.0, 1.54, 1440, 3.005, 2.585),
    ];
    for (q, sigma, steps, classic, improved) in cases {
        let event = DpEvent::dp_sgd(q, sigma, steps);
        let mut c = rdp(OrderGrid::Int2To64, Conversion::Classic)?;
        c.compose(&event, 1)?;
        assert_close(c.epsilon(1e-5)?, classic, 5e-4, "classic");
        let mut i = rdp(OrderGrid::Int2To64, Conversion::Improved)?;
        i.compose(&event, 1)?;
        assert_close(i.epsilon(1e-5)?, improved, 5e-4, "improved");
    }
    Ok(())
}

/// The default config is what the crate docs say.
#[test]
fn default_rdp_config_is_opacus_improved_signed() {
    let config = RdpConfig::default();
    assert_eq!(config.orders, OrderGrid::Opacus);
    assert_eq!(config.conversion, Conversion::Improved);
    assert_eq!(config.series, SIGNED);
}

/// The audit's hostile calibrations: one Poisson step at q = 0.00068 with δ = 0.00784 > q
/// is (0, q)-DP whatever σ, and ε 1e300 holds at any σ: the search once bisected
/// towards σ = 0 on an ever larger PLD grid (past 120 s). Now a calibration error that
/// says the target does not constrain the noise, after a bounded search.
#[test]
fn a_target_that_every_sigma_meets_is_a_calibration_error() {
    let pld = || {
        dp_accounting::AccountantKind::Pld.build(
            dp_accounting::NeighbouringRelation::AddOrRemoveOne,
            &dp_accounting::OrderGrid::Opacus,
        )
    };
    for (epsilon, delta, q) in [(1.6657, 0.00784, 0.00068), (1e300, 1e-5, 0.01)] {
        for options in [CalibrationOptions::default(), CalibrationOptions::opacus()] {
            let solved =
                calibrate_noise(pld, |s| DpEvent::dp_sgd(q, s, 1), epsilon, delta, options);
            match solved {
                Err(dp_accounting::Error::Calibration(reason)) => {
                    assert!(reason.contains("does not constrain"), "{reason}")
                }
                // Opacus's search stops once ε is within 0.01 below the target at
                // σ = 10; any σ it returns must meet the target.
                Ok(c) => assert!(c.epsilon <= epsilon && c.value >= 0.05, "{c:?}"),
                Err(other) => panic!("{other}"),
            }
        }
    }
}
