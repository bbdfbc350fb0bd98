//! The PLD accountant.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::mechanism::{
    connect_the_dots, epsilon_delta_pmf, Direction, Noise, SubsampledMechanism,
};
use super::pmf::LossPmf;
use super::replace_gaussian::ReplaceGaussian;
use crate::accountant::{
    check_target_delta, check_target_epsilon, poisson_relation, unsupported, Accountant, Guarantee,
    PrivacyReport,
};
use crate::error::{Error, Result};
use crate::event::{DpEvent, NeighbouringRelation, ZCDP_NOT_GAUSSIAN_PLD};
use crate::ledger::Ledger;
use crate::terms::LeafTerms;
use crate::truncated::{truncated_parts, TruncatedPoissonBound, TruncationSplit};
use crate::validate;

/// Settings of a [`PldAccountant`]; the defaults are dp_accounting's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PldConfig {
    /// Grid step of the discretised privacy loss. Default 1e-4.
    pub value_discretization_interval: f64,
    /// ln of the noise mass left outside the discretised range on each side (moved to
    /// +∞). Default −50.
    pub log_mass_truncation_bound: f64,
    /// Mass of the composed distribution that may be cut from its tails (moved to +∞).
    /// Default 1e-15.
    pub tail_mass_truncation: f64,
    /// The neighbouring relation. Default add-or-remove-one.
    pub relation: NeighbouringRelation,
    /// Which bound of a truncated Poisson sample's truncated branch is composed. Default
    /// [`TruncatedPoissonBound::Revealed`].
    #[serde(default)]
    pub truncated_poisson: TruncatedPoissonBound,
}

impl Default for PldConfig {
    fn default() -> Self {
        PldConfig {
            value_discretization_interval: 1e-4,
            log_mass_truncation_bound: -50.0,
            tail_mass_truncation: 1e-15,
            relation: NeighbouringRelation::AddOrRemoveOne,
            truncated_poisson: TruncatedPoissonBound::Revealed,
        }
    }
}

impl PldConfig {
    /// Builds the accountant after validating the settings.
    pub fn build(self) -> Result<PldAccountant> {
        validate::positive(
            "value_discretization_interval",
            self.value_discretization_interval,
        )?;
        if self.log_mass_truncation_bound.is_nan() || self.log_mass_truncation_bound >= 0.0 {
            return Err(Error::InvalidParameter {
                name: "log_mass_truncation_bound",
                value: self.log_mass_truncation_bound,
                reason: "must be < 0",
            });
        }
        if !(0.0..1e-3).contains(&self.tail_mass_truncation) {
            return Err(Error::InvalidParameter {
                name: "tail_mass_truncation",
                value: self.tail_mass_truncation,
                reason: "must be in [0, 1e-3)",
            });
        }
        let identity = LossPmf::identity(self.value_discretization_interval);
        Ok(PldAccountant {
            ledger: Ledger::new(self.relation),
            remove: identity.clone(),
            add: identity,
            leaves: Vec::new(),
            composed: OnceLock::new(),
            config: self,
        })
    }
}

