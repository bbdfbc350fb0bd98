//! BandMF on the engine: DP-FTRL with a banded matrix factorization (Choquette-Choo et
//! al., ICML 2023; amplified: NeurIPS 2023), i.e. DP-SGD whose noise is correlated across
//! steps by a banded Toeplitz strategy. The engine adds the noise and charges the
//! amplified event (`engine/correlated.rs`); this module builds the run's configuration
//! and refuses to step a run that is not configured for it.

use dp_mechanisms::band_mf::BandedToeplitz;
use dp_models::PrivateModel;

use crate::algorithm::Algorithm;
use crate::config::{NoiseCorrelation, TrainConfig};
use crate::engine::{PrivacyEngine, StepReport};
use crate::error::{Error, Result};
use crate::sampler::Sampler;

/// BandMF: DP-SGD's step, with the engine's banded correlated noise. A run is set up by
/// [`BandMf::configure`] (or `make_private` with `bands > 1`, or `dp train --mechanism
/// band-mf`); stepping an engine whose noise is independent is refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BandMf;

impl BandMf {
    /// The gradient steps of the strategy's optimiser (enough to reach jax_privacy's
    /// optimum within 0.1% in the 12 settings of `crates/dp-mechanisms/tests/band_mf.rs`).
    pub const STRATEGY_ITERATIONS: usize = 500;

    /// The strategy of a run of `steps` steps: `bands` bands minimising the prefix-sum
    /// error (McKenna 2024's objective; `BandedToeplitz::optimize`), unit column norm.
    pub fn strategy(steps: u64, bands: usize) -> Result<BandedToeplitz> {
        let steps = usize::try_from(steps).map_err(|_| Error::InvalidParameter {
            name: "steps",
            value: steps as f64,
            reason: "too many steps for a strategy",
        })?;
        Ok(BandedToeplitz::optimize(
            steps,
            bands,
            Self::STRATEGY_ITERATIONS,
        )?)
    }

    /// The cyclic Poisson sampler over `bands` groups of `n` records whose steps take
    /// `batch_size` records in expectation: rate `batch_size · bands / n` within a group
    /// (refused above 1: the groups are too small for that batch).
    pub fn sampler(batch_size: usize, bands: usize, n: usize) -> Result<Sampler> {
        let sampler = Sampler::CyclicPoisson {
            groups: bands,
            sampling_rate: (batch_size * bands) as f64 / n.max(1) as f64,
        };
        sampler.validate(n)?;
        Ok(sampler)
    }

    /// `config` made a BandMF run of `steps` steps with `bands` bands on `n` records:
    /// the cyclic sampler at the same expected batch size, and the optimised strategy.
    /// Refused for a non-private configuration.
    pub fn configure(
        mut config: TrainConfig,
        n: usize,
        steps: u64,
        bands: usize,
    ) -> Result<TrainConfig> {
        let batch = config.sampler.expected_batch_size(n).round().max(1.0) as usize;
        let strategy = Self::strategy(steps, bands)?;
        let Some(privacy) = &mut config.privacy else {
            return Err(Error::NotPrivate {
                operation: "BandMf::configure",
            });
        };
        privacy.correlation = NoiseCorrelation::Banded(strategy);
        config.sampler = Self::sampler(batch, bands, n)?;
        Ok(config)
    }
}

impl<M: PrivateModel> Algorithm<M> for BandMf {
    fn step(&mut self, engine: &mut PrivacyEngine<M>, data: &M::Data) -> Result<StepReport> {
        let banded = engine
            .config()
            .privacy
            .as_ref()
            .is_some_and(|p| matches!(p.correlation, NoiseCorrelation::Banded(_)));
        if !banded {
            return Err(Error::InvalidSetting {
                name: "correlation",
                value: "independent".into(),
                reason: "BandMf steps an engine configured with banded noise \
                         (BandMf::configure)"
                    .into(),
            });
        }
        engine.step(data)
    }
}
