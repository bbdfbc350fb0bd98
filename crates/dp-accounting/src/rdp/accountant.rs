//! The RDP accountant.

use serde::{Deserialize, Serialize};

use super::conversion::Conversion;
use super::curves::{self, FractionalSeries};
use super::orders::OrderGrid;
use crate::accountant::{
    check_target_delta, check_target_epsilon, poisson_relation, unsupported, Accountant, Guarantee,
    PrivacyReport,
};
use crate::error::Result;
use crate::event::{DpEvent, NeighbouringRelation};
use crate::ledger::Ledger;
use crate::logspace::log_add;
use crate::terms::LeafTerms;
use crate::truncated::{truncated_parts, TruncationSplit};

/// Settings of an [`RdpAccountant`]; plain data with defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RdpConfig {
    /// The Rényi orders. Default: [`OrderGrid::Opacus`].
    pub orders: OrderGrid,
    /// The conversion to (ε, δ). Default: [`Conversion::Improved`].
    pub conversion: Conversion,
    /// The fractional-order series. Default: [`FractionalSeries::Signed`] (exact).
    pub series: FractionalSeries,
    /// The neighbouring relation. Default: add-or-remove-one.
    pub relation: NeighbouringRelation,
}

impl Default for RdpConfig {
    fn default() -> Self {
        RdpConfig {
            orders: OrderGrid::Opacus,
            conversion: Conversion::Improved,
            series: FractionalSeries::Signed,
            relation: NeighbouringRelation::AddOrRemoveOne,
        }
    }
}

impl RdpConfig {
    /// Builds the accountant, validating the order grid.
    pub fn build(self) -> Result<RdpAccountant> {
        self.orders.validate()?;
        let orders = self.orders.orders();
        let rdp = vec![0.0; orders.len()];
        Ok(RdpAccountant {
            ledger: Ledger::new(self.relation),
            config: self,
            orders,
            rdp,
            extra_delta: 0.0,
        })
    }
}

/// Rényi-DP accountant (Mironov 2017): sums per-order RDP curves and converts to (ε, δ).
///
/// Supported events: `Gaussian`, `Laplace`, `ZCdp` (exactly (α, ξ + ρα)-RDP at every α,
/// Bun & Steinke 2016, Def. 1.1), `Exponential`, `EpsilonDelta` (randomized-response RDP
/// plus δ tracked apart), `PoissonSampled` of a Gaussian-like event (add/remove only;
/// exact) or of any composition of unsampled δ = 0 mechanisms, `ZCdp` included
/// (add/remove only; Zhu & Wang 2019's general bound, see
/// [`curves::poisson_sampled_general`]), `SampledWithoutReplacement` of a Gaussian-like event
/// (replace-one only), and any `SelfComposed`/`Composed` of these. "Gaussian-like" is a
/// Gaussian or a composition of Gaussians, which collapses to one Gaussian with
/// `σ_eff = (Σ σᵢ⁻²)^{-1/2}` (Mironov, Talwar, Zhang 2019, §3). A `ZCdp` event is not
/// Gaussian-like: ρ-zCDP gives the Gaussian's unsampled curve but not its subsampled
/// one, so `SampledWithoutReplacement` of it is refused (see
/// [`DpEvent::effective_gaussian_noise_multiplier`]).
///
/// # Guarantee
/// The reported ε is an upper bound for every supported event: the curves are exact or
/// upper bounds and both conversions are valid.
#[derive(Clone, Debug)]
pub struct RdpAccountant {
    config: RdpConfig,
    orders: Vec<f64>,
    rdp: Vec<f64>,
    extra_delta: f64,
    ledger: Ledger,
}

impl RdpAccountant {
    /// An accountant with the given config (see [`RdpConfig::build`]).
    pub fn new(config: RdpConfig) -> Result<Self> {
        config.build()
    }

    /// The orders α.
    pub fn orders(&self) -> &[f64] {
        &self.orders
    }

    /// The composed RDP ε(α) at each order.
    pub fn rdp(&self) -> &[f64] {
        &self.rdp
    }

    /// The δ accumulated from `EpsilonDelta` events, `1 − Π(1 − δᵢ)`.
    pub fn extra_delta(&self) -> f64 {
        self.extra_delta
    }

    /// The config.
    pub fn config(&self) -> &RdpConfig {
        &self.config
    }

    fn display_name(&self) -> &'static str {
        match self.config.conversion {
            Conversion::Improved => "rdp",
            Conversion::Classic => "rdp-classic",
        }
    }

    /// Adds `count` × the curve at every order (and the δ of `EpsilonDelta` events).
    fn add(&mut self, curve: Curve, count: u64) {
        if count == 0 {
            return;
        }
        let count_f = count as f64;
        let series = self.config.series;
        if let Curve::EpsilonDelta { delta, .. } = &curve {
            let delta = *delta;
            // 1 − (1 − δ_old)(1 − δ)^count, computed stably.
            let log_keep = (-self.extra_delta).ln_1p() + count_f * (-delta).ln_1p();
            self.extra_delta = -log_keep.exp_m1();
        }
        for (total, &alpha) in self.rdp.iter_mut().zip(&self.orders) {
            *total += count_f * curve.at(alpha, series);
        }
    }
}

