//! The f-DP one-run audit (Mahloujifar, Melis & Chaudhuri 2024) against PrivacyGuard's
//! published tutorial outputs and an independent Python implementation
//! (`xtask/scripts/fdp_audit_reference.py`); a simulated μ-GDP mechanism is not audited
//! above its μ, and a broken one is caught.

use dp_accounting::gdp::epsilon_for_mu;
use dp_accounting::{
    fdp_one_run_epsilon_lower_bound, fdp_one_run_gaussian_epsilon, fdp_one_run_mu_lower_bound,
    fdp_one_run_refuses, AuditOutcome, Error, Result, Tradeoff,
};

fn outcome(canaries: u64, guesses: u64, correct: u64) -> AuditOutcome {
    AuditOutcome {
        canaries,
        guesses,
        correct,
    }
}

/// `python3 xtask/scripts/fdp_audit_reference.py`: (m, c′, c, μ̂, ε(μ̂) at δ = 1e-5,
/// ε̂ of (ε, 1e-5)-DP), 95% confidence.
const REFERENCE: [(u64, u64, u64, f64, f64, f64); 13] = [
    (100, 80, 70, 0.704804, 2.9324, 1.3525),
    (1000, 10, 10, 0.322963, 1.2276, 1.0445),
    (1000, 50, 50, 0.937344, 4.0619, 2.7834),
    (1000, 100, 100, 1.225533, 5.5490, 3.4923),
    (1000, 200, 190, 0.908054, 3.9161, 2.3824),
    (1000, 500, 400, 0.518753, 2.0768, 1.1899),
    (1000, 1000, 600, 0.163850, 0.5835, 0.2918),
    (1000, 1000, 750, 0.460625, 1.8189, 0.9705),
    (1000, 800, 500, 0.201048, 0.7297, 0.3821),
    (2000, 1500, 1000, 0.280488, 1.0511, 0.5970),
    (2000, 252, 249, 1.202161, 5.4249, 3.4443),
    (10000, 1000, 1000, 1.833669, 8.9877, 5.8084),
    (10000, 10000, 6000, 0.172949, 0.6190, 0.3697),
];

#[test]
fn agrees_with_the_independent_implementation() -> Result<()> {
    for (m, guesses, correct, mu, eps_mu, eps) in REFERENCE {
        let o = outcome(m, guesses, correct);
        let got = fdp_one_run_mu_lower_bound(&o, 0.95)?;
        assert!((got - mu).abs() <= 2e-6, "{o:?}: μ̂ {got} vs {mu}");
        let got = fdp_one_run_gaussian_epsilon(&o, 1e-5, 0.95)?;
        assert!(
            (got - eps_mu).abs() <= 1e-4,
            "{o:?}: ε(μ̂) {got} vs {eps_mu}"
        );
        let got = fdp_one_run_epsilon_lower_bound(&o, 1e-5, 0.95)?;
        assert!((got - eps).abs() <= 1e-4, "{o:?}: ε̂ {got} vs {eps}");
    }
    Ok(())
}

/// PrivacyGuard's tutorial (`tutorial_notebooks/fdp_analysis_tutorial.ipynb`) scans noise
/// σ = start + 0.01·i upward and prints the first σ whose μ = 1/σ is refused, so the
/// exact μ̂ lies in [1/σ, 1/(σ − 0.01)); and ε = 3.2906 at δ = 1e-6 for σ = 1.421.
#[test]
fn agrees_with_privacyguards_tutorial() -> Result<()> {
    for (m, guesses, correct, sigma) in [
        (100, 80, 70, 1.421),
        (2000, 252, 249, 0.841),
        (1000, 10, 10, 3.10),
    ] {
        let mu = fdp_one_run_mu_lower_bound(&outcome(m, guesses, correct), 0.95)?;
        assert!(
            1.0 / sigma <= mu && mu < 1.0 / (sigma - 0.01),
            "({m}, {guesses}, {correct}): μ̂ {mu} outside the tutorial's grid cell at σ {sigma}"
        );
    }
    // The tutorial's grid started at σ = 1 and refused it at once (μ̂ ≥ 1).
    assert!(fdp_one_run_mu_lower_bound(&outcome(1000, 65, 65), 0.95)? >= 1.0);
    let eps = epsilon_for_mu(1e-6, 1.0 / 1.421);
    assert!((eps - 3.2906).abs() < 1e-3, "{eps}");
    Ok(())
}

