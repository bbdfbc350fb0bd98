//! (ε, δ) composition theorems and amplification by subsampling.

use serde::{Deserialize, Serialize};

use crate::accountant::{
    check_target_delta, check_target_epsilon, poisson_relation, unsupported, Accountant, Guarantee,
    PrivacyReport,
};
use crate::error::{Error, Result};
use crate::event::{DpEvent, NeighbouringRelation};
use crate::ledger::Ledger;
use crate::terms::LeafTerms;
use crate::validate;

/// Basic composition (Dwork & Roth 2014, Thm 3.16): `(Σεᵢ, Σδᵢ)`.
pub fn basic_composition(guarantees: &[(f64, f64)]) -> (f64, f64) {
    guarantees
        .iter()
        .fold((0.0, 0.0), |acc, &(e, d)| (acc.0 + e, acc.1 + d))
}

/// Advanced composition of `k` (ε, δ)-DP mechanisms.
///
/// # Privacy
/// Dwork & Roth 2014, Thm 3.20: for every δ′ > 0 the k-fold adaptive composition is
/// `(√(2k ln(1/δ′))·ε + kε(e^ε − 1), kδ + δ′)`-DP.
pub fn advanced_composition(
    epsilon: f64,
    delta: f64,
    k: u64,
    delta_prime: f64,
) -> Result<(f64, f64)> {
    validate::non_negative("epsilon", epsilon)?;
    validate::unit("delta", delta)?;
    validate::open_unit("delta_prime", delta_prime)?;
    let k_f = k as f64;
    let eps =
        (2.0 * k_f * (1.0 / delta_prime).ln()).sqrt() * epsilon + k_f * epsilon * epsilon.exp_m1();
    Ok((eps, k_f * delta + delta_prime))
}

/// Which amplification-by-subsampling bound turns a per-sample (ε, δ) into a per-step
/// guarantee on the full data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Amplification {
    /// `(ln(1 + ν(e^ε − 1)), νδ)`: Li, Qardaji, Su 2012 (AsiaCCS) Thm 1; Balle, Barthe,
    /// Gaboardi 2018 (NeurIPS, arXiv 1807.01647) Thm 8, for Poisson sampling under
    /// add/remove neighbours. Tight.
    Tight,
    /// `(2νε, νδ)` for ε ≤ 1: the looser form common in 2014–2017 papers (Beimel,
    /// Brenner, Kasiviswanathan, Nissim 2014 Lemma 4.4; used by the DPD paper, per
    /// `docs/accounting.md`, "Amplification by subsampling"). Refused for ε > 1.
    Loose,
}

/// Amplifies an (ε, δ) guarantee of a mechanism run on a sample of rate ν.
pub fn amplify(epsilon: f64, delta: f64, rate: f64, bound: Amplification) -> Result<(f64, f64)> {
    validate::non_negative("epsilon", epsilon)?;
    validate::unit("delta", delta)?;
    validate::unit("sampling_rate", rate)?;
    match bound {
        Amplification::Tight => Ok(((rate * epsilon.exp_m1()).ln_1p(), rate * delta)),
        Amplification::Loose => {
            if epsilon > 1.0 {
                return Err(Error::InvalidParameter {
                    name: "epsilon",
                    value: epsilon,
                    reason: "must be <= 1 for the loose (2 nu eps) amplification bound",
                });
            }
            Ok((2.0 * rate * epsilon, rate * delta))
        }
    }
}

/// `steps` mechanisms, each (ε, δ)-DP on a sample of rate ν, composed: each is amplified
/// by `amplification`, then the k-fold composition is bounded by advanced composition
/// (Dwork & Roth 2014, Thm 3.20) with slack `delta_prime`.
///
/// Returns `(ε_tot, δ_tot)` with `δ_tot = T·ν·δ + δ′` (for the tight and the loose bound
/// alike, the amplified δ is νδ).
pub fn sampled_advanced_composition(
    epsilon: f64,
    delta: f64,
    steps: u64,
    rate: f64,
    delta_prime: f64,
    amplification: Amplification,
) -> Result<(f64, f64)> {
    let (eps_step, delta_step) = amplify(epsilon, delta, rate, amplification)?;
    advanced_composition(eps_step, delta_step, steps, delta_prime)
}

/// Which composition theorem an [`ApproxDpAccountant`] applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CompositionTheorem {
    /// Basic composition only.
    Basic,
    /// Advanced composition only (heterogeneous form).
    Advanced,
    /// The smaller of the two at each query (both are valid). Default.
    Best,
}

/// Settings of an [`ApproxDpAccountant`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApproxDpConfig {
    /// The composition theorem. Default [`CompositionTheorem::Best`].
    pub theorem: CompositionTheorem,
    /// The amplification bound for `PoissonSampled` events. Default [`Amplification::Tight`].
    pub amplification: Amplification,
    /// The neighbouring relation. Default add-or-remove-one.
    pub relation: NeighbouringRelation,
}

impl Default for ApproxDpConfig {
    fn default() -> Self {
        ApproxDpConfig {
            theorem: CompositionTheorem::Best,
            amplification: Amplification::Tight,
            relation: NeighbouringRelation::AddOrRemoveOne,
        }
    }
}

impl ApproxDpConfig {
    /// Builds the accountant.
    pub fn build(self) -> Result<ApproxDpAccountant> {
        Ok(ApproxDpAccountant {
            ledger: Ledger::new(self.relation),
            steps: Vec::new(),
            config: self,
        })
    }
}