impl Curve {
    /// The curve at order α.
    fn at(&self, alpha: f64, series: FractionalSeries) -> f64 {
        match *self {
            Curve::PoissonGaussian { q, sigma } => {
                curves::poisson_gaussian(q, sigma, alpha, series)
            }
            Curve::SampledWithoutReplacement { q, sigma } => {
                curves::sampled_without_replacement_gaussian(q, sigma, alpha)
            }
            Curve::TruncatedPoissonGaussian { q, sigma, split } => {
                // With the branch revealed (crate::truncated; its law is the same under
                // both datasets) E_Q[(P/Q)^α] is the p-mixture of the branches', so the
                // pair's Rényi divergence is ln((1−p)e^{(α−1)ε₁} + p e^{(α−1)ε₂})/(α−1);
                // forgetting the branch cannot raise it (data processing: van Erven &
                // Harremoës 2014, Thm 9).
                let p = split.truncation_probability;
                let full = curves::poisson_gaussian(q, sigma, alpha, series);
                if p == 0.0 {
                    return full;
                }
                let cut = curves::poisson_gaussian(
                    split.truncated_rate,
                    split.truncated_sigma,
                    alpha,
                    series,
                );
                let a1 = alpha - 1.0;
                log_add((-p).ln_1p() + a1 * full, p.ln() + a1 * cut) / a1
            }
            Curve::Laplace { b } => curves::laplace(b, alpha),
            Curve::Zcdp { rho, xi } => xi + rho * alpha,
            Curve::Exponential { epsilon } => curves::exponential_mechanism(epsilon, alpha),
            Curve::EpsilonDelta { epsilon, .. } => curves::randomized_response(epsilon, alpha),
            Curve::PoissonGeneral { q, ref parts } => {
                let inner = |a: f64| -> f64 {
                    parts.iter().map(|(c, n)| *n as f64 * c.at(a, series)).sum()
                };
                let pure = parts
                    .iter()
                    .map(|(c, n)| *n as f64 * c.pure_epsilon())
                    .sum::<f64>();
                curves::poisson_sampled_general(q, inner, pure, alpha)
            }
        }
    }

    /// The pure-DP ε of an unsampled curve (∞ when it has none, e.g. a Gaussian).
    fn pure_epsilon(&self) -> f64 {
        match *self {
            Curve::Laplace { b } => 1.0 / b,
            Curve::Exponential { epsilon } => epsilon,
            Curve::EpsilonDelta {
                epsilon,
                delta: 0.0,
            } => epsilon,
            _ => f64::INFINITY,
        }
    }
}

/// A per-step RDP curve the accountant knows how to evaluate.
#[derive(Clone, Debug)]
pub(crate) enum Curve {
    /// Poisson sampling (rate q) of any unsampled mechanisms: the general bound over the
    /// sum of their curves.
    PoissonGeneral {
        q: f64,
        parts: Vec<(Curve, u64)>,
    },
    /// Poisson-subsampled Gaussian (q = 1: the plain Gaussian, α/(2σ²)).
    PoissonGaussian {
        q: f64,
        sigma: f64,
    },
    SampledWithoutReplacement {
        q: f64,
        sigma: f64,
    },
    /// A truncated Poisson Gaussian: the Poisson branch (q, σ) and the truncated one.
    TruncatedPoissonGaussian {
        q: f64,
        sigma: f64,
        split: TruncationSplit,
    },
    Laplace {
        b: f64,
    },
    Zcdp {
        rho: f64,
        xi: f64,
    },
    Exponential {
        epsilon: f64,
    },
    /// Randomized-response RDP plus δ tracked apart.
    EpsilonDelta {
        epsilon: f64,
        delta: f64,
    },
}

impl LeafTerms for RdpAccountant {
    type Term = Curve;

