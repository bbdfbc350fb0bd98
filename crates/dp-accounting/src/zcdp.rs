//! Zero-concentrated differential privacy (Bun & Steinke 2016).

use serde::{Deserialize, Serialize};

use crate::accountant::{
    check_target_delta, check_target_epsilon, unsupported, Accountant, Guarantee, PrivacyReport,
};
use crate::error::Result;
use crate::event::{DpEvent, NeighbouringRelation};
use crate::ledger::Ledger;
use crate::terms::LeafTerms;
use crate::validate;

/// How ρ-zCDP becomes (ε, δ)-DP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ZcdpConversion {
    /// Bun & Steinke 2016 (TCC, arXiv 1605.02065) Prop. 1.3:
    /// `ε = ξ + ρ + 2√(ρ ln(1/δ))`.
    Simple,
    /// Canonne, Kamath, Steinke 2020 (NeurIPS, arXiv 2004.00010) Prop. 12 / Cor. 13,
    /// applied to the RDP curve `ξ + ρα` and minimised over all real α > 1:
    /// `ε = min_α ξ + ρα + ln(1 − 1/α) − (ln δ + ln α)/(α − 1)`. Always ≤ Simple.
    Tight,
}

/// ε at δ for (ξ, ρ)-zCDP.
pub fn zcdp_to_epsilon(rho: f64, xi: f64, delta: f64, conversion: ZcdpConversion) -> Result<f64> {
    validate::non_negative("rho", rho)?;
    validate::non_negative("xi", xi)?;
    validate::open_unit("target_delta", delta)?;
    if rho == 0.0 {
        return Ok(xi);
    }
    let simple = xi + rho + 2.0 * (rho * (1.0 / delta).ln()).sqrt();
    Ok(match conversion {
        ZcdpConversion::Simple => simple,
        ZcdpConversion::Tight => {
            let eps_at = |alpha: f64| {
                xi + rho * alpha + (-1.0 / alpha).ln_1p()
                    - (delta.ln() + alpha.ln()) / (alpha - 1.0)
            };
            minimise_over_orders(eps_at).min(simple).max(0.0)
        }
    })
}

/// δ at ε for (ξ, ρ)-zCDP under the tight conversion (CKS20 Prop. 12).
fn zcdp_to_delta(rho: f64, xi: f64, epsilon: f64) -> f64 {
    if rho == 0.0 {
        return if epsilon >= xi { 0.0 } else { 1.0 };
    }
    let log_delta_at = |alpha: f64| {
        (alpha - 1.0) * (xi + rho * alpha - epsilon + (-1.0 / alpha).ln_1p()) - alpha.ln()
    };
    minimise_over_orders(log_delta_at).exp().min(1.0)
}

/// Minimum of a function of the order α > 1: a log-spaced scan of α − 1 over
/// [1e-6, 1e8], then golden-section refinement around the best point.
fn minimise_over_orders(f: impl Fn(f64) -> f64) -> f64 {
    let points: u32 = 400;
    let at = |i: f64| 1.0 + 10f64.powf(-6.0 + 14.0 * i / f64::from(points));
    let (mut best_i, mut best) = (0u32, f64::INFINITY);
    for i in 0..=points {
        let v = f(at(f64::from(i)));
        if v < best {
            best = v;
            best_i = i;
        }
    }
    let (mut a, mut b) = (
        f64::from(best_i.saturating_sub(1)),
        f64::from((best_i + 1).min(points)),
    );
    let phi = (5f64.sqrt() - 1.0) / 2.0;
    for _ in 0..100 {
        let c = b - phi * (b - a);
        let d = a + phi * (b - a);
        if f(at(c)) < f(at(d)) {
            b = d;
        } else {
            a = c;
        }
    }
    best.min(f(at(0.5 * (a + b))))
}

/// Settings of a [`ZcdpAccountant`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ZcdpConfig {
    /// The conversion to (ε, δ). Default [`ZcdpConversion::Tight`].
    pub conversion: ZcdpConversion,
    /// The neighbouring relation. Default add-or-remove-one.
    pub relation: NeighbouringRelation,
}

impl Default for ZcdpConfig {
    fn default() -> Self {
        ZcdpConfig {
            conversion: ZcdpConversion::Tight,
            relation: NeighbouringRelation::AddOrRemoveOne,
        }
    }
}

impl ZcdpConfig {
    /// Builds the accountant.
    pub fn build(self) -> Result<ZcdpAccountant> {
        Ok(ZcdpAccountant {
            ledger: Ledger::new(self.relation),
            rho: 0.0,
            xi: 0.0,
            config: self,
        })
    }
}

