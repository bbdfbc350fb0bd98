//! Privacy events: what a mechanism did, as data.
//!
//! # Naming legend
//! The same words are used in fields, CLI flags and JSON keys across the workspace:
//! `sampling_rate` q, `noise_multiplier` σ (noise standard deviation divided by the
//! L2 sensitivity), `orders` α (Rényi orders), `steps`, `target_delta` δ,
//! `target_epsilon` ε, `rho` ρ (zCDP).
//!
//! Events never know accountants: an accountant interprets an event tree, and refuses
//! (with [`Error::Unsupported`](crate::Error::Unsupported)) what it cannot account for.
//!
//! **Contract.** Events are data that outlive this code: ledgers in checkpoints and in
//! committed results are replayed into fresh accountants (`ledger.rs`, `replay.rs`). So a
//! variant or field is never removed and its meaning never changed — a new analysis is a
//! new variant — and every event read back is validated ([`DpEvent::validate`]).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::validate;

/// Why the GDP accountant refuses `ZCdp` (see
/// [`DpEvent::effective_gaussian_noise_multiplier`]).
pub(crate) const ZCDP_NOT_GDP: &str = "rho-zCDP does not imply GDP: it bounds Renyi divergences only (Bun & Steinke 2016, Def. 1.1), and e.g. randomized response with epsilon = sqrt(2 rho) is rho-zCDP with a larger delta(epsilon) than the Gaussian with sigma = 1/sqrt(2 rho)";

/// Why the PLD accountant refuses `ZCdp`, sampled or not.
pub(crate) const ZCDP_NOT_GAUSSIAN_PLD: &str = "rho-zCDP does not imply a Gaussian privacy loss distribution: it bounds Renyi divergences only (Bun & Steinke 2016, Def. 1.1), and e.g. randomized response with epsilon = sqrt(2 rho) is rho-zCDP with a larger delta(epsilon) than the Gaussian with sigma = 1/sqrt(2 rho)";

/// Which datasets count as neighbours. An accountant is constructed with one; it is never
/// implied.
///
/// The noise multiplier of a Gaussian event is always relative to the sensitivity *under
/// this relation*: a clipped-gradient sum with clip norm C has sensitivity C under
/// add/remove and 2C under replace-one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NeighbouringRelation {
    /// D′ is D with one record added or removed (Opacus, TF Privacy, dp_accounting default).
    AddOrRemoveOne,
    /// D′ is D with one record replaced (the dataset size is public).
    ReplaceOne,
}

impl fmt::Display for NeighbouringRelation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NeighbouringRelation::AddOrRemoveOne => "add-or-remove-one",
            NeighbouringRelation::ReplaceOne => "replace-one",
        })
    }
}

