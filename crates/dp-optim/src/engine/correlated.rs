//! Banded correlated noise (BandMF) in the engine's release: the stream, its check
//! against the sampler, σ fixed for the run, and its place in checkpoints.
//!
//! # Privacy
//! Step t releases `g_t + x_t` with `x = C⁻¹z`, `z_t ~ N(0, σ²Δ²‖c‖²I)` (Δ the clipped
//! sum's sensitivity, C the b-banded lower-triangular Toeplitz strategy, ‖c‖ its column
//! norm): a post-processing of `C·g + z`. Under the cyclic Poisson sampler with at least
//! b groups a record's participations are at least b steps apart, so their columns of C
//! are disjoint and each has norm at most ‖c‖: the run is accounted as one
//! `PoissonSampled(q, Gaussian(σ))` per cycle (Choquette-Choo et al., "Amplified
//! banded matrix factorization", NeurIPS 2023, arXiv 2306.08153, Thm 4; the columns may
//! be adaptive in θ since C is lower triangular, Denisov et al. 2022).
//!
//! A production checkpoint holds no noise (nor the sampler's groups), so a resumed run
//! restarts the stream, draws new groups and starts a new cycle at its step: the strategy
//! becomes block-diagonal, two banded Toeplitz blocks whose columns are truncations of c
//! — still b-banded, lower triangular, column norms ≤ ‖c‖ — and within the new block each
//! record's participations are again b apart under its new group, while no column of the
//! new block meets one of the old: the same theorem covers the run (the noise is less
//! correlated across the restart, never less private). A seeded run's checkpoint keeps
//! the last b − 1 noise vectors (predictable from the seed anyway) and resumes the
//! uninterrupted stream. σ cannot change during a run: a participation's column spans b
//! rows of z, which would not share one σ.

use dp_mechanisms::band_mf::CorrelatedNoise;
use dp_models::PrivateModel;

use super::device::Gradient;
use super::step::step_mechanism;
use super::PrivacyEngine;
use crate::config::{NoiseCorrelation, PrivacyConfig};
use crate::error::{Error, Result};
use crate::sampler::Sampler;

impl<M: PrivateModel> PrivacyEngine<M> {
    /// The noise stream of a run with banded noise (`None` for independent noise),
    /// refused unless the sampler is cyclic Poisson with at least as many groups as the
    /// strategy has bands.
    pub(super) fn correlated_stream(
        p: &PrivacyConfig,
        sampler: Sampler,
        n: usize,
    ) -> Result<Option<CorrelatedNoise>> {
        let NoiseCorrelation::Banded(strategy) = &p.correlation else {
            return Ok(None);
        };
        let groups = match sampler {
            Sampler::CyclicPoisson { groups, .. } => groups,
            _ => 0,
        };
        if groups < strategy.bands() {
            return Err(Error::InvalidSetting {
                name: "correlation",
                value: format!("{} bands", strategy.bands()),
                reason: format!(
                    "banded noise needs the cyclic Poisson sampler with at least {} groups \
                     (each record's participations that many steps apart); the sampler is \
                     {sampler:?}",
                    strategy.bands()
                ),
            });
        }
        let std = step_mechanism(p, &sampler.scheme(n))?.std_dev() * strategy.column_norm();
        Ok(Some(CorrelatedNoise::new(strategy.clone(), std)))
    }

    /// Adds the next correlated noise vector to `sum` (the stream moves on).
    pub(super) fn add_correlated(&mut self, sum: &mut Gradient) -> Result<()> {
        let Some(stream) = &mut self.correlated else {
            return Err(Error::UnprotectedParameter(
                "no correlated noise stream".into(),
            ));
        };
        let mut x = vec![0.0f64; sum.len()];
        stream.add_next(&mut self.noise, &mut x);
        let x: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        sum.add_flat(&x)
    }

    /// Refuses a new σ in a run with banded noise.
    pub(super) fn check_fixed_sigma(&self, requested: f64) -> Result<()> {
        match (&self.correlated, &self.config.privacy) {
            (Some(_), Some(p)) if p.noise_multiplier != requested => Err(Error::InvalidSetting {
                name: "noise_multiplier",
                value: requested.to_string(),
                reason: format!(
                    "is fixed at {} in a run with banded correlated noise (a \
                         participation's noise spans b steps, which must share one σ)",
                    p.noise_multiplier
                ),
            }),
            _ => Ok(()),
        }
    }

    /// The stream's last noise vectors for a seeded run's checkpoint (`None` otherwise).
    pub(super) fn correlated_history(&self) -> Option<Vec<Vec<f64>>> {
        let stream = self.correlated.as_ref()?;
        self.noise
            .is_reproducible()
            .then(|| stream.history().to_vec())
    }

    /// Continues the stream from a seeded checkpoint's history, or restarts it (module
    /// docs) when the checkpoint holds none.
    pub(super) fn restore_correlated(&mut self, history: Option<&Vec<Vec<f64>>>) -> Result<()> {
        let Some(stream) = &self.correlated else {
            return match history {
                Some(_) => Err(Error::Checkpoint {
                    path: "(in memory)".into(),
                    reason:
                        "the checkpoint holds correlated noise but the run adds independent noise"
                            .into(),
                }),
                None => Ok(()),
            };
        };
        let (strategy, std) = (stream.strategy().clone(), stream.std());
        let history = history.cloned().unwrap_or_default();
        if history.iter().any(|h| h.len() != self.model.num_params()) {
            return Err(Error::Checkpoint {
                path: "(in memory)".into(),
                reason: "the correlated noise does not fit the model's parameters".into(),
            });
        }
        self.correlated = Some(CorrelatedNoise::with_history(strategy, std, history)?);
        Ok(())
    }
}