/// Privacy-loss-distribution accountant (Koskela et al. 2020; Doroshenko et al. 2022;
/// dp_accounting's `PLDAccountant`).
///
/// Keeps the discretised PLD for both neighbouring directions (remove and add; they
/// differ under Poisson subsampling) and composes by FFT. ε is the larger of the two.
///
/// Supported events: `Gaussian`, `Laplace`, `PoissonSampled` of a Gaussian, a
/// composition of Gaussians (one Gaussian, Mironov, Talwar, Zhang 2019, §3) or a Laplace
/// (add/remove only), `TruncatedPoissonGaussian` (add/remove only; the mixture of
/// `crate::truncated`), `EpsilonDelta`, `Exponential` (as ε-DP), and any
/// `SelfComposed`/`Composed` of these.
///
/// `ZCdp` is refused, sampled or not, even with ξ = 0: ρ-zCDP does not imply the
/// Gaussian's privacy loss distribution (see
/// [`DpEvent::effective_gaussian_noise_multiplier`]). Account it with the RDP or zCDP
/// accountant.
///
/// # Guarantee
/// Pessimistic at every step: connect-the-dots discretisation, truncated mass moved to
/// +∞, and FFT aliasing covered by the truncation mass. The reported ε is an upper bound
/// up to floating-point rounding (≈1e-12 in δ).
///
/// # Incremental composition
/// A training run composes the same event thousands of times. Each distinct leaf's PLD is
/// built once and kept with a pending count; `compose` only adds to the count. When ε or
/// δ is asked, the kept PLD is composed with each pending leaf self-composed by its count
/// (by squaring: ⌈log₂ n⌉ FFTs, as for a `SelfComposed` event) and the result is kept, so
/// the next question costs nothing and the next step composes onto it. A run that asks ε
/// every step (a budget filter) pays one FFT composition per step; one that asks at the
/// end pays one self-composition.
#[derive(Clone, Debug)]
pub struct PldAccountant {
    config: PldConfig,
    /// The PLDs composed so far, without the pending counts of `leaves`.
    remove: LossPmf,
    add: LossPmf,
    /// Every distinct leaf seen, its (remove, add) PLDs and its count not yet composed.
    leaves: Vec<PendingLeaf>,
    /// `(remove, add)` with every pending count composed in, once asked.
    composed: OnceLock<(LossPmf, LossPmf)>,
    ledger: Ledger,
}

/// A distinct leaf, its discretised PLDs and its count not yet composed.
#[derive(Clone, Debug)]
struct PendingLeaf {
    leaf: Leaf,
    remove: LossPmf,
    add: LossPmf,
    pending: u64,
}

/// A leaf event the PLD accountant understands (its term in the walk, `terms.rs`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Leaf {
    Mechanism {
        noise: Noise,
        sampling_rate: f64,
    },
    PureOrApprox {
        epsilon: f64,
        delta: f64,
    },
    /// A truncated Poisson Gaussian: the untruncated branch and the split.
    Truncated {
        sigma: f64,
        sampling_rate: f64,
        split: TruncationSplit,
    },
}

impl PldAccountant {
    /// An accountant with the given config.
    pub fn new(config: PldConfig) -> Result<Self> {
        config.build()
    }

    /// The config.
    pub fn config(&self) -> &PldConfig {
        &self.config
    }

    /// `(remove, add)` with every pending count composed in (kept for the next question).
    fn composed(&self) -> Result<&(LossPmf, LossPmf)> {
        if let Some(done) = self.composed.get() {
            return Ok(done);
        }
        let tail = self.config.tail_mass_truncation;
        let (mut remove, mut add) = (self.remove.clone(), self.add.clone());
        for p in self.leaves.iter().filter(|p| p.pending > 0) {
            remove = remove.compose(&p.remove.self_compose(p.pending, tail)?, tail)?;
            add = add.compose(&p.add.self_compose(p.pending, tail)?, tail)?;
        }
        Ok(self.composed.get_or_init(|| (remove, add)))
    }