/// A differentially private computation, described as data (in the spirit of
/// dp_accounting's `DpEvent`).
///
/// Variants are never removed and their meaning never changes; new mechanisms (the
/// selection events of `dp-mechanisms`: sparse vector, report-noisy-max, top-k) get new
/// variants, which is why the enum is `#[non_exhaustive]`.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DpEvent {
    /// Nothing private happened.
    NoOp,
    /// The Gaussian mechanism: a query of L2 sensitivity Δ released with `N(0, (σΔ)²)`
    /// noise per coordinate, `σ = noise_multiplier`.
    Gaussian {
        /// σ, the noise standard deviation divided by the sensitivity.
        noise_multiplier: f64,
    },
    /// The Laplace mechanism: a query of L1 sensitivity Δ released with `Lap(bΔ)` noise,
    /// `b = noise_multiplier`; it is (1/b)-DP.
    Laplace {
        /// b, the Laplace scale divided by the sensitivity.
        noise_multiplier: f64,
    },
    /// `event` run on a Poisson sample: each record is included independently with
    /// probability `sampling_rate`. Amplification theorems assume add/remove neighbours.
    PoissonSampled {
        /// q, the inclusion probability of each record.
        sampling_rate: f64,
        /// The mechanism applied to the sample.
        event: Box<DpEvent>,
    },
    /// `event` run on a uniformly random subset of exactly `sample_size` records out of
    /// `source_dataset_size` (sampling without replacement; replace-one neighbours).
    SampledWithoutReplacement {
        /// n, the size of the dataset sampled from.
        source_dataset_size: u64,
        /// m, the size of each sample.
        sample_size: u64,
        /// The mechanism applied to the sample.
        event: Box<DpEvent>,
    },
    /// The Gaussian mechanism on a truncated Poisson sample: each of `dataset_size`
    /// records is drawn independently with probability `sampling_rate`, and a draw of
    /// more than `max_batch_size` records is cut to a uniformly random `max_batch_size`
    /// of them (a fixed-size batch for compiled steps; dp_accounting 0.6's
    /// `TruncatedSubsampledGaussianDpEvent`, arXiv 2508.15089). Add/remove neighbours;
    /// `dataset_size` is the larger neighbour's size (a run on N records states N + 1
    /// to cover a record added to it; the bound is not monotone in it, so state exactly
    /// that).
    TruncatedPoissonGaussian {
        /// N, the number of records drawn from.
        dataset_size: u64,
        /// q, the inclusion probability of each record before the cut.
        sampling_rate: f64,
        /// B, the most records a batch keeps.
        max_batch_size: u64,
        /// σ, the noise standard deviation divided by the clip norm.
        noise_multiplier: f64,
    },
    /// `event` repeated `count` times (adaptively).
    SelfComposed {
        /// The repeated event.
        event: Box<DpEvent>,
        /// How many times it is repeated.
        count: u64,
    },
    /// Several events run one after another (adaptively).
    Composed {
        /// The events, in order.
        events: Vec<DpEvent>,
    },
    /// A mechanism satisfying (ξ, ρ)-zCDP: `D_α ≤ ξ + ρα` for all α > 1
    /// (Bun & Steinke 2016, Def. 1.1).
    ZCdp {
        /// ρ, the slope of the Rényi divergence bound in α (ρ ≥ 0).
        rho: f64,
        /// ξ (0 for plain ρ-zCDP).
        #[serde(default)]
        xi: f64,
    },
    /// A mechanism known only to be (ε, δ)-DP.
    EpsilonDelta {
        /// The mechanism's ε (≥ 0).
        epsilon: f64,
        /// The mechanism's δ, in [0, 1).
        delta: f64,
    },
    /// The exponential mechanism (or any ε-bounded-range mechanism) with privacy
    /// parameter ε: it is ε-DP and, being ε-bounded range, has the tighter RDP curve of
    /// Cesar & Rogers 2021 (arXiv 2004.07223, §3).
    Exponential {
        /// The mechanism's ε: it is ε-DP and ε-bounded range (> 0).
        epsilon: f64,
    },
}

impl DpEvent {
    /// A Gaussian mechanism with noise multiplier σ.
    pub fn gaussian(noise_multiplier: f64) -> Self {
        DpEvent::Gaussian { noise_multiplier }
    }

    /// A Laplace mechanism with noise multiplier b.
    pub fn laplace(noise_multiplier: f64) -> Self {
        DpEvent::Laplace { noise_multiplier }
    }

    /// `event` on a Poisson sample with rate q.
    pub fn poisson_sampled(sampling_rate: f64, event: DpEvent) -> Self {
        DpEvent::PoissonSampled {
            sampling_rate,
            event: Box::new(event),
        }
    }

    /// `event` on a uniform sample of `sample_size` out of `source_dataset_size`.
    pub fn sampled_without_replacement(
        source_dataset_size: u64,
        sample_size: u64,
        event: DpEvent,
    ) -> Self {
        DpEvent::SampledWithoutReplacement {
            source_dataset_size,
            sample_size,
            event: Box::new(event),
        }
    }

    /// `event` repeated `count` times.
    pub fn self_composed(event: DpEvent, count: u64) -> Self {
        DpEvent::SelfComposed {
            event: Box::new(event),
            count,
        }
    }

    /// ρ-zCDP (ξ = 0).
    pub fn zcdp(rho: f64) -> Self {
        DpEvent::ZCdp { rho, xi: 0.0 }
    }

    /// DP-SGD: `steps` Poisson-sampled Gaussian steps with rate q and noise multiplier σ.
    pub fn dp_sgd(sampling_rate: f64, noise_multiplier: f64, steps: u64) -> Self {
        Self::self_composed(
            Self::poisson_sampled(sampling_rate, Self::gaussian(noise_multiplier)),
            steps,
        )
    }

