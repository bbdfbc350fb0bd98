//! The one-run audit bound (Steinke, Nasr & Jagielski 2023, Thm 3.1) against an
//! independent direct computation: exact binomial pmfs in plain f64 (small r), the
//! theorem's maximum over every i = 1..=m (not only 1..=v), and a closed form.

use dp_accounting::{one_run_epsilon_lower_bound, one_run_p_value, AuditOutcome, Error, Result};

fn outcome(canaries: u64, guesses: u64, correct: u64) -> AuditOutcome {
    AuditOutcome {
        canaries,
        guesses,
        correct,
    }
}

/// C(r, k) q^k (1 − q)^{r−k} by the multiplicative formula, in plain f64 (r ≤ ~300).
fn pmf(r: u64, k: u64, q: f64) -> f64 {
    let mut c = 1.0;
    for j in 0..k {
        c *= (r - j) as f64 / (j + 1) as f64;
    }
    c * q.powi(k as i32) * (1.0 - q).powi((r - k) as i32)
}

/// f(v) = P[Binomial(r, q) ≥ v], v may be ≤ 0.
fn tail(r: u64, v: i64, q: f64) -> f64 {
    (v.max(0) as u64..=r).map(|k| pmf(r, k, q)).sum()
}

/// The theorem's right-hand side, the maximum over i = 1..=m, directly.
fn direct_p_value(o: &AuditOutcome, epsilon: f64, delta: f64) -> f64 {
    let q = epsilon.exp() / (1.0 + epsilon.exp());
    let v = o.correct as i64;
    let f_v = tail(o.guesses, v, q);
    let worst = (1..=o.canaries as i64)
        .map(|i| (tail(o.guesses, v - i, q) - f_v) / i as f64)
        .fold(0.0f64, f64::max);
    (f_v + 2.0 * o.canaries as f64 * delta * worst).min(1.0)
}

#[test]
fn all_correct_pure_bound_is_the_closed_form() -> Result<()> {
    // δ = 0, v = r: P[W ≥ r] = q^r ≤ 1 − β ⇔ ε ≤ logit((1 − β)^{1/r}).
    for (r, beta) in [(10u64, 0.95), (100, 0.95), (1000, 0.99), (50, 0.5)] {
        let q = (1.0f64 - beta).powf(1.0 / r as f64);
        let want = (q / (1.0 - q)).ln();
        let got = one_run_epsilon_lower_bound(&outcome(2 * r, r, r), 0.0, beta)?;
        assert!((got - want).abs() < 1e-9 * want, "r={r}: {got} vs {want}");
    }
    // r = 100 at 95%: the best any audit with 100 guesses can show is ε ≈ 3.493.
    let best = one_run_epsilon_lower_bound(&outcome(1000, 100, 100), 0.0, 0.95)?;
    assert!((best - 3.4930).abs() < 1e-4, "{best}");
    Ok(())
}

#[test]
fn pure_bound_sits_on_the_direct_binomial_tail() -> Result<()> {
    for (r, v, beta) in [(60u64, 45u64, 0.95), (100, 70, 0.99), (25, 20, 0.9)] {
        let o = outcome(200, r, v);
        let eps = one_run_epsilon_lower_bound(&o, 0.0, beta)?;
        assert!(eps > 0.0);
        let q = |e: f64| e.exp() / (1.0 + e.exp());
        let at = tail(r, v as i64, q(eps));
        let above = tail(r, v as i64, q(eps + 1e-7));
        assert!(at <= 1.0 - beta && above >= 1.0 - beta, "{at} {above}");
        // The crate's log-space p-value agrees with the direct one.
        let p = one_run_p_value(&o, eps, 0.0)?;
        assert!((p - at).abs() < 1e-12, "{p} vs {at}");
    }
    Ok(())
}

#[test]
fn approximate_dp_bound_sits_on_the_direct_theorem() -> Result<()> {
    for (m, r, v, delta) in [
        (1000u64, 100u64, 90u64, 1e-5),
        (200, 60, 45, 1e-3),
        (50, 50, 40, 1e-4),
    ] {
        let o = outcome(m, r, v);
        let eps = one_run_epsilon_lower_bound(&o, delta, 0.95)?;
        let pure = one_run_epsilon_lower_bound(&o, 0.0, 0.95)?;
        assert!(eps > 0.0 && eps < pure, "{eps} vs pure {pure}");
        let (at, above) = (
            direct_p_value(&o, eps, delta),
            direct_p_value(&o, eps + 1e-7, delta),
        );
        assert!(at <= 0.05 && above >= 0.05, "{at} {above}");
        for e in [0.1, 0.5, 1.0, 2.0, eps] {
            let (got, want) = (one_run_p_value(&o, e, delta)?, direct_p_value(&o, e, delta));
            assert!(
                (got - want).abs() <= 1e-10 * want,
                "eps={e}: {got} vs {want}"
            );
        }
    }
    Ok(())
}

