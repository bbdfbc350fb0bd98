//! Empirical privacy audits: run each mechanism on two neighbouring inputs
//! many times and check that no set of outputs is more likely under one than e^ε times
//! its probability under the other, beyond sampling error. Each audit also shows it has
//! power: the privacy loss it observes is close to the claimed ε (or a smaller ε fails).

use dp_accounting::gdp::delta_for_mu;
use dp_accounting::{Accountant, ZcdpConfig};
use dp_mechanisms::hardened::{GridGaussian, GridLaplace};
use dp_mechanisms::{
    BudgetSplit, ExponentialMechanism, GaussianMechanism, LaplaceMechanism, Mechanism, NoiseSource,
    NoisyMaxNoise, ReportNoisyMax, SparseVariant, SparseVector, TopK, TopKMethod,
};

const RUNS: usize = 400_000;
/// Per-bin z-score; with ~100 bins this keeps the family-wise false alarm rate ~1e-6.
const Z: f64 = 6.0;
/// Bins with fewer counts are ignored for the log-ratio check (too noisy).
const MIN_COUNT: u64 = 2000;

fn histogram(bins: usize, mut sample: impl FnMut() -> usize) -> Vec<u64> {
    let mut counts = vec![0u64; bins];
    for _ in 0..RUNS {
        counts[sample().min(bins - 1)] += 1;
    }
    counts
}

/// The largest lower confidence bound on |ln(p/q)| over well-populated bins, and the
/// largest point estimate (to show power).
fn observed_privacy_loss(p: &[u64], q: &[u64]) -> (f64, f64) {
    let (mut bound, mut point) = (0.0f64, 0.0f64);
    for (&a, &b) in p.iter().zip(q) {
        if a < MIN_COUNT || b < MIN_COUNT {
            continue;
        }
        let ratio = (a as f64 / b as f64).ln().abs();
        let se = (1.0 / a as f64 + 1.0 / b as f64).sqrt();
        bound = bound.max(ratio - Z * se);
        point = point.max(ratio);
    }
    (bound, point)
}

/// The hockey-stick divergence of the two empirical histograms at ε.
fn empirical_delta(p: &[u64], q: &[u64], epsilon: f64) -> f64 {
    let n = RUNS as f64;
    let forward: f64 = p
        .iter()
        .zip(q)
        .map(|(&a, &b)| (a as f64 / n - epsilon.exp() * b as f64 / n).max(0.0))
        .sum();
    let backward: f64 = p
        .iter()
        .zip(q)
        .map(|(&a, &b)| (b as f64 / n - epsilon.exp() * a as f64 / n).max(0.0))
        .sum();
    forward.max(backward)
}

/// Pure ε-DP audit over discrete outputs.
fn audit_pure(
    epsilon: f64,
    min_power: f64,
    bins: usize,
    mut d: impl FnMut() -> usize,
    mut d2: impl FnMut() -> usize,
    what: &str,
) {
    let p = histogram(bins, &mut d);
    let q = histogram(bins, &mut d2);
    let (bound, point) = observed_privacy_loss(&p, &q);
    assert!(
        bound <= epsilon,
        "{what}: privacy loss ≥ {bound} > ε = {epsilon}"
    );
    assert!(
        point >= min_power * epsilon,
        "{what}: audit saw only {point} (no power)"
    );
}

/// Output bin of a real value: width `w` over [lo, lo + bins·w], tails pooled.
fn bin_of(x: f64, lo: f64, w: f64, bins: usize) -> usize {
    (((x - lo) / w).floor().max(0.0) as usize).min(bins - 1)
}

#[test]
fn laplace_audits() -> dp_mechanisms::Result<()> {
    let mut noise = NoiseSource::seeded(20);
    let m = LaplaceMechanism::from_epsilon(1.0, 1.0)?;
    let (lo, w, bins) = (-6.0, 0.25, 56);
    let mut n2 = noise.fork();
    audit_pure(
        1.0,
        0.9,
        bins,
        || bin_of(m.release(0.0, &mut noise), lo, w, bins),
        || bin_of(m.release(1.0, &mut n2), lo, w, bins),
        "laplace",
    );

    let grid = GridLaplace::new(1.0, 1.0, Some(-3))?;
    let mut n3 = noise.fork();
    let mut n4 = noise.fork();
    audit_pure(
        grid.epsilon(),
        0.8,
        bins,
        || bin_of(grid.release(0.0, &mut n3).unwrap_or(f64::NAN), lo, w, bins),
        || bin_of(grid.release(1.0, &mut n4).unwrap_or(f64::NAN), lo, w, bins),
        "grid laplace",
    );
    Ok(())
}