    /// The noise multiplier of the single Gaussian mechanism equivalent to this event, if
    /// it is a Gaussian or a composition of Gaussians: `σ_eff = (Σ σᵢ⁻²)^{-1/2}` (Mironov,
    /// Talwar, Zhang 2019, arXiv 1908.10530 §3: Gaussian queries on the same data compose
    /// into one Gaussian query).
    ///
    /// A `ZCdp` event is *not* Gaussian-equivalent, even with ξ = 0: ρ-zCDP bounds the
    /// Rényi divergences `D_α ≤ ρα` only (Bun & Steinke 2016, Def. 1.1), which the
    /// Gaussian with σ = 1/√(2ρ) meets with equality but other mechanisms meet with a
    /// different privacy loss distribution. Randomized response with ε = √(2ρ) is
    /// ρ-zCDP (Bun & Steinke 2016, Prop. 1.4) and has `δ(0) = tanh(ε/2)`, 0.462 at
    /// ρ = 0.5, where the Gaussian with σ = 1 has 0.383; so no rule that needs the
    /// Gaussian's trade-off curve (GDP, a PLD, the subsampled Gaussian's RDP curve) may
    /// be applied to it.
    pub fn effective_gaussian_noise_multiplier(&self) -> Option<f64> {
        fn inverse_variance(event: &DpEvent) -> Option<f64> {
            match event {
                DpEvent::Gaussian { noise_multiplier } => Some(noise_multiplier.powi(-2)),
                DpEvent::SelfComposed { event, count } => {
                    Some(inverse_variance(event)? * *count as f64)
                }
                DpEvent::Composed { events } => {
                    events.iter().map(inverse_variance).sum::<Option<f64>>()
                }
                _ => None,
            }
        }
        inverse_variance(self).map(|v| v.powf(-0.5))
    }

    /// Whether a `ZCdp` event occurs anywhere in the tree (for refusals that name it).
    pub(crate) fn contains_zcdp(&self) -> bool {
        match self {
            DpEvent::ZCdp { .. } => true,
            DpEvent::PoissonSampled { event, .. }
            | DpEvent::SampledWithoutReplacement { event, .. }
            | DpEvent::SelfComposed { event, .. } => event.contains_zcdp(),
            DpEvent::Composed { events } => events.iter().any(DpEvent::contains_zcdp),
            _ => false,
        }
    }

    /// Checks every parameter in the tree; returns the first offending one.
    pub fn validate(&self) -> Result<()> {
        match self {
            DpEvent::NoOp => Ok(()),
            // σ = 0 (no noise) is a valid event with infinite privacy loss.
            DpEvent::Gaussian { noise_multiplier } => {
                validate::non_negative("noise_multiplier", *noise_multiplier)
                    .map(drop)
                    .map_err(Into::into)
            }
            DpEvent::Laplace { noise_multiplier } => {
                validate::non_negative("noise_multiplier", *noise_multiplier)
                    .map(drop)
                    .map_err(Into::into)
            }
            DpEvent::PoissonSampled {
                sampling_rate,
                event,
            } => {
                validate::unit("sampling_rate", *sampling_rate)?;
                event.validate()
            }
            DpEvent::SampledWithoutReplacement {
                source_dataset_size,
                sample_size,
                event,
            } => {
                if *source_dataset_size == 0 || sample_size > source_dataset_size {
                    return Err(Error::InvalidParameter {
                        name: "sample_size",
                        value: *sample_size as f64,
                        reason: "must be <= source_dataset_size, which must be > 0",
                    });
                }
                event.validate()
            }
            DpEvent::TruncatedPoissonGaussian {
                dataset_size,
                sampling_rate,
                max_batch_size,
                noise_multiplier,
            } => {
                for (name, value) in [
                    ("dataset_size", *dataset_size),
                    ("max_batch_size", *max_batch_size),
                ] {
                    if value == 0 {
                        return Err(Error::InvalidParameter {
                            name,
                            value: 0.0,
                            reason: "must be > 0",
                        });
                    }
                }
                validate::unit("sampling_rate", *sampling_rate)?;
                validate::non_negative("noise_multiplier", *noise_multiplier)
                    .map(drop)
                    .map_err(Into::into)
            }
            DpEvent::SelfComposed { event, .. } => event.validate(),
            DpEvent::Composed { events } => events.iter().try_for_each(DpEvent::validate),
            DpEvent::ZCdp { rho, xi } => {
                validate::non_negative("rho", *rho)?;
                validate::non_negative("xi", *xi)
                    .map(drop)
                    .map_err(Into::into)
            }
            DpEvent::EpsilonDelta { epsilon, delta } => {
                validate::non_negative("epsilon", *epsilon)?;
                validate::unit("delta", *delta)
                    .map(drop)
                    .map_err(Into::into)
            }
            DpEvent::Exponential { epsilon } => validate::positive("epsilon", *epsilon)
                .map(drop)
                .map_err(Into::into),
        }
    }
}