/// zCDP accountant: ρ (and ξ) add up under composition (Bun & Steinke 2016, Lemma 2.3).
///
/// Supported events and their ρ:
/// * `Gaussian` σ: ρ = 1/(2σ²) (Bun & Steinke 2016, Prop. 1.6);
/// * `ZCdp` (ρ, ξ) as given;
/// * `Laplace` b and `EpsilonDelta` with δ = 0: ε-DP ⇒ ρ = ε²/2 (Bun & Steinke, Prop. 1.4);
/// * `Exponential` ε: ε-bounded range ⇒ ρ = ε²/8 (Cesar & Rogers 2021, arXiv 2004.07223,
///   Lemma 3.2);
/// * `SelfComposed`/`Composed` of these.
///
/// Subsampled events are refused: zCDP has no amplification-by-subsampling theorem.
#[derive(Clone, Debug)]
pub struct ZcdpAccountant {
    config: ZcdpConfig,
    rho: f64,
    xi: f64,
    ledger: Ledger,
}

impl ZcdpAccountant {
    /// An accountant with the given config.
    pub fn new(config: ZcdpConfig) -> Result<Self> {
        config.build()
    }

    /// The composed ρ.
    pub fn rho(&self) -> f64 {
        self.rho
    }
}

impl LeafTerms for ZcdpAccountant {
    type Term = (f64, f64);

    /// (ρ, ξ) of one occurrence of a leaf event.
    fn leaf_term(&self, event: &DpEvent) -> Result<(f64, f64)> {
        let pure = |eps: f64| Ok((eps * eps / 2.0, 0.0));
        match event {
            DpEvent::Gaussian { noise_multiplier } => Ok((0.5 * noise_multiplier.powi(-2), 0.0)),
            DpEvent::ZCdp { rho, xi } => Ok((*rho, *xi)),
            DpEvent::Laplace { noise_multiplier } => pure(1.0 / noise_multiplier),
            DpEvent::EpsilonDelta { epsilon, delta } if *delta == 0.0 => pure(*epsilon),
            DpEvent::Exponential { epsilon } => Ok((epsilon * epsilon / 8.0, 0.0)),
            DpEvent::PoissonSampled { .. } | DpEvent::SampledWithoutReplacement { .. } => {
                Err(unsupported(
                    "zcdp",
                    event,
                    "zCDP has no amplification-by-subsampling theorem",
                ))
            }
            other => Err(unsupported("zcdp", other, "it has no zCDP guarantee")),
        }
    }
}

impl Accountant for ZcdpAccountant {
    fn name(&self) -> &'static str {
        "zcdp"
    }

    fn relation(&self) -> NeighbouringRelation {
        self.config.relation
    }

    fn supports(&self, event: &DpEvent) -> Result<()> {
        self.terms(event, 1).map(drop)
    }

    fn compose(&mut self, event: &DpEvent, count: u64) -> Result<()> {
        for ((rho, xi), n) in self.terms(event, count)? {
            self.rho += rho * n as f64;
            self.xi += xi * n as f64;
        }
        self.ledger.record(event.clone(), count);
        Ok(())
    }

    fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    fn epsilon_report(&self, target_delta: f64) -> Result<PrivacyReport> {
        check_target_delta(target_delta)?;
        Ok(PrivacyReport {
            accountant: "zcdp".to_string(),
            epsilon: zcdp_to_epsilon(self.rho, self.xi, target_delta, self.config.conversion)?,
            delta: target_delta,
            order: None,
            guarantee: Guarantee::UpperBound,
            warnings: Vec::new(),
        })
    }

    fn delta(&self, target_epsilon: f64) -> Result<f64> {
        check_target_epsilon(target_epsilon)?;
        Ok(match self.config.conversion {
            ZcdpConversion::Tight => zcdp_to_delta(self.rho, self.xi, target_epsilon),
            // Inverting ε = ξ + ρ + 2√(ρ ln 1/δ): δ = exp(−((ε − ξ − ρ)/2)²/ρ) for ε > ξ + ρ.
            ZcdpConversion::Simple => {
                let slack = target_epsilon - self.xi - self.rho;
                if self.rho == 0.0 {
                    if slack >= 0.0 {
                        0.0
                    } else {
                        1.0
                    }
                } else if slack <= 0.0 {
                    1.0
                } else {
                    (-(slack / 2.0).powi(2) / self.rho).exp()
                }
            }
        })
    }
}
