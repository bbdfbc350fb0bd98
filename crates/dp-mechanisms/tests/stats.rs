//! Test statistics at significance 1e-6, so that a correct sampler essentially never
//! fails (one false alarm in a million runs per test).

use statrs::distribution::{ChiSquared, ContinuousCDF};

/// Significance level of every statistical test.
pub const ALPHA: f64 = 1e-6;

/// Kolmogorov–Smirnov distance between `samples` and the CDF `cdf`.
pub fn ks_distance(samples: &mut [f64], cdf: impl Fn(f64) -> f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let n = samples.len() as f64;
    samples.iter().enumerate().fold(0.0f64, |d, (i, &x)| {
        let f = cdf(x);
        d.max((f - i as f64 / n).abs())
            .max(((i + 1) as f64 / n - f).abs())
    })
}

/// The asymptotic KS critical distance at [`ALPHA`]: √(−ln(α/2)/2)/√n.
pub fn ks_critical(n: usize) -> f64 {
    (-(ALPHA / 2.0).ln() / 2.0).sqrt() / (n as f64).sqrt()
}

/// Pearson's chi-square of observed counts against expected probabilities (bins with
/// expected count below 5 are pooled into one), and its critical value at [`ALPHA`].
pub fn chi_square(counts: &[u64], probs: &[f64]) -> (f64, f64) {
    let n: u64 = counts.iter().sum();
    let n = n as f64;
    let (mut stat, mut bins) = (0.0, 0usize);
    let (mut pooled_obs, mut pooled_exp) = (0.0, 0.0);
    for (&c, &p) in counts.iter().zip(probs) {
        let expected = n * p;
        if expected < 5.0 {
            pooled_obs += c as f64;
            pooled_exp += expected;
            continue;
        }
        stat += (c as f64 - expected).powi(2) / expected;
        bins += 1;
    }
    if pooled_exp >= 5.0 {
        stat += (pooled_obs - pooled_exp).powi(2) / pooled_exp;
        bins += 1;
    } else if pooled_obs > 5.0 + 10.0 * pooled_exp {
        stat = f64::INFINITY; // mass where almost none is expected
    }
    let dof = (bins.max(2) - 1) as f64;
    let critical = ChiSquared::new(dof)
        .expect("dof > 0")
        .inverse_cdf(1.0 - ALPHA);
    (stat, critical)
}