/// Accountant for mechanisms known by their (ε, δ): basic and advanced composition.
///
/// Supported events: `EpsilonDelta`, `Laplace` (1/b-DP), `Exponential` (ε-DP),
/// `PoissonSampled` of these (amplified; add/remove only), and any
/// `SelfComposed`/`Composed` of them.
///
/// # Privacy
/// Advanced composition in its heterogeneous form (Dwork, Rothblum, Vadhan 2010, FOCS,
/// Thm III.3; Kairouz, Oh, Viswanath 2015 Thm 3.5 is tighter):
/// `ε′ = √(2 ln(1/δ′) Σ kᵢεᵢ²) + Σ kᵢεᵢ(e^{εᵢ} − 1)`, `δ = Σ kᵢδᵢ + δ′`; for identical
/// steps it is Dwork & Roth Thm 3.20. The whole δ budget left after `Σ kᵢδᵢ` is given to δ′.
#[derive(Clone, Debug)]
pub struct ApproxDpAccountant {
    config: ApproxDpConfig,
    /// (ε, δ, count) of each composed step.
    steps: Vec<(f64, f64, f64)>,
    ledger: Ledger,
}

impl ApproxDpAccountant {
    /// An accountant with the given config.
    pub fn new(config: ApproxDpConfig) -> Result<Self> {
        config.build()
    }

    fn spent_delta(&self) -> f64 {
        self.steps.iter().map(|&(_, d, c)| d * c).sum()
    }

    fn basic_epsilon(&self) -> f64 {
        self.steps.iter().map(|&(e, _, c)| e * c).sum()
    }

    /// (Σ kε², Σ kε(e^ε − 1)).
    fn advanced_terms(&self) -> (f64, f64) {
        self.steps.iter().fold((0.0, 0.0), |acc, &(e, _, c)| {
            (acc.0 + c * e * e, acc.1 + c * e * e.exp_m1())
        })
    }
}

impl LeafTerms for ApproxDpAccountant {
    type Term = (f64, f64);

    /// (ε, δ) of one occurrence of a leaf event.
    fn leaf_term(&self, event: &DpEvent) -> Result<(f64, f64)> {
        match event {
            DpEvent::EpsilonDelta { epsilon, delta } => Ok((*epsilon, *delta)),
            DpEvent::Laplace { noise_multiplier } => Ok((1.0 / noise_multiplier, 0.0)),
            DpEvent::Exponential { epsilon } => Ok((*epsilon, 0.0)),
            DpEvent::PoissonSampled {
                sampling_rate,
                event: inner,
            } => {
                poisson_relation("approx-dp", self.config.relation, event)?;
                let (eps, delta) = basic_composition(
                    &self
                        .terms(inner, 1)?
                        .iter()
                        .map(|&((e, d), c)| (e * c as f64, d * c as f64))
                        .collect::<Vec<_>>(),
                );
                let (eps, delta) = amplify(
                    eps,
                    delta.min(1.0),
                    *sampling_rate,
                    self.config.amplification,
                )
                .map_err(|e| unsupported("approx-dp", event, &e.to_string()))?;
                Ok((eps, delta))
            }
            other => Err(unsupported(
                "approx-dp",
                other,
                "it has no (epsilon, delta) description; use the rdp, pld or zcdp accountant",
            )),
        }
    }
}

impl Accountant for ApproxDpAccountant {
    fn name(&self) -> &'static str {
        "approx-dp"
    }

    fn relation(&self) -> NeighbouringRelation {
        self.config.relation
    }

    fn supports(&self, event: &DpEvent) -> Result<()> {
        self.terms(event, 1).map(drop)
    }

    fn compose(&mut self, event: &DpEvent, count: u64) -> Result<()> {
        let new_steps = self.terms(event, count)?;
        self.steps
            .extend(new_steps.into_iter().map(|((e, d), n)| (e, d, n as f64)));
        self.ledger.record(event.clone(), count);
        Ok(())
    }

    fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    fn epsilon_report(&self, target_delta: f64) -> Result<PrivacyReport> {
        check_target_delta(target_delta)?;
        let spent = self.spent_delta();
        let mut report = PrivacyReport {
            accountant: "approx-dp".to_string(),
            epsilon: f64::INFINITY,
            delta: target_delta,
            order: None,
            guarantee: Guarantee::UpperBound,
            warnings: Vec::new(),
        };
        if spent > target_delta {
            report
                .warnings
                .push(format!("the composed events already spend delta {spent}"));
            return Ok(report);
        }
        let basic = self.basic_epsilon();
        let delta_prime = target_delta - spent;
        let advanced = if delta_prime > 0.0 {
            let (sq, lin) = self.advanced_terms();
            (2.0 * (1.0 / delta_prime).ln() * sq).sqrt() + lin
        } else {
            f64::INFINITY
        };
        report.epsilon = match self.config.theorem {
            CompositionTheorem::Basic => basic,
            CompositionTheorem::Advanced => advanced,
            CompositionTheorem::Best => basic.min(advanced),
        };
        Ok(report)
    }

    fn delta(&self, target_epsilon: f64) -> Result<f64> {
        check_target_epsilon(target_epsilon)?;
        let spent = self.spent_delta();
        let basic = if self.basic_epsilon() <= target_epsilon {
            spent
        } else {
            1.0
        };
        let (sq, lin) = self.advanced_terms();
        let advanced = if sq == 0.0 {
            spent
        } else if target_epsilon > lin {
            // ε = √(2 ln(1/δ′)·sq) + lin  ⇒  δ′ = exp(−(ε − lin)²/(2 sq)).
            spent + (-(target_epsilon - lin).powi(2) / (2.0 * sq)).exp()
        } else {
            1.0
        };
        let delta = match self.config.theorem {
            CompositionTheorem::Basic => basic,
            CompositionTheorem::Advanced => advanced,
            CompositionTheorem::Best => basic.min(advanced),
        };
        Ok(delta.min(1.0))
    }
}
