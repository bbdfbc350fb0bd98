//! The Wide-network paper's methods as configured in its table, and how each runs on the
//! library's engine: non-private Adam and DP-SGD (Adam) with [`DpSgd`], sparse DP-SGD
//! with [`SparseDpSgd`], all on the shared embedding as a private model on word pairs.

use crate::wide::word2vec::SharedEmbedding;
use anyhow::Result;
use dp_accounting::{AccountantKind, DpEvent, OrderGrid, SamplingScheme};
use dp_mechanisms::{Mechanism, NoiseSource};
use dp_optim::{
    Algorithm, Clipping, CoordinateSelection, DpSgd, GradientNormalisation, Optimizer,
    PrivacyConfig, PrivacyEngine, Sampler, SparseDpSgd, StepReport, TrainConfig,
};
use serde::{Deserialize, Serialize};

/// Which algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum WideMethod {
    /// Adam on the mean gradient, no clipping, no noise.
    NonPrivate,
    /// DP-SGD (Adam): Σ clip_{S₁}(gᵢ) + N(0, σ²S₁² I) on every coordinate.
    DpSgd {
        /// σ > 0: the noise standard deviation over S₁.
        noise_multiplier: f64,
    },
    /// Sparse DP-SGD: select k = ⌈γp⌉ coordinates of |Σ clip_{S₁}(gᵢ)|, re-clip each
    /// example's contribution restricted to them at S₂, add N(0, σ²S₂²) there only.
    Sparse {
        /// σ > 0: the noise standard deviation over S₂.
        noise_multiplier: f64,
        /// γ ∈ (0, 1]: the fraction of coordinates selected each step (k = ⌈γp⌉).
        fraction: f64,
        /// S₂ > 0: the norm each example is re-clipped to on the selected support.
        second_clip: f64,
        /// The selection mechanism.
        selection: CoordinateSelection,
    },
}

/// What a method runs with besides the model and data: Poisson rate q, S₁, the update
/// rule, δ.
#[derive(Clone, Copy, Debug)]
pub struct WideSettings {
    /// q = b/n.
    pub sampling_rate: f64,
    /// S₁: the per-example clipping norm.
    pub clip: f64,
    /// The update rule (the paper: Adam, η = 0.001).
    pub optimizer: Optimizer,
    /// δ of the engine's ledger.
    pub delta: f64,
}

/// The algorithm a method steps with.
pub enum WideAlgorithm {
    /// Non-private or dense DP-SGD.
    Dense(DpSgd),
    /// Sparse DP-SGD.
    Sparse(SparseDpSgd),
}

impl Algorithm<SharedEmbedding> for WideAlgorithm {
    fn step(
        &mut self,
        engine: &mut PrivacyEngine<SharedEmbedding>,
        data: &crate::wide::word2vec::PairSet,
    ) -> dp_optim::Result<StepReport> {
        match self {
            WideAlgorithm::Dense(a) => a.step(engine, data),
            WideAlgorithm::Sparse(a) => a.step(engine, data),
        }
    }
}

impl WideSettings {
    /// Adam as the paper runs it (Opacus's defaults: β₁ 0.9, β₂ 0.999, ε 1e-8) at `lr`.
    pub fn adam(lr: f64) -> Optimizer {
        Optimizer::Adam {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        }
    }
}

impl WideMethod {
    /// The engine's configuration: Poisson sampling, the settings' update rule, the
    /// expected batch size as divisor for private runs
    /// (the realised one without privacy), and the Gaussian at σ over S₁ (dense) or S₂
    /// (sparse), its ledger kept by the RDP accountant the table reports with.
    pub fn config(&self, s: WideSettings) -> TrainConfig {
        let privacy = |noise_multiplier, max_grad_norm| PrivacyConfig {
            noise_multiplier,
            max_grad_norm,
            clipping: Clipping::Flat,
            delta: s.delta,
            target_epsilon: None,
            accountant: AccountantKind::RdpClassic,
            orders: OrderGrid::DpAccounting,
            correlation: Default::default(),
        };
        let (privacy, normalisation) = match *self {
            WideMethod::NonPrivate => (None, GradientNormalisation::RealisedBatchSize),
            WideMethod::DpSgd { noise_multiplier } => (
                Some(privacy(noise_multiplier, s.clip)),
                GradientNormalisation::ExpectedBatchSize,
            ),
            WideMethod::Sparse {
                noise_multiplier,
                second_clip,
                ..
            } => (
                Some(privacy(noise_multiplier, second_clip)),
                GradientNormalisation::ExpectedBatchSize,
            ),
        };
        TrainConfig {
            sampler: Sampler::Poisson {
                sampling_rate: s.sampling_rate,
            },
            privacy,
            optimizer: s.optimizer,
            normalisation,
        }
    }

    /// The algorithm stepping this method (sparse: selection from the S₁-clipped sum).
    pub fn algorithm(&self, clip: f64) -> Result<WideAlgorithm> {
        Ok(match *self {
            WideMethod::NonPrivate | WideMethod::DpSgd { .. } => WideAlgorithm::Dense(DpSgd),
            WideMethod::Sparse {
                fraction,
                selection,
                ..
            } => WideAlgorithm::Sparse(SparseDpSgd::new(clip, fraction, selection)?),
        })
    }

    /// Coordinates selected per step for `num_params` parameters (0 for dense methods).
    pub fn selected_per_step(&self, num_params: usize, clip: f64) -> Result<usize> {
        Ok(match self.algorithm(clip)? {
            WideAlgorithm::Dense(_) => 0,
            WideAlgorithm::Sparse(a) => a.selected_per_step(num_params),
        })
    }

    /// The event of one step (`None` without privacy): Poisson sampling of the Gaussian,
    /// composed with the selection for sparse methods (accounted jointly, since both
    /// read the same batch) — the event the engine charges each step.
    pub fn step_event(&self, s: WideSettings, num_params: usize) -> Result<Option<DpEvent>> {
        let scheme = SamplingScheme::Poisson {
            sampling_rate: s.sampling_rate,
        };
        let (noise_multiplier, selection) = match self.algorithm(s.clip)? {
            _ if *self == WideMethod::NonPrivate => return Ok(None),
            WideAlgorithm::Dense(_) => (self.noise_multiplier(), None),
            WideAlgorithm::Sparse(a) => (self.noise_multiplier(), Some(a.selector(num_params)?)),
        };
        let gaussian = DpEvent::gaussian(noise_multiplier);
        Ok(Some(scheme.amplify(match selection {
            None => gaussian,
            Some(selector) => DpEvent::Composed {
                events: vec![gaussian, selector.event()],
            },
        })?))
    }

    /// σ (NaN without privacy).
    pub fn noise_multiplier(&self) -> f64 {
        match *self {
            WideMethod::NonPrivate => f64::NAN,
            WideMethod::DpSgd { noise_multiplier }
            | WideMethod::Sparse {
                noise_multiplier, ..
            } => noise_multiplier,
        }
    }

    /// An engine training `model` with this method on `n` samples.
    pub fn engine(
        &self,
        model: SharedEmbedding,
        s: WideSettings,
        n: usize,
        noise: NoiseSource,
    ) -> Result<PrivacyEngine<SharedEmbedding>> {
        Ok(PrivacyEngine::new(model, self.config(s), n, noise)?)
    }
}