    /// (remove, add) discretised PLDs of one leaf.
    fn leaf_pmfs(&self, leaf: &Leaf) -> Result<(LossPmf, LossPmf)> {
        let interval = self.config.value_discretization_interval;
        match *leaf {
            Leaf::PureOrApprox { epsilon, delta } => {
                let pmf = epsilon_delta_pmf(epsilon, delta, interval)?;
                Ok((pmf.clone(), pmf))
            }
            Leaf::Truncated {
                sigma,
                sampling_rate,
                split,
            } => {
                let gaussian = |sigma, sampling_rate| Leaf::Mechanism {
                    noise: Noise::Gaussian { sigma },
                    sampling_rate,
                };
                let (remove, add) = self.leaf_pmfs(&gaussian(sigma, sampling_rate))?;
                let weight = split.truncation_probability;
                if weight == 0.0 {
                    return Ok((remove, add));
                }
                // The conditional pair needs finite noise and a positive rate; elsewhere
                // the revealed bound (valid always) handles the degenerate cases.
                let conditional = self.config.truncated_poisson
                    == TruncatedPoissonBound::Conditional
                    && split.truncated_sigma.is_finite()
                    && split.truncated_sigma > 0.0
                    && split.truncated_rate > 0.0;
                let (cut_remove, cut_add) = match conditional {
                    false => {
                        self.leaf_pmfs(&gaussian(split.truncated_sigma, split.truncated_rate))?
                    }
                    true => {
                        let pair = ReplaceGaussian {
                            sigma: split.truncated_sigma,
                            sampling_rate: split.truncated_rate,
                        };
                        let log_tail = self.config.log_mass_truncation_bound;
                        let pmf = connect_the_dots(&pair, interval, log_tail)?;
                        (pmf.clone(), pmf)
                    }
                };
                Ok((
                    remove.mixture(&cut_remove, weight)?,
                    add.mixture(&cut_add, weight)?,
                ))
            }
            Leaf::Mechanism {
                noise,
                sampling_rate,
            } => {
                let degenerate = match noise {
                    Noise::Gaussian { sigma } => sigma == 0.0,
                    Noise::Laplace { scale } => scale == 0.0,
                };
                let silent = match noise {
                    Noise::Gaussian { sigma } => sigma.is_infinite(),
                    Noise::Laplace { scale } => scale.is_infinite(),
                };
                if sampling_rate == 0.0 || silent {
                    return Ok((LossPmf::identity(interval), LossPmf::identity(interval)));
                }
                if degenerate {
                    // No noise: the drawn record is seen (loss ∞, mass q); otherwise the
                    // outputs agree (loss 0, mass 1 − q). Both pairs are post-processings
                    // of this one, and keeping the finite mass matters in a composition.
                    let leak = LossPmf {
                        interval,
                        lower: 0,
                        probs: vec![1.0 - sampling_rate],
                        infinity_mass: sampling_rate,
                    };
                    return Ok((leak.clone(), leak));
                }
                let make = |direction| {
                    let pair = SubsampledMechanism {
                        noise,
                        sampling_rate,
                        direction,
                    };
                    connect_the_dots(&pair, interval, self.config.log_mass_truncation_bound)
                };
                let remove = make(Direction::Remove)?;
                // Without sampling the two directions have the same PLD (symmetric noise).
                let add = if sampling_rate == 1.0 {
                    remove.clone()
                } else {
                    make(Direction::Add)?
                };
                Ok((remove, add))
            }
        }
    }
}

impl LeafTerms for PldAccountant {
    type Term = Leaf;

    fn leaf_term(&self, event: &DpEvent) -> Result<Leaf> {
        match event {
            DpEvent::Gaussian { noise_multiplier } => Ok(Leaf::Mechanism {
                noise: Noise::Gaussian {
                    sigma: *noise_multiplier,
                },
                sampling_rate: 1.0,
            }),
            DpEvent::Laplace { noise_multiplier } => Ok(Leaf::Mechanism {
                noise: Noise::Laplace {
                    scale: *noise_multiplier,
                },
                sampling_rate: 1.0,
            }),
            DpEvent::EpsilonDelta { epsilon, delta } => Ok(Leaf::PureOrApprox {
                epsilon: *epsilon,
                delta: *delta,
            }),
            DpEvent::Exponential { epsilon } => Ok(Leaf::PureOrApprox {
                epsilon: *epsilon,
                delta: 0.0,
            }),
            DpEvent::PoissonSampled {
                sampling_rate,
                event: inner,
            } => {
                poisson_relation("pld", self.config.relation, event)?;
                let noise = if let Some(sigma) = inner.effective_gaussian_noise_multiplier() {
                    Noise::Gaussian { sigma }
                } else if let DpEvent::Laplace { noise_multiplier } = **inner {
                    Noise::Laplace {
                        scale: noise_multiplier,
                    }
                } else if inner.contains_zcdp() {
                    return Err(unsupported("pld", event, ZCDP_NOT_GAUSSIAN_PLD));
                } else {
                    return Err(unsupported(
                        "pld",
                        event,
                        "the sampled event must be a Gaussian, a composition of Gaussians, or a Laplace",
                    ));
                };
                Ok(Leaf::Mechanism {
                    noise,
                    sampling_rate: *sampling_rate,
                })
            }
            DpEvent::TruncatedPoissonGaussian { .. } => {
                let (sigma, sampling_rate, split) =
                    truncated_parts(event, self.config.relation, "pld")?;
                let leaf = Leaf::Truncated {
                    sigma,
                    sampling_rate,
                    split,
                };
                Ok(leaf)
            }
            DpEvent::ZCdp { .. } => Err(unsupported("pld", event, ZCDP_NOT_GAUSSIAN_PLD)),
            other => Err(unsupported(
                "pld",
                other,
                "no privacy loss distribution is implemented for it",
            )),
        }
    }
}

