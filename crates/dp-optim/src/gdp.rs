//! NoisySGD and NoisyAdam as Bu, Dong, Long & Su run them ("Deep Learning with Gaussian
//! Differential Privacy", Harvard Data Science Review 2020, arXiv 1911.11607), with their
//! μ_CLT stop rule and σ̃ recalibration.
//!
//! Both algorithms are DP-SGD with Poisson sampling (Algorithms 1 and 2): clip each
//! per-example gradient to R, add `N(0, σ²R²)` to the sum, divide by the realised batch
//! size (the authors' TF code; see [`GradientNormalisation::RealisedBatchSize`] for why
//! that is outside the standard analysis), then take an SGD or bias-corrected Adam step.
//! Their privacy is the subsampled Gaussian's (the paper's Theorem 5 for f-DP, its CLT
//! Theorem 6 for μ; Mironov et al. 2019 for the RDP "moments accountant" baseline).

use dp_accounting::gdp::{mu_poisson, recalibrate_sigma};
use dp_accounting::{AccountantKind, OrderGrid};
use serde::{Deserialize, Serialize};

use crate::config::{Clipping, GradientNormalisation, PrivacyConfig, TrainConfig};
use crate::error::Result;
use crate::optimizer::Optimizer;
use crate::sampler::Sampler;
use dp_accounting::validate;

/// The hyper-parameters shared by NoisySGD and NoisyAdam.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct NoisyTraining {
    /// Poisson sampling rate p = B/n.
    pub sampling_rate: f64,
    /// σ > 0: the noise standard deviation over the clipping norm R.
    pub noise_multiplier: f64,
    /// The clipping norm R.
    pub clip: f64,
    /// δ at which ε is reported.
    pub delta: f64,
    /// What the noisy sum is divided by (the authors: the realised batch size).
    pub normalisation: GradientNormalisation,
}

impl NoisyTraining {
    fn config(&self, optimizer: Optimizer) -> Result<TrainConfig> {
        validate::rate("sampling_rate", self.sampling_rate)?;
        Ok(TrainConfig {
            sampler: Sampler::Poisson {
                sampling_rate: self.sampling_rate,
            },
            privacy: Some(PrivacyConfig {
                noise_multiplier: self.noise_multiplier,
                max_grad_norm: self.clip,
                clipping: Clipping::Flat,
                delta: self.delta,
                target_epsilon: None,
                // The paper's "moments accountant" baseline: TF Privacy RDP, loose
                // conversion, the authors' order grid (`docs/reproduction/gdp.md`, "Privacy accounting").
                accountant: AccountantKind::RdpClassic,
                orders: authors_orders(),
                correlation: Default::default(),
            }),
            optimizer,
            normalisation: self.normalisation,
        })
    }

    /// NoisySGD (Algorithm 1): plain SGD, no momentum, learning rate `lr`.
    pub fn noisy_sgd(&self, lr: f64) -> Result<TrainConfig> {
        self.config(Optimizer::Sgd { lr, momentum: 0.0 })
    }

    /// NoisyAdam (Algorithm 2) with TF's defaults β₁ = 0.9, β₂ = 0.999, ξ = 1e-8.
    pub fn noisy_adam(&self, lr: f64) -> Result<TrainConfig> {
        self.config(Optimizer::Adam {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        })
    }

    /// μ_CLT after `steps` steps (Poisson CLT, the paper's eq. 6): asymptotic, not a bound.
    pub fn mu_clt(&self, steps: u64) -> f64 {
        mu_poisson(self.sampling_rate, self.noise_multiplier, steps as f64)
    }
}

/// The order grid of the authors' moments-accountant baseline
/// (woodyx218/Deep-Learning-with-GDP-Tensorflow `compute_epsilon`): `1 + x/10` for x in
/// 1..=99, `12 + 0.2k` below 60 (numpy's `arange(12, 60, 0.2)` accumulates `12 + 0.2k`:
/// 240 values), then 60..=99.
pub fn authors_orders() -> OrderGrid {
    let tenths = (1..=99).map(|x| 1.0 + f64::from(x) / 10.0);
    OrderGrid::Custom(
        tenths
            .chain((0..240).map(|k| 12.0 + 0.2 * f64::from(k)))
            .chain((60..=99).map(f64::from))
            .collect(),
    )
}

/// The authors' stop rule: training ends once μ_CLT exceeds `max_mu` (2 in every script
/// of the paper's repository, `docs/reproduction/gdp.md`, "Privacy accounting"). Checked after each epoch,
/// as the scripts do, so the last epoch is the first with μ > `max_mu`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MuStopRule {
    /// The largest μ_CLT at which training continues.
    pub max_mu: f64,
}

impl MuStopRule {
    /// The authors' rule, μ > 2.
    pub const AUTHORS: MuStopRule = MuStopRule { max_mu: 2.0 };

    /// Whether training should stop after `steps` steps of `training`.
    pub fn should_stop(&self, training: &NoisyTraining, steps: u64) -> bool {
        training.mu_clt(steps) > self.max_mu
    }
}

/// σ̃ of the paper's eqs. 7–8: the smaller noise multiplier whose Poisson-CLT ε at
/// `delta` after `steps` steps equals `target_epsilon` (in the paper, the moments
/// accountant's ε for the original σ). Errors when no finite μ reaches the target.
pub fn clt_recalibrated_sigma(
    target_epsilon: f64,
    delta: f64,
    sampling_rate: f64,
    steps: u64,
) -> Result<f64> {
    Ok(recalibrate_sigma(
        target_epsilon,
        delta,
        sampling_rate,
        steps as f64,
    )?)
}

/// The GDP repository's moments-accountant baseline (`compute_epsilon`,
/// woodyx218/Deep-Learning-with-GDP-Tensorflow): the RDP of the Poisson-subsampled
/// Gaussian (Mironov, Talwar & Zhang 2019, §3.3, exact signed series) times
/// `steps = epochs·n/B` — fractional, as the authors compute it — on their order grid,
/// converted with the classic bound `ε = min_α RDP(α) + ln(1/δ)/(α − 1)` (Mironov 2017,
/// Prop. 3). Returns (ε, optimal order).
pub fn moments_accountant_epsilon(
    sampling_rate: f64,
    noise_multiplier: f64,
    steps: f64,
    delta: f64,
) -> (f64, f64) {
    let orders = authors_orders().orders();
    let rdp: Vec<f64> = orders
        .iter()
        .map(|&a| {
            steps
                * dp_accounting::rdp::curves::poisson_gaussian(
                    sampling_rate,
                    noise_multiplier,
                    a,
                    dp_accounting::FractionalSeries::Signed,
                )
        })
        .collect();
    dp_accounting::rdp::epsilon_from_rdp(&orders, &rdp, delta, dp_accounting::Conversion::Classic)
}