    /// One leaf event as its per-step RDP curve; mutates nothing.
    fn leaf_term(&self, event: &DpEvent) -> Result<Curve> {
        let name = self.display_name();
        let gaussian_like = |inner: &DpEvent| {
            inner.effective_gaussian_noise_multiplier().ok_or_else(|| {
                let reason = if inner.contains_zcdp() {
                    "the bound for sampling without replacement implemented here is the Gaussian's, and rho-zCDP does not imply the Gaussian's subsampled RDP curve"
                } else {
                    "the sampled event must be a Gaussian or a composition of Gaussians"
                };
                unsupported(name, event, reason)
            })
        };
        let curve = match event {
            DpEvent::NoOp | DpEvent::SelfComposed { .. } | DpEvent::Composed { .. } => {
                return Err(unsupported(name, event, "not a leaf event"));
            }
            DpEvent::Gaussian { noise_multiplier } => Curve::PoissonGaussian {
                q: 1.0,
                sigma: *noise_multiplier,
            },
            DpEvent::Laplace { noise_multiplier } => Curve::Laplace {
                b: *noise_multiplier,
            },
            DpEvent::ZCdp { rho, xi } => Curve::Zcdp { rho: *rho, xi: *xi },
            DpEvent::Exponential { epsilon } => Curve::Exponential { epsilon: *epsilon },
            DpEvent::EpsilonDelta { epsilon, delta } => Curve::EpsilonDelta {
                epsilon: *epsilon,
                delta: *delta,
            },
            DpEvent::PoissonSampled {
                sampling_rate,
                event: inner,
            } => {
                poisson_relation(name, self.config.relation, event)?;
                match inner.effective_gaussian_noise_multiplier() {
                    Some(sigma) => Curve::PoissonGaussian {
                        q: *sampling_rate,
                        sigma,
                    },
                    // Any other mechanism run on the sample: the general bound over its
                    // own (unsampled) curve.
                    None => {
                        let parts = self.terms(inner, 1)?;
                        let sampled_or_delta = parts.iter().any(|(c, _)| match c {
                            Curve::PoissonGaussian { q, .. } => *q < 1.0,
                            Curve::EpsilonDelta { delta, .. } => *delta > 0.0,
                            Curve::SampledWithoutReplacement { .. }
                            | Curve::TruncatedPoissonGaussian { .. }
                            | Curve::PoissonGeneral { .. } => true,
                            _ => false,
                        });
                        if sampled_or_delta {
                            return Err(unsupported(
                                name,
                                event,
                                "a Poisson-sampled event must contain only unsampled mechanisms with delta = 0",
                            ));
                        }
                        Curve::PoissonGeneral {
                            q: *sampling_rate,
                            parts,
                        }
                    }
                }
            }
            DpEvent::TruncatedPoissonGaussian { .. } => {
                let (sigma, q, split) = truncated_parts(event, self.config.relation, name)?;
                Curve::TruncatedPoissonGaussian { q, sigma, split }
            }
            DpEvent::SampledWithoutReplacement {
                source_dataset_size,
                sample_size,
                event: inner,
            } => {
                if self.config.relation != NeighbouringRelation::ReplaceOne {
                    return Err(unsupported(
                        name,
                        event,
                        "sampling without replacement is accounted under replace-one neighbours",
                    ));
                }
                let q = *sample_size as f64 / *source_dataset_size as f64;
                Curve::SampledWithoutReplacement {
                    q,
                    sigma: gaussian_like(inner)?,
                }
            }
        };
        Ok(curve)
    }
}

impl Accountant for RdpAccountant {
    fn name(&self) -> &'static str {
        self.display_name()
    }

    fn relation(&self) -> NeighbouringRelation {
        self.config.relation
    }

    fn supports(&self, event: &DpEvent) -> Result<()> {
        self.terms(event, 1).map(drop)
    }

    fn compose(&mut self, event: &DpEvent, count: u64) -> Result<()> {
        for (curve, count) in self.terms(event, count)? {
            self.add(curve, count);
        }
        self.ledger.record(event.clone(), count);
        Ok(())
    }

    fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    fn epsilon_report(&self, target_delta: f64) -> Result<PrivacyReport> {
        check_target_delta(target_delta)?;
        let mut report = PrivacyReport {
            accountant: self.display_name().to_string(),
            epsilon: 0.0,
            delta: target_delta,
            order: None,
            guarantee: Guarantee::UpperBound,
            warnings: Vec::new(),
        };
        if self.rdp.iter().all(|&r| r == 0.0) && self.extra_delta == 0.0 {
            return Ok(report);
        }
        // δ left for the RDP part once the EpsilonDelta events' δ is paid:
        // 1 − (1 − δ_target)/(1 − δ_extra).
        if target_delta <= self.extra_delta {
            report.epsilon = f64::INFINITY;
            report.warnings.push(format!(
                "target delta {target_delta} is not above the delta {} of the (epsilon, delta) events",
                self.extra_delta
            ));
            return Ok(report);
        }
        let delta = -((-target_delta).ln_1p() - (-self.extra_delta).ln_1p()).exp_m1();
        let (eps, order) =
            super::epsilon_from_rdp(&self.orders, &self.rdp, delta, self.config.conversion);
        let best = self.orders.iter().position(|&a| a == order).unwrap_or(0);
        report.epsilon = eps.max(0.0);
        report.order = Some(order);
        if eps.is_finite() && eps > 0.0 && (best == 0 || best + 1 == self.orders.len()) {
            let edge = if best == 0 { "smallest" } else { "largest" };
            report.warnings.push(format!(
                "the optimal order {} is the {edge} of the grid; extend the orders for a tighter epsilon",
                self.orders[best]
            ));
        }
        Ok(report)
    }

    fn delta(&self, target_epsilon: f64) -> Result<f64> {
        check_target_epsilon(target_epsilon)?;
        if self.rdp.iter().all(|&r| r == 0.0) {
            return Ok(self.extra_delta);
        }
        let delta = super::delta_from_rdp(
            &self.orders,
            &self.rdp,
            target_epsilon,
            self.config.conversion,
        );
        // Add the EpsilonDelta events' δ: 1 − (1 − δ)(1 − δ_extra).
        Ok(-((-delta).ln_1p() + (-self.extra_delta).ln_1p()).exp_m1())
    }
}