impl Accountant for PldAccountant {
    fn name(&self) -> &'static str {
        "pld"
    }

    fn relation(&self) -> NeighbouringRelation {
        self.config.relation
    }

    fn supports(&self, event: &DpEvent) -> Result<()> {
        self.terms(event, 1).map(drop)
    }

    fn compose(&mut self, event: &DpEvent, count: u64) -> Result<()> {
        let leaves = self.terms(event, count)?;
        // Build every new leaf's PLDs first, so that a failure leaves the accountant
        // unchanged.
        let mut fresh: Vec<PendingLeaf> = Vec::new();
        for (leaf, _) in &leaves {
            let known = self.leaves.iter().chain(&fresh).any(|p| p.leaf == *leaf);
            if !known {
                let (remove, add) = self.leaf_pmfs(leaf)?;
                fresh.push(PendingLeaf {
                    leaf: *leaf,
                    remove,
                    add,
                    pending: 0,
                });
            }
        }
        // What was composed when last asked becomes the base the counts add to.
        if let Some((remove, add)) = self.composed.take() {
            self.remove = remove;
            self.add = add;
            self.leaves.iter_mut().for_each(|p| p.pending = 0);
        }
        self.leaves.extend(fresh);
        for (leaf, leaf_count) in leaves {
            if let Some(p) = self.leaves.iter_mut().find(|p| p.leaf == leaf) {
                p.pending = p.pending.saturating_add(leaf_count);
            }
        }
        self.ledger.record(event.clone(), count);
        Ok(())
    }

    fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    fn epsilon_report(&self, target_delta: f64) -> Result<PrivacyReport> {
        check_target_delta(target_delta)?;
        let (remove, add) = self.composed()?;
        let epsilon = remove.epsilon(target_delta).max(add.epsilon(target_delta));
        let mut warnings = Vec::new();
        let at_infinity = remove.infinity_mass.max(add.infinity_mass);
        if epsilon == f64::INFINITY && at_infinity > target_delta {
            warnings.push(format!(
                "the discretised PLD holds mass {at_infinity:.3e} at infinity (the tails its \
                 truncation moves there, accumulated over the composition), more than delta: \
                 the infinite epsilon is a limit of the discretisation, not of the mechanism; \
                 the RDP accountant gives a finite bound"
            ));
        }
        Ok(PrivacyReport {
            accountant: "pld".to_string(),
            epsilon,
            delta: target_delta,
            order: None,
            guarantee: Guarantee::UpperBound,
            warnings,
        })
    }

    fn delta(&self, target_epsilon: f64) -> Result<f64> {
        check_target_epsilon(target_epsilon)?;
        let (remove, add) = self.composed()?;
        Ok(remove.delta(target_epsilon).max(add.delta(target_epsilon)))
    }
}
