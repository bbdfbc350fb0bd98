//! The RDP accountant.

use serde::{Deserialize, Serialize};

use super::conversion::{epsilon_at_order, log_delta_at_order, Conversion};
use super::curves::{self, FractionalSeries};
use super::orders::OrderGrid;
use crate::accountant::{
    check_composable, check_target_delta, check_target_epsilon, unsupported, Accountant, Guarantee,
    PrivacyReport,
};
use crate::error::Result;
use crate::event::{DpEvent, NeighbouringRelation};
use crate::ledger::Ledger;

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
/// Supported events: `Gaussian`, `Laplace`, `ZCdp`, `Exponential`, `EpsilonDelta`
/// (randomized-response RDP plus δ tracked apart), `PoissonSampled` of a Gaussian-like
/// event (add/remove only), `SampledWithoutReplacement` of a Gaussian-like event
/// (replace-one only), and any `SelfComposed`/`Composed` of these. "Gaussian-like" is a
/// Gaussian, a ρ-zCDP event with ξ = 0, or a composition of them, which collapses to one
/// Gaussian with `σ_eff = (Σ σᵢ⁻²)^{-1/2}` (Mironov, Talwar, Zhang 2019, §3).
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

    /// Walks the event tree; with `apply` it adds `count`× the event's RDP.
    fn visit(&mut self, event: &DpEvent, count: u64, apply: bool) -> Result<()> {
        let count_f = count as f64;
        let relation = self.config.relation;
        match event {
            DpEvent::NoOp => Ok(()),
            DpEvent::SelfComposed {
                event: inner,
                count: inner_count,
            } => self.visit(inner, count.saturating_mul(*inner_count), apply),
            DpEvent::Composed { events } => {
                events.iter().try_for_each(|e| self.visit(e, count, apply))
            }
            DpEvent::Gaussian { noise_multiplier } => {
                let sigma = *noise_multiplier;
                self.add_curve(apply, count_f, |a| {
                    curves::poisson_gaussian(1.0, sigma, a, FractionalSeries::Signed)
                });
                Ok(())
            }
            DpEvent::Laplace { noise_multiplier } => {
                let b = *noise_multiplier;
                self.add_curve(apply, count_f, |a| curves::laplace(b, a));
                Ok(())
            }
            DpEvent::ZCdp { rho, xi } => {
                let (rho, xi) = (*rho, *xi);
                self.add_curve(apply, count_f, |a| xi + rho * a);
                Ok(())
            }
            DpEvent::Exponential { epsilon } => {
                let eps = *epsilon;
                self.add_curve(apply, count_f, |a| curves::exponential_mechanism(eps, a));
                Ok(())
            }
            DpEvent::EpsilonDelta { epsilon, delta } => {
                let eps = *epsilon;
                if apply {
                    // 1 − (1 − δ_old)(1 − δ)^count, computed stably.
                    let log_keep = (-self.extra_delta).ln_1p() + count_f * (-*delta).ln_1p();
                    self.extra_delta = -log_keep.exp_m1();
                }
                self.add_curve(apply, count_f, |a| curves::randomized_response(eps, a));
                Ok(())
            }
            DpEvent::PoissonSampled {
                sampling_rate,
                event: inner,
            } => {
                if relation != NeighbouringRelation::AddOrRemoveOne {
                    return Err(unsupported(
                        self.display_name(),
                        event,
                        "Poisson subsampling is accounted under add-or-remove-one neighbours",
                    ));
                }
                let sigma = inner.effective_gaussian_noise_multiplier().ok_or_else(|| {
                    unsupported(
                        self.display_name(),
                        event,
                        "the sampled event must be Gaussian-like",
                    )
                })?;
                let (q, series) = (*sampling_rate, self.config.series);
                self.add_curve(apply, count_f, |a| {
                    curves::poisson_gaussian(q, sigma, a, series)
                });
                Ok(())
            }
            DpEvent::SampledWithoutReplacement {
                source_dataset_size,
                sample_size,
                event: inner,
            } => {
                if relation != NeighbouringRelation::ReplaceOne {
                    return Err(unsupported(
                        self.display_name(),
                        event,
                        "sampling without replacement is accounted under replace-one neighbours",
                    ));
                }
                let sigma = inner.effective_gaussian_noise_multiplier().ok_or_else(|| {
                    unsupported(
                        self.display_name(),
                        event,
                        "the sampled event must be Gaussian-like",
                    )
                })?;
                let q = *sample_size as f64 / *source_dataset_size as f64;
                self.add_curve(apply, count_f, |a| {
                    curves::sampled_without_replacement_gaussian(q, sigma, a)
                });
                Ok(())
            }
        }
    }

    fn add_curve(&mut self, apply: bool, count: f64, curve: impl Fn(f64) -> f64) {
        if !apply || count == 0.0 {
            return;
        }
        for (total, &alpha) in self.rdp.iter_mut().zip(&self.orders) {
            *total += count * curve(alpha);
        }
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
        check_composable(event)?;
        // A dry run on a scratch copy would clone the curves; visiting without applying
        // mutates nothing.
        let mut probe = RdpAccountant {
            config: self.config.clone(),
            orders: Vec::new(),
            rdp: Vec::new(),
            extra_delta: 0.0,
            ledger: Ledger::new(self.config.relation),
        };
        probe.visit(event, 1, false)
    }

    fn compose(&mut self, event: &DpEvent, count: u64) -> Result<()> {
        self.supports(event)?;
        self.visit(event, count, true)?;
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
        let (best, eps) = self
            .orders
            .iter()
            .zip(&self.rdp)
            .map(|(&a, &r)| epsilon_at_order(self.config.conversion, a, r, delta))
            .enumerate()
            .fold(
                (0, f64::INFINITY),
                |acc, (i, e)| if e < acc.1 { (i, e) } else { acc },
            );
        report.epsilon = eps.max(0.0);
        report.order = Some(self.orders[best]);
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
        let log_delta = self
            .orders
            .iter()
            .zip(&self.rdp)
            .map(|(&a, &r)| log_delta_at_order(self.config.conversion, a, r, target_epsilon))
            .fold(f64::INFINITY, f64::min);
        let delta = log_delta.exp().min(1.0);
        // Add the EpsilonDelta events' δ: 1 − (1 − δ)(1 − δ_extra).
        Ok(-((-delta).ln_1p() + (-self.extra_delta).ln_1p()).exp_m1())
    }
}
