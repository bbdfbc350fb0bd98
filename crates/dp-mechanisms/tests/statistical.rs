//! Every sampler against its distribution (statrs), and each test's power against a 2%
//! error in the scale.

use dp_mechanisms::hardened::{DiscreteGaussian, DiscreteLaplace, Rational};
use dp_mechanisms::NoiseSource;
use statrs::distribution::{ContinuousCDF, Exp, Gumbel, Laplace, Normal};

use crate::stats::{chi_square, ks_critical, ks_distance};

const N: usize = 2_000_000;

/// Runs KS against the true scale and against a 2%-wrong one.
fn ks_with_power(
    mut samples: Vec<f64>,
    cdf: impl Fn(f64) -> f64,
    wrong: impl Fn(f64) -> f64,
    what: &str,
) {
    let critical = ks_critical(samples.len());
    let d = ks_distance(&mut samples, &cdf);
    assert!(d < critical, "{what}: KS distance {d} >= {critical}");
    let d_wrong = ks_distance(&mut samples, &wrong);
    assert!(
        d_wrong > critical,
        "{what}: a 2% scale error went undetected ({d_wrong} < {critical})"
    );
}

#[test]
fn standard_normal_and_gaussian_fill() {
    let mut noise = NoiseSource::seeded(1);
    let samples: Vec<f64> = (0..N).map(|_| noise.standard_normal()).collect();
    let right = Normal::new(0.0, 1.0).expect("valid");
    let wrong = Normal::new(0.0, 1.02).expect("valid");
    ks_with_power(
        samples,
        |x| right.cdf(x),
        |x| wrong.cdf(x),
        "standard normal",
    );

    // The in-place buffer fill used by DP-SGD, at std 3.
    let mut buffer = vec![0.0f32; N];
    noise.add_gaussian_f32(&mut buffer, 3.0);
    let right = Normal::new(0.0, 3.0).expect("valid");
    let wrong = Normal::new(0.0, 3.06).expect("valid");
    ks_with_power(
        buffer.iter().map(|&x| f64::from(x)).collect(),
        |x| right.cdf(x),
        |x| wrong.cdf(x),
        "gaussian fill",
    );
}

#[test]
fn laplace_exponential_gumbel() {
    let mut noise = NoiseSource::seeded(2);
    let samples: Vec<f64> = (0..N).map(|_| noise.laplace(2.0)).collect();
    let (right, wrong) = (
        Laplace::new(0.0, 2.0).expect("valid"),
        Laplace::new(0.0, 2.04).expect("valid"),
    );
    ks_with_power(samples, |x| right.cdf(x), |x| wrong.cdf(x), "laplace");

    let samples: Vec<f64> = (0..N).map(|_| noise.standard_exponential()).collect();
    let (right, wrong) = (
        Exp::new(1.0).expect("valid"),
        Exp::new(1.0 / 1.02).expect("valid"),
    );
    ks_with_power(samples, |x| right.cdf(x), |x| wrong.cdf(x), "exponential");

    let samples: Vec<f64> = (0..N).map(|_| noise.standard_gumbel()).collect();
    let (right, wrong) = (
        Gumbel::new(0.0, 1.0).expect("valid"),
        Gumbel::new(0.0, 1.02).expect("valid"),
    );
    ks_with_power(samples, |x| right.cdf(x), |x| wrong.cdf(x), "gumbel");
}

/// Counts of integer samples in [−range, range] (tails pooled at the ends).
fn histogram(samples: impl Iterator<Item = i64>, range: i64) -> Vec<u64> {
    let mut counts = vec![0u64; (2 * range + 1) as usize];
    for x in samples {
        counts[(x.clamp(-range, range) + range) as usize] += 1;
    }
    counts
}

/// Probabilities of `weight(x)` normalised over the integers, binned like `histogram`.
fn discrete_probs(weight: impl Fn(i64) -> f64, range: i64) -> Vec<f64> {
    let far = 200 * range;
    let total: f64 = (-far..=far).map(&weight).sum();
    let mut probs: Vec<f64> = (-range..=range).map(|x| weight(x) / total).collect();
    let tail: f64 = (range + 1..=far).map(&weight).sum::<f64>() / total;
    probs[0] += tail;
    probs[(2 * range) as usize] += tail;
    probs
}

#[test]
fn discrete_laplace_is_exact() -> dp_mechanisms::Result<()> {
    let mut noise = NoiseSource::seeded(3);
    let t = 5.0;
    let sampler = DiscreteLaplace::new(Rational::at_least("scale", t)?)?;
    let samples: Vec<i64> = (0..1_000_000)
        .map(|_| sampler.sample(&mut noise))
        .collect::<Result<_, _>>()?;
    let range = 40;
    let counts = histogram(samples.iter().copied(), range);
    let (stat, critical) = chi_square(
        &counts,
        &discrete_probs(|x| (-(x.abs() as f64) / t).exp(), range),
    );
    assert!(stat < critical, "chi-square {stat} >= {critical}");
    let (wrong, _) = chi_square(
        &counts,
        &discrete_probs(|x| (-(x.abs() as f64) / (t * 1.02)).exp(), range),
    );
    assert!(
        wrong > critical,
        "a 2% scale error went undetected: {wrong}"
    );
    Ok(())
}

#[test]
fn discrete_gaussian_is_exact() -> dp_mechanisms::Result<()> {
    let mut noise = NoiseSource::seeded(4);
    let sigma = 4.0;
    let sampler = DiscreteGaussian::new(sigma)?;
    let samples: Vec<i64> = (0..1_000_000)
        .map(|_| sampler.sample(&mut noise))
        .collect::<Result<_, _>>()?;
    let range = 30;
    let counts = histogram(samples.iter().copied(), range);
    let pmf = |s: f64| move |x: i64| (-(x * x) as f64 / (2.0 * s * s)).exp();
    let (stat, critical) = chi_square(&counts, &discrete_probs(pmf(sigma), range));
    assert!(stat < critical, "chi-square {stat} >= {critical}");
    let (wrong, _) = chi_square(&counts, &discrete_probs(pmf(sigma * 1.02), range));
    assert!(
        wrong > critical,
        "a 2% scale error went undetected: {wrong}"
    );
    Ok(())
}
