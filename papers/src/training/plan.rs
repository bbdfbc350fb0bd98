//! A run's plan: the engine configuration (σ given, calibrated to a target ε, or from
//! DPD's budget), the GDP-style settings for the CLT and PLD readings, and DPD's loop.

use anyhow::{Context, Result};
use dp_accounting::{calibrate_noise, AccountantKind, CalibrationOptions, OrderGrid};
use dp_optim::dpd::{DpdBudget, DpdTraining};
use dp_optim::gdp::NoisyTraining;
use dp_optim::{BandMf, Clipping, GradientNormalisation, Optimizer, PrivacyConfig, TrainConfig};

use super::super::config::{Algorithm, ClippingChoice};
use super::Run;

/// How one run trains.
pub(super) struct Plan {
    pub config: TrainConfig,
    pub training: NoisyTraining,
    pub dpd: Option<DpdTraining>,
    pub noise_multiplier: Option<f64>,
}

impl Run<'_> {
    /// The engine config, the GDP-style settings (for the CLT and PLD readings) and, for
    /// DPD, its loop; σ given, calibrated to a target ε over `steps`, or from DPD's budget.
    pub(super) fn config(&self, n: usize, steps: u64) -> Result<Plan> {
        let t = self.table;
        let batch_size = self.run.batch_size.unwrap_or(t.batch_size);
        let lr = self.run.lr.unwrap_or(t.lr);
        let q = (batch_size as f64 / n as f64).min(1.0);
        let sampler = self.sampler(n);
        let normalisation = if t.realised_batch_normalisation {
            GradientNormalisation::RealisedBatchSize
        } else {
            GradientNormalisation::ExpectedBatchSize
        };
        let (clipping, clip) = match self.run.clipping.unwrap_or(ClippingChoice::Flat) {
            ClippingChoice::Flat => (Clipping::Flat, t.clip),
            ClippingChoice::AutoS { gamma } => (Clipping::AutoS, gamma),
        };
        let mut training = NoisyTraining {
            sampling_rate: q,
            noise_multiplier: self.run.sigma.unwrap_or(1.0),
            clip,
            delta: t.delta,
            normalisation,
        };
        let mut dpd = None;
        let mut config = match self.algorithm() {
            Algorithm::NoisySgd => training.noisy_sgd(lr)?,
            Algorithm::NoisyAdam => training.noisy_adam(lr)?,
            Algorithm::Dpd => {
                let (Some(budget), Some(settings)) = (self.run.dpd, t.dpd) else {
                    anyhow::bail!(
                        "{}: a DPD run needs the run's `dpd` budget and the table's `dpd` settings",
                        self.run.label
                    );
                };
                let schedule = self.schedule().with_context(|| {
                    format!(
                        "{}: DPD needs the table's lr_decay (Robbins-Monro steps)",
                        self.run.label
                    )
                })?;
                let calibration = DpdBudget {
                    epsilon_total: budget.epsilon_total,
                    delta_total: t.delta,
                    delta_prime: settings.delta_prime,
                    steps,
                    sampling_rate: q,
                    composition: budget.composition,
                    amplification: settings.amplification,
                    gaussian: settings.gaussian,
                }
                .calibrate()
                .with_context(|| format!("calibrating {}", self.run.label))?;
                let training_loop = DpdTraining {
                    calibration,
                    clip,
                    sampler,
                    schedule,
                    prior_precision: settings.prior_precision,
                    placement: settings.placement,
                    ledger_delta: t.delta,
                };
                training.noise_multiplier = calibration.noise_multiplier();
                dpd = Some(training_loop);
                training_loop.train_config()?
            }
            // A paper's algorithm runs on DP-SGD's configuration; its hooks add the rest.
            Algorithm::DpSgd | Algorithm::Paper(_) | Algorithm::GaussianDropout => TrainConfig {
                sampler,
                privacy: Some(PrivacyConfig {
                    noise_multiplier: training.noise_multiplier,
                    max_grad_norm: clip,
                    clipping,
                    delta: t.delta,
                    target_epsilon: None,
                    accountant: AccountantKind::RdpClassic,
                    orders: OrderGrid::Int2To64,
                    correlation: Default::default(),
                }),
                optimizer: Optimizer::Sgd {
                    lr,
                    momentum: t.momentum,
                },
                normalisation,
            },
        };
        if let (Some(bands), Some(_)) = (self.run.bands, &config.privacy) {
            config = BandMf::configure(config, n, steps, bands)
                .with_context(|| format!("{}: BandMF with {bands} bands", self.run.label))?;
        }
        if let Some(privacy) = config.privacy.as_mut() {
            privacy.clipping = clipping;
            if let Some(orders) = &t.orders {
                privacy.orders = orders.clone();
            }
            if let Some(target) = self.run.calibrate_epsilon {
                let (kind, orders) = (privacy.accountant, privacy.orders.clone());
                let scheme = config.sampler.scheme(n);
                let calibrated = calibrate_noise(
                    || kind.build(scheme.relation(), &orders),
                    |z| scheme.gaussian_run_event(z, steps),
                    target,
                    t.delta,
                    CalibrationOptions::default(),
                )?;
                privacy.noise_multiplier = calibrated.value;
                training.noise_multiplier = calibrated.value;
            }
        }
        if !self.run.is_private() {
            config.privacy = None;
        }
        let noise_multiplier = config.privacy.as_ref().map(|p| p.noise_multiplier);
        Ok(Plan {
            config,
            training,
            dpd,
            noise_multiplier,
        })
    }
}