impl fmt::Display for DpEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DpEvent::NoOp => f.write_str("NoOp"),
            DpEvent::Gaussian { noise_multiplier } => write!(f, "Gaussian(σ={noise_multiplier})"),
            DpEvent::Laplace { noise_multiplier } => write!(f, "Laplace(b={noise_multiplier})"),
            DpEvent::PoissonSampled {
                sampling_rate,
                event,
            } => {
                write!(f, "PoissonSampled(q={sampling_rate}, {event})")
            }
            DpEvent::SampledWithoutReplacement {
                source_dataset_size,
                sample_size,
                event,
            } => {
                write!(
                    f,
                    "SampledWithoutReplacement(n={source_dataset_size}, m={sample_size}, {event})"
                )
            }
            DpEvent::TruncatedPoissonGaussian {
                dataset_size,
                sampling_rate,
                max_batch_size,
                noise_multiplier,
            } => write!(
                f,
                "TruncatedPoisson(N={dataset_size}, q={sampling_rate}, B≤{max_batch_size}, Gaussian(σ={noise_multiplier}))"
            ),
            DpEvent::SelfComposed { event, count } => write!(f, "{event} × {count}"),
            DpEvent::Composed { events } => {
                f.write_str("Composed[")?;
                for (i, e) in events.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{e}")?;
                }
                f.write_str("]")
            }
            DpEvent::ZCdp { rho, xi } => write!(f, "zCDP(ρ={rho}, ξ={xi})"),
            DpEvent::EpsilonDelta { epsilon, delta } => write!(f, "({epsilon}, {delta})-DP"),
            DpEvent::Exponential { epsilon } => write!(f, "Exponential(ε={epsilon})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_json() -> Result<(), serde_json::Error> {
        let event = DpEvent::Composed {
            events: vec![
                DpEvent::dp_sgd(0.01, 1.1, 100),
                DpEvent::sampled_without_replacement(100, 10, DpEvent::gaussian(2.0)),
                DpEvent::zcdp(0.5),
                DpEvent::EpsilonDelta {
                    epsilon: 1.0,
                    delta: 1e-6,
                },
                DpEvent::Exponential { epsilon: 0.1 },
                DpEvent::laplace(3.0),
                DpEvent::TruncatedPoissonGaussian {
                    dataset_size: 60_001,
                    sampling_rate: 0.004,
                    max_batch_size: 300,
                    noise_multiplier: 1.1,
                },
                DpEvent::NoOp,
            ],
        };
        let json = serde_json::to_string(&event)?;
        assert!(json.contains("\"type\":\"poisson_sampled\""));
        let back: DpEvent = serde_json::from_str(&json)?;
        assert_eq!(back, event);
        Ok(())
    }

    #[test]
    fn validation_finds_nested_bad_parameters() {
        let bad = DpEvent::dp_sgd(1.5, 1.0, 10);
        assert!(matches!(
            bad.validate(),
            Err(Error::InvalidParameter {
                name: "sampling_rate",
                ..
            })
        ));
        let nan = DpEvent::dp_sgd(0.5, f64::NAN, 10);
        assert!(nan.validate().is_err());
        assert!(DpEvent::dp_sgd(0.5, 1.0, 10).validate().is_ok());
    }
}
