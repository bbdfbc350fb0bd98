//! Gaussian differential privacy and the central limit theorem for DP-SGD
//! (Dong, Roth, Su 2019; Bu, Dong, Long, Su 2020).

use serde::{Deserialize, Serialize};

use crate::accountant::{
    check_target_delta, check_target_epsilon, poisson_relation, unsupported, Accountant, Guarantee,
    PrivacyReport,
};
use crate::error::{Error, Result};
use crate::event::{DpEvent, NeighbouringRelation, ZCDP_NOT_GDP};
use crate::ledger::Ledger;
use crate::logspace::{log_ndtr, normal_cdf};
use crate::terms::LeafTerms;
use crate::validate;

/// μ of the CLT for `steps` Poisson-subsampled Gaussian steps (rate q, noise σ).
///
/// # Privacy
/// Bu, Dong, Long, Su 2020 (Harvard Data Science Review, arXiv 1911.11607) Thm 2 / eq. 6:
/// `μ = q·√(T(e^{1/σ²} − 1))`. An **asymptotic** approximation (p√T → ν as T → ∞), not
/// a bound: it can under-report ε for finite T.
pub fn mu_poisson(sampling_rate: f64, noise_multiplier: f64, steps: f64) -> f64 {
    sampling_rate * (steps * (noise_multiplier.powi(-2)).exp_m1()).sqrt()
}

/// μ of the CLT for `steps` Gaussian steps on uniformly sampled (shuffled) batches.
///
/// # Privacy
/// Bu, Dong, Long, Su 2020 §5 (after Dong, Roth, Su 2019, arXiv 1905.02383, Cor. 5.4);
/// TF Privacy `compute_mu_uniform`:
/// `μ = √2·q·√T·√(e^{1/σ²}Φ(1.5/σ) + 3Φ(−0.5/σ) − 2)`. Asymptotic, like
/// [`mu_poisson`].
pub fn mu_uniform(sampling_rate: f64, noise_multiplier: f64, steps: f64) -> f64 {
    std::f64::consts::SQRT_2
        * sampling_rate
        * steps.sqrt()
        * uniform_factor(noise_multiplier).sqrt()
}

fn uniform_factor(sigma: f64) -> f64 {
    (sigma.powi(-2)).exp() * normal_cdf(1.5 / sigma) + 3.0 * normal_cdf(-0.5 / sigma) - 2.0
}

/// δ(ε) of μ-GDP: `Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)`.
///
/// # Privacy
/// Dong, Roth, Su 2019 (arXiv 1905.02383) Cor. 2.13. For the Gaussian mechanism
/// (μ = Δ/σ) this is the exact analytic Gaussian curve of Balle & Wang 2018 (ICML,
/// arXiv 1805.06530) Thm 8. The second term is computed in log space.
pub fn delta_for_mu(epsilon: f64, mu: f64) -> f64 {
    if mu == 0.0 {
        return 0.0;
    }
    if mu.is_infinite() {
        return 1.0;
    }
    let a = normal_cdf(-epsilon / mu + mu / 2.0);
    let b = (epsilon + log_ndtr(-epsilon / mu - mu / 2.0)).exp();
    (a - b).clamp(0.0, 1.0)
}

/// ε(δ) of μ-GDP: the root of `delta_for_mu(ε, μ) = δ`, by bracket doubling then
/// bisection; never fails for tiny μ (then ε = 0).
pub fn epsilon_for_mu(delta: f64, mu: f64) -> f64 {
    if mu.is_infinite() {
        return f64::INFINITY;
    }
    if delta_for_mu(0.0, mu) <= delta {
        return 0.0;
    }
    let mut hi = 1.0;
    while delta_for_mu(hi, mu) > delta {
        hi *= 2.0;
        if hi > 1e12 {
            return f64::INFINITY;
        }
    }
    bisect(0.0, hi, |eps| delta_for_mu(eps, mu) > delta)
}