#[test]
fn bound_moves_the_right_way() -> Result<()> {
    // More correct guesses: larger bound.
    let mut last = 0.0;
    for v in 60..=100 {
        let eps = one_run_epsilon_lower_bound(&outcome(1000, 100, v), 1e-5, 0.95)?;
        assert!(eps > last, "v={v}: {eps} <= {last}");
        last = eps;
    }
    let o = outcome(1000, 100, 80);
    // More confidence: smaller bound.
    let mut last = f64::INFINITY;
    for beta in [0.5, 0.8, 0.9, 0.95, 0.99, 0.999] {
        let eps = one_run_epsilon_lower_bound(&o, 1e-5, beta)?;
        assert!(eps < last, "beta={beta}: {eps} >= {last}");
        last = eps;
    }
    // More δ, or more canaries at the same δ: smaller bound; δ = 0 ignores m.
    let d = |delta: f64, m: u64| one_run_epsilon_lower_bound(&outcome(m, 100, 80), delta, 0.95);
    assert!(d(1e-6, 1000)? > d(1e-4, 1000)? && d(1e-4, 1000)? > d(1e-3, 1000)?);
    assert!(d(1e-4, 100)? > d(1e-4, 10_000)?);
    assert_eq!(d(0.0, 100)?, d(0.0, 10_000)?);
    Ok(())
}

#[test]
fn chance_level_gives_zero() -> Result<()> {
    for (r, v) in [(100u64, 50u64), (101, 50), (100, 30), (10, 0), (0, 0)] {
        let eps = one_run_epsilon_lower_bound(&outcome(1000, r, v), 1e-5, 0.95)?;
        assert_eq!(eps, 0.0, "r={r} v={v}");
    }
    // A δ this large (2mδ = 20) leaves nothing to refuse, where 2mδ = 2 still refuses
    // ε ≈ 0.594 (an independent Python computation with exact binomial coefficients).
    assert_eq!(
        one_run_epsilon_lower_bound(&outcome(1000, 100, 95), 1e-2, 0.95)?,
        0.0
    );
    let two = one_run_epsilon_lower_bound(&outcome(1000, 100, 95), 1e-3, 0.95)?;
    assert!((two - 0.594_313_6).abs() < 1e-6, "{two}");
    Ok(())
}

#[test]
fn many_guesses_stay_finite() -> Result<()> {
    // r = 10^5 at 60% correct: the normal approximation puts the bound near
    // logit(0.6 − 1.645·√(0.24/r)) ≈ 0.394; far tails must not under/overflow.
    let eps = one_run_epsilon_lower_bound(&outcome(100_000, 100_000, 60_000), 1e-6, 0.95)?;
    let p = 0.6 - 1.645 * (0.24f64 / 1e5).sqrt();
    let approx = (p / (1.0 - p)).ln();
    assert!((eps - approx).abs() < 5e-3, "{eps} vs {approx}");
    let all = one_run_epsilon_lower_bound(&outcome(100_000, 100_000, 100_000), 0.0, 0.95)?;
    assert!(all.is_finite() && all > 10.0, "{all}");
    Ok(())
}

#[test]
fn bad_inputs_are_typed_errors() {
    let bad = |o: AuditOutcome, delta: f64, beta: f64, name: &str| {
        let err = one_run_epsilon_lower_bound(&o, delta, beta);
        assert!(
            matches!(&err, Err(Error::InvalidParameter { name: n, .. }) if *n == name),
            "{o:?} {delta} {beta}: {err:?}"
        );
    };
    bad(outcome(10, 5, 6), 0.0, 0.95, "correct");
    bad(outcome(10, 11, 6), 0.0, 0.95, "guesses");
    bad(outcome(10, 5, 3), 1.0, 0.95, "delta");
    bad(outcome(10, 5, 3), -1e-9, 0.95, "delta");
    bad(outcome(10, 5, 3), f64::NAN, 0.95, "delta");
    bad(outcome(10, 5, 3), 0.0, 0.0, "confidence");
    bad(outcome(10, 5, 3), 0.0, 1.0, "confidence");
    bad(outcome(10, 5, 3), 0.0, f64::NAN, "confidence");
    assert!(matches!(
        one_run_p_value(&outcome(10, 5, 3), -1.0, 0.0),
        Err(Error::InvalidParameter {
            name: "epsilon",
            ..
        })
    ));
}
