//! What a training run is configured with: the sampler, the privacy settings (σ, clip,
//! clipping rule, δ, budget, accountant), the update rule and the normalisation.

use dp_accounting::{AccountantKind, OrderGrid};
use dp_mechanisms::band_mf::BandedToeplitz;
use dp_models::ClipRule;
use serde::{Deserialize, Serialize};

use crate::optimizer::Optimizer;
use crate::sampler::Sampler;

/// Everything a training run needs besides the model and the data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// How batches are drawn.
    pub sampler: Sampler,
    /// `None`: non-private training (no clipping, no noise, no accounting).
    pub privacy: Option<PrivacyConfig>,
    /// The update rule.
    pub optimizer: Optimizer,
    /// What the noisy sum is divided by.
    #[serde(default)]
    pub normalisation: GradientNormalisation,
}

/// What the noisy gradient sum `Σᵢ cᵢ∇ᵢ + N(0, σ²C²)` is divided by before the update.
///
/// The choice does not change the accounting event (the noisy *sum* is what the
/// Gaussian mechanism releases), but with [`GradientNormalisation::RealisedBatchSize`]
/// the update also depends on the realised Poisson batch size `|I_t|`, a count that the
/// sampled-Gaussian analysis does not cover (it is not noised). It is offered because
/// the GDP paper's code does it (`docs/reproduction/gdp.md`, "Algorithms 1 and 2"); the default is the
/// expected batch size, as in Opacus.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GradientNormalisation {
    /// Divide by the sampler's expected batch size (`qn` for Poisson): the update is a
    /// post-processing of the noisy sum alone.
    #[default]
    ExpectedBatchSize,
    /// Divide by the realised batch size `max(1, |I_t|)` (Bu, Dong, Long & Su's NoisySGD
    /// and NoisyAdam, Algorithms 1–2 as the authors' TF code implements them). Not
    /// covered by the accountant: the realised size leaks through the step length.
    RealisedBatchSize,
}

/// The private part of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrivacyConfig {
    /// σ: the noise standard deviation is σ times the clipping sensitivity.
    pub noise_multiplier: f64,
    /// The clipping norm C (flat and per-layer clipping), or AUTO-S's γ.
    pub max_grad_norm: f64,
    /// How per-example gradients are bounded.
    pub clipping: Clipping,
    /// δ at which ε is reported and the budget is enforced.
    pub delta: f64,
    /// Stop before ε would exceed this (`None`: no budget).
    pub target_epsilon: Option<f64>,
    /// The accountant used for ε and the budget.
    pub accountant: AccountantKind,
    /// Orders for the RDP accountants.
    pub orders: OrderGrid,
    /// How the noise of successive steps is related (independent unless given).
    #[serde(default)]
    pub correlation: NoiseCorrelation,
}

/// How the noise of successive releases is related.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoiseCorrelation {
    /// Fresh noise `N(0, σ²C²I)` at every step: DP-SGD.
    #[default]
    Independent,
    /// BandMF (DP-FTRL with a banded matrix factorization; Choquette-Choo et al., NeurIPS
    /// 2023): step t adds `x_t = (C⁻¹z)_t` for the banded Toeplitz strategy C and fresh
    /// `z_t ~ N(0, σ²C²‖c‖²I)`, so the released sums are a post-processing of `C·g + z`.
    /// Needs the cyclic Poisson sampler with at least as many groups as bands (then each
    /// record's participations are b apart and their columns of C disjoint): accounted as
    /// one `PoissonSampled(q, Gaussian(σ))` per cycle (amplified BandMF, arXiv 2306.08153,
    /// Thm 4). σ is fixed for the run.
    Banded(BandedToeplitz),
}

/// How per-example gradients are bounded before they are summed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Clipping {
    /// `gᵢ·min(1, C/‖gᵢ‖)` (Abadi et al. 2016): sensitivity C.
    Flat,
    /// Each of the L parametric layers clipped to C/√L: sensitivity C.
    PerLayer,
    /// AUTO-S (Bu et al. 2022): `gᵢ/(‖gᵢ‖ + γ)` with γ = `max_grad_norm`: sensitivity 1.
    /// (`automatic` in configurations written before the rename.)
    #[serde(alias = "automatic")]
    AutoS,
}

impl PrivacyConfig {
    /// The clipping rule these settings describe: `clipping` at `max_grad_norm`.
    pub fn clip_rule(&self) -> ClipRule {
        let c = self.max_grad_norm;
        match self.clipping {
            Clipping::Flat => ClipRule::Flat { max_grad_norm: c },
            Clipping::PerLayer => ClipRule::PerLayer { max_grad_norm: c },
            Clipping::AutoS => ClipRule::AutoS { gamma: c },
        }
    }
}