/// A small deterministic generator for the simulations (SplitMix64, Box–Muller).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

/// One game: m canaries each in with probability ½; a canary's score is `shift·[in] +
/// N(0, 1)` (so the release is `shift`-GDP with respect to each canary); the auditor
/// guesses in for the `n` highest scores and out for the `n` lowest.
fn play(rng: &mut Rng, m: usize, n: usize, shift: f64) -> AuditOutcome {
    let mut scored: Vec<(f64, bool)> = (0..m)
        .map(|_| {
            let included = rng.uniform() < 0.5;
            (
                shift * f64::from(u8::from(included)) + rng.normal(),
                included,
            )
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    let top = scored[..n].iter().filter(|s| s.1).count();
    let bottom = scored[m - n..].iter().filter(|s| !s.1).count();
    outcome(m as u64, 2 * n as u64, (top + bottom) as u64)
}

/// At 95% confidence a μ-GDP mechanism is audited above μ in at most 5% of games (here
/// at most 4 of 40, 2 expected); a mechanism four times noisier than its claim is
/// caught in every game.
#[test]
fn a_correct_mechanism_passes_and_a_broken_one_is_caught() -> Result<()> {
    let mut rng = Rng(7);
    let mut above = 0;
    for _ in 0..40 {
        let o = play(&mut rng, 1000, 100, 1.0);
        if fdp_one_run_mu_lower_bound(&o, 0.95)? > 1.0 {
            above += 1;
        }
    }
    assert!(
        above <= 4,
        "a 1-GDP mechanism was audited above μ = 1 in {above} of 40"
    );
    for _ in 0..10 {
        let o = play(&mut rng, 1000, 50, 4.0);
        let claim = Tradeoff::Gaussian { mu: 1.0 };
        assert!(fdp_one_run_refuses(&o, claim, 0.95)?, "{o:?} not caught");
        assert!(fdp_one_run_mu_lower_bound(&o, 0.95)? > 1.0);
    }
    Ok(())
}

/// More correct guesses refuse more; chance-level guessing and no guesses refuse nothing.
#[test]
fn the_bound_moves_the_right_way() -> Result<()> {
    let mut last = 0.0;
    for correct in [60, 70, 80, 90, 100] {
        let mu = fdp_one_run_mu_lower_bound(&outcome(1000, 100, correct), 0.95)?;
        assert!(mu > last, "μ̂ {mu} at {correct} correct");
        last = mu;
    }
    assert_eq!(
        fdp_one_run_mu_lower_bound(&outcome(1000, 100, 50), 0.95)?,
        0.0
    );
    assert_eq!(fdp_one_run_mu_lower_bound(&outcome(1000, 0, 0), 0.95)?, 0.0);
    assert_eq!(
        fdp_one_run_epsilon_lower_bound(&outcome(10, 0, 0), 1e-5, 0.9)?,
        0.0
    );
    Ok(())
}

#[test]
fn bad_inputs_are_typed_errors() {
    let o = outcome(100, 10, 5);
    let named = |r: Result<f64>| match r {
        Err(Error::InvalidParameter { name, .. }) => name,
        other => panic!("expected InvalidParameter, got {other:?}"),
    };
    assert_eq!(named(fdp_one_run_mu_lower_bound(&o, 1.0)), "confidence");
    assert_eq!(
        named(fdp_one_run_mu_lower_bound(&outcome(5, 10, 5), 0.9)),
        "guesses"
    );
    assert_eq!(
        named(fdp_one_run_epsilon_lower_bound(&o, 1.0, 0.9)),
        "delta"
    );
    assert_eq!(
        named(fdp_one_run_gaussian_epsilon(&o, f64::NAN, 0.9)),
        "delta"
    );
    let refused = fdp_one_run_refuses(&o, Tradeoff::Gaussian { mu: f64::NAN }, 0.9);
    assert!(matches!(
        refused,
        Err(Error::InvalidParameter { name: "mu", .. })
    ));
}