/// The largest μ with `delta_for_mu(ε, μ) ≤ δ` (δ increases with μ): a Gaussian
/// mechanism with `σ = Δ/μ` is then (ε, δ)-DP — the analytic Gaussian calibration of
/// Balle & Wang 2018 (ICML, arXiv 1805.06530), Thm 8 / Alg. 1, by bisection.
pub fn mu_for_delta(epsilon: f64, delta: f64) -> f64 {
    let mut hi = 1.0;
    while delta_for_mu(epsilon, hi) < delta {
        hi *= 2.0;
        if hi > 1e12 {
            return f64::INFINITY;
        }
    }
    // The lower end of the final bracket satisfies δ(ε; μ) ≤ δ: never overshoots.
    let (mut lo, mut hi) = (0.0, hi);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if delta_for_mu(epsilon, mid) <= delta {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Bisection on a monotone predicate true on `[lo, x*)` and false on `[x*, hi]`; returns
/// the upper end of the final bracket (where the predicate is false).
fn bisect(mut lo: f64, mut hi: f64, below: impl Fn(f64) -> bool) -> f64 {
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if below(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// The GDP paper's σ̃ recalibration (Bu et al. 2020, eqs. 7–8): the noise multiplier whose
/// Poisson CLT ε at `delta` equals `target_epsilon` (typically the moments accountant's
/// ε for the original σ), for rate q and `steps`.
///
/// Finds μ̃ with δ(ε; μ̃) = δ, then inverts `μ = q√(T(e^{1/σ²} − 1))`:
/// `σ̃ = 1/√(ln(1 + μ̃²/(q²T)))`.
pub fn recalibrate_sigma(
    target_epsilon: f64,
    delta: f64,
    sampling_rate: f64,
    steps: f64,
) -> Result<f64> {
    validate::non_negative("target_epsilon", target_epsilon)?;
    validate::open_unit("target_delta", delta)?;
    validate::positive("sampling_rate", sampling_rate)?;
    validate::positive("steps", steps)?;
    let mu = mu_for_delta(target_epsilon, delta);
    if !mu.is_finite() {
        return Err(Error::Numerical("no finite mu reaches the target".into()));
    }
    Ok(1.0
        / (mu * mu / (sampling_rate * sampling_rate * steps))
            .ln_1p()
            .sqrt())
}

/// Settings of a [`GdpAccountant`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GdpConfig {
    /// The neighbouring relation. Default add-or-remove-one (the GDP paper's).
    pub relation: NeighbouringRelation,
}

impl Default for GdpConfig {
    fn default() -> Self {
        GdpConfig {
            relation: NeighbouringRelation::AddOrRemoveOne,
        }
    }
}

impl GdpConfig {
    /// Builds the accountant.
    pub fn build(self) -> Result<GdpAccountant> {
        Ok(GdpAccountant {
            ledger: Ledger::new(self.relation),
            mu_squared: 0.0,
            asymptotic: false,
            config: self,
        })
    }
}

/// σ of the Gaussian-like event `inner` sampled in `event`, or the refusal.
fn sampled_gaussian(event: &DpEvent, inner: &DpEvent) -> Result<f64> {
    inner.effective_gaussian_noise_multiplier().ok_or_else(|| {
        let reason = if inner.contains_zcdp() {
            ZCDP_NOT_GDP
        } else {
            "the sampled event must be a Gaussian or a composition of Gaussians"
        };
        unsupported("gdp", event, reason)
    })
}

/// Gaussian-DP accountant: μ² adds up under composition (Dong, Roth, Su 2019, Cor. 3.3).
///
/// Supported events: `Gaussian` (exactly 1/σ-GDP, Dong, Roth, Su 2019, Thm 2.7),
/// `PoissonSampled` of a Gaussian or a composition of Gaussians (the Poisson CLT), and
/// `SampledWithoutReplacement` of one (the uniform-sampling CLT), with any
/// `SelfComposed`/`Composed` nesting.
///
/// `ZCdp` is refused, sampled or not, even with ξ = 0: ρ-zCDP does not imply
/// √(2ρ)-GDP (see [`DpEvent::effective_gaussian_noise_multiplier`]). Account it with the
/// RDP or zCDP accountant.
///
/// # Guarantee
/// Exact for unsampled Gaussians; once a sampled event is composed, ε is the CLT's
/// **asymptotic approximation** and may under-report: every report then carries
/// [`Guarantee::Asymptotic`] and a warning. Compare with [`PldAccountant`](crate::PldAccountant).
#[derive(Clone, Debug)]
pub struct GdpAccountant {
    config: GdpConfig,
    mu_squared: f64,
    asymptotic: bool,
    ledger: Ledger,
}

impl GdpAccountant {
    /// An accountant with the given config.
    pub fn new(config: GdpConfig) -> Result<Self> {
        config.build()
    }

    /// The composed μ.
    pub fn mu(&self) -> f64 {
        self.mu_squared.sqrt()
    }
}

impl LeafTerms for GdpAccountant {
    type Term = (f64, bool);

    /// (μ² of one occurrence of a leaf event, whether the CLT was used).
    fn leaf_term(&self, event: &DpEvent) -> Result<(f64, bool)> {
        match event {
            DpEvent::Gaussian { noise_multiplier } => Ok((noise_multiplier.powi(-2), false)),
            DpEvent::ZCdp { .. } => Err(unsupported("gdp", event, ZCDP_NOT_GDP)),
            DpEvent::PoissonSampled {
                sampling_rate,
                event: inner,
            } => {
                poisson_relation("gdp", self.config.relation, event)?;
                let sigma = sampled_gaussian(event, inner)?;
                Ok((mu_poisson(*sampling_rate, sigma, 1.0).powi(2), true))
            }
            DpEvent::SampledWithoutReplacement {
                source_dataset_size,
                sample_size,
                event: inner,
            } => {
                let sigma = sampled_gaussian(event, inner)?;
                let q = *sample_size as f64 / *source_dataset_size as f64;
                Ok((mu_uniform(q, sigma, 1.0).powi(2), true))
            }
            other => Err(unsupported(
                "gdp",
                other,
                "it is not a (subsampled) Gaussian mechanism",
            )),
        }
    }
}

impl Accountant for GdpAccountant {
    fn name(&self) -> &'static str {
        "gdp"
    }

    fn relation(&self) -> NeighbouringRelation {
        self.config.relation
    }

    fn supports(&self, event: &DpEvent) -> Result<()> {
        self.terms(event, 1).map(drop)
    }

    fn compose(&mut self, event: &DpEvent, count: u64) -> Result<()> {
        for ((m, asymptotic), n) in self.terms(event, count)? {
            self.mu_squared += m * n as f64;
            self.asymptotic |= asymptotic && n > 0;
        }
        self.ledger.record(event.clone(), count);
        Ok(())
    }

    fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    fn epsilon_report(&self, target_delta: f64) -> Result<PrivacyReport> {
        check_target_delta(target_delta)?;
        let mut warnings = Vec::new();
        if self.asymptotic {
            warnings.push(format!(
                "central-limit approximation (mu = {:.6e}): asymptotic, not an upper bound; it can under-report epsilon",
                self.mu()
            ));
        }
        Ok(PrivacyReport {
            accountant: "gdp".to_string(),
            epsilon: epsilon_for_mu(target_delta, self.mu()),
            delta: target_delta,
            order: None,
            guarantee: self.guarantee(),
            warnings,
        })
    }

    fn delta(&self, target_epsilon: f64) -> Result<f64> {
        check_target_epsilon(target_epsilon)?;
        Ok(delta_for_mu(target_epsilon, self.mu()))
    }

    fn guarantee(&self) -> Guarantee {
        if self.asymptotic {
            Guarantee::Asymptotic
        } else {
            Guarantee::UpperBound
        }
    }
}