#[test]
fn gaussian_audits() -> dp_mechanisms::Result<()> {
    let mut noise = NoiseSource::seeded(21);
    let (epsilon, delta) = (1.0, 0.05);
    let m = GaussianMechanism::from_epsilon_delta_analytic(1.0, epsilon, delta)?;
    let (lo, w, bins) = (-4.0 * m.std_dev(), 0.2 * m.std_dev(), 50);
    let mut n2 = noise.fork();
    let p = histogram(bins, || bin_of(m.release(0.0, &mut noise), lo, w, bins));
    let q = histogram(bins, || bin_of(m.release(1.0, &mut n2), lo, w, bins));
    let tolerance = Z * (2.0 / RUNS as f64).sqrt();
    assert!(empirical_delta(&p, &q, epsilon) <= delta + tolerance);
    // Power: at ε/4 the empirical δ is close to the true, larger δ(ε/4).
    let true_delta = delta_for_mu(epsilon / 4.0, 1.0 / m.noise_multiplier());
    assert!(empirical_delta(&p, &q, epsilon / 4.0) > 0.8 * true_delta);

    // Grid Gaussian: ρ-zCDP; its δ at ε is bounded by the zCDP conversion.
    let grid = GridGaussian::new(1.0, 0.5, Some(-4))?;
    let mut zcdp = ZcdpConfig::default().build()?;
    zcdp.compose(&grid.event(), 1)?;
    let bound = zcdp.delta(epsilon)?;
    let mut n3 = noise.fork();
    let mut n4 = noise.fork();
    let (lo, w) = (-4.0, 0.2);
    let p = histogram(bins, || {
        bin_of(grid.release(0.0, &mut n3).unwrap_or(f64::NAN), lo, w, bins)
    });
    let q = histogram(bins, || {
        bin_of(grid.release(1.0, &mut n4).unwrap_or(f64::NAN), lo, w, bins)
    });
    assert!(
        empirical_delta(&p, &q, epsilon) <= bound + tolerance,
        "grid gaussian"
    );
    Ok(())
}

/// Neighbouring score vectors: every score moves by at most Δ = 1.
const D: [f64; 4] = [1.0, 0.0, 0.0, 0.0];
const D_PRIME: [f64; 4] = [0.0, 1.0, 1.0, 1.0];

#[test]
fn selection_audits() -> dp_mechanisms::Result<()> {
    let mut noise = NoiseSource::seeded(22);
    let epsilon = 1.0;
    let em = ExponentialMechanism::new(1.0, epsilon, false)?;
    let mut n2 = noise.fork();
    audit_pure(
        epsilon,
        0.5,
        4,
        || em.select(&D, &mut noise).unwrap_or(0),
        || em.select(&D_PRIME, &mut n2).unwrap_or(0),
        "exponential",
    );
    for kind in [
        NoisyMaxNoise::Laplace,
        NoisyMaxNoise::Exponential,
        NoisyMaxNoise::Gumbel,
    ] {
        let rnm = ReportNoisyMax::new(1.0, epsilon, false, kind)?;
        let mut a = noise.fork();
        let mut b = noise.fork();
        audit_pure(
            epsilon,
            0.4,
            4,
            || rnm.select(&D, &mut a).unwrap_or(0),
            || rnm.select(&D_PRIME, &mut b).unwrap_or(0),
            &format!("{kind:?}"),
        );
    }
    let top = TopK::new(
        1.0,
        epsilon,
        2,
        false,
        TopKMethod::OneShotGumbel,
        BudgetSplit::Basic,
    )?;
    let pair = |chosen: Vec<usize>| chosen[0] * 4 + chosen[1];
    let mut a = noise.fork();
    let mut b = noise.fork();
    audit_pure(
        epsilon,
        0.3,
        16,
        || top.select(&D, &mut a).map(pair).unwrap_or(0),
        || top.select(&D_PRIME, &mut b).map(pair).unwrap_or(0),
        "top-k",
    );
    Ok(())
}

#[test]
fn sparse_vector_audit() -> dp_mechanisms::Result<()> {
    let mut noise = NoiseSource::seeded(23);
    let epsilon = 1.0;
    let svt = SparseVector::above_threshold(1.0, 0.5, epsilon)?;
    // Queries of sensitivity 1; the output is the index of the first ⊤ (4 = none).
    let d = [0.0, 0.0, 0.0, 1.0];
    let d_prime = [1.0, 1.0, 1.0, 0.0];
    let first =
        |outcome: dp_mechanisms::SparseOutcome| outcome.answers.first().map_or(4, |a| a.index);
    let mut n2 = noise.fork();
    audit_pure(
        epsilon,
        0.3,
        5,
        || svt.release(&d, &mut noise).map(first).unwrap_or(4),
        || svt.release(&d_prime, &mut n2).map(first).unwrap_or(4),
        "above threshold",
    );

    // Sparse with cutoff 2: the output is the set of answered queries (a 4-bit pattern).
    let sparse = SparseVector::new(SparseVariant::Sparse, 1.0, 0.5, 2, epsilon, 0.0)?;
    let pattern = |outcome: dp_mechanisms::SparseOutcome| {
        outcome.answers.iter().fold(0, |m, a| m | (1 << a.index))
    };
    let (mut a, mut b) = (noise.fork(), noise.fork());
    audit_pure(
        epsilon,
        0.2,
        16,
        || sparse.release(&d, &mut a).map(pattern).unwrap_or(0),
        || sparse.release(&d_prime, &mut b).map(pattern).unwrap_or(0),
        "sparse",
    );

    // NumericSparse, cutoff 1: the output is (index of the answer, its noisy value binned).
    let numeric = SparseVector::new(SparseVariant::Numeric, 1.0, 0.5, 1, epsilon, 0.0)?;
    let cell = |outcome: dp_mechanisms::SparseOutcome| {
        outcome.answers.first().map_or(40, |a| {
            a.index * 8 + bin_of(a.value.unwrap_or(0.0), -8.0, 2.0, 8)
        })
    };
    let (mut a, mut b) = (noise.fork(), noise.fork());
    audit_pure(
        epsilon,
        0.2,
        41,
        || numeric.release(&d, &mut a).map(cell).unwrap_or(40),
        || numeric.release(&d_prime, &mut b).map(cell).unwrap_or(40),
        "numeric sparse",
    );
    Ok(())
}
