//! The entry point for training one's own model privately, in the spirit of Opacus's
//! `make_private` / `make_private_with_epsilon`: a model, its training data and a few
//! settings in; a DP-SGD run with its engine, ledger and budget out.

use dp_accounting::{calibrate_noise, AccountantKind, Calibrated, CalibrationOptions, OrderGrid};
use dp_mechanisms::NoiseSource;
use dp_models::{PrivateModel, TrainingData};

use crate::algorithm::DpSgd;
use crate::band_mf::BandMf;
use crate::config::{
    Clipping, GradientNormalisation, NoiseCorrelation, PrivacyConfig, TrainConfig,
};
use crate::engine::PrivacyEngine;
use crate::error::Result;
use crate::optimizer::Optimizer;
use crate::sampler::Sampler;
use crate::trainer::{FitOutcome, Observer, Trainer};
use dp_accounting::validate;

/// What sets the noise of a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Noise {
    /// A given noise multiplier σ (Opacus's `make_private`); ε is whatever the run costs.
    Multiplier(f64),
    /// The smallest σ whose run of `epochs` meets this ε at δ (Opacus's
    /// `make_private_with_epsilon`), enforced as the run's budget on the ledger.
    TargetEpsilon(f64),
}

/// The settings of a DP-SGD run on one's own model.
#[derive(Clone, Debug, PartialEq)]
pub struct PrivateSettings {
    /// The expected batch size: each example joins each batch independently with
    /// probability `batch_size / N` (Poisson sampling, the sampling the accounting assumes).
    /// Default 256.
    pub batch_size: usize,
    /// Epochs of `N / batch_size` steps. Default 1.
    pub epochs: usize,
    /// The clipping norm C. Default 1.
    pub max_grad_norm: f64,
    /// Flat (default) or per-layer clipping.
    pub clipping: Clipping,
    /// σ, or the target ε it is calibrated to. Default: a target of ε = 8.
    pub noise: Noise,
    /// δ (Opacus's `target_delta`); a common choice is below 1/N. Default 1e-5.
    pub delta: f64,
    /// The update rule. Default: SGD at η = 0.1, no momentum.
    pub optimizer: Optimizer,
    /// The accountant for ε, the calibration and the budget (default PLD, the tightest).
    pub accountant: AccountantKind,
    /// 1 (default): DP-SGD, independent noise at every step. b > 1: BandMF with b bands
    /// ([`BandMf`]): the records in b groups sampled in turn at rate `batch_size · b / N`
    /// (so the expected batch is unchanged), the noise correlated by a strategy
    /// optimised for the run's length, one charge per cycle of b steps.
    pub bands: usize,
}

impl Default for PrivateSettings {
    /// By default: batches of 256 for 1 epoch, flat clipping at C = 1, a budget of ε = 8
    /// at δ = 1e-5 (σ calibrated to it), SGD at η = 0.1 without momentum, the PLD
    /// accountant, independent noise (DP-SGD). Set at least what your run needs: δ below
    /// 1/N, the budget you mean to spend, the optimiser your model trains with.
    fn default() -> Self {
        PrivateSettings {
            batch_size: 256,
            epochs: 1,
            max_grad_norm: 1.0,
            clipping: Clipping::Flat,
            noise: Noise::TargetEpsilon(8.0),
            delta: 1e-5,
            optimizer: Optimizer::Sgd {
                lr: 0.1,
                momentum: 0.0,
            },
            accountant: AccountantKind::Pld,
            bands: 1,
        }
    }
}

/// A DP-SGD run made by [`make_private`]: its engine (ledger, budget, checkpoints) and
/// its length.
pub struct PrivateTraining<M: PrivateModel> {
    engine: PrivacyEngine<M>,
    total_steps: u64,
    steps_per_epoch: u64,
}

/// Makes `model` trainable with DP-SGD on `train` under `settings`: Poisson sampling at
/// rate `batch_size / N`, per-example clipping at C, Gaussian noise σC on each sum, and
/// the accountant's ledger (with the budget enforced on it when the noise is set by a
/// target ε). The model is any [`PrivateModel`]: one of this workspace's classifiers, or
/// one's own Candle network through [`dp_models::nn::PrivateNet`].
///
/// ```
/// use candle_core::{Device, Module, Tensor};
/// use candle_nn::VarMap;
/// use dp_mechanisms::NoiseSource;
/// use dp_models::nn::{self, loss, DpVarBuilder, PrivateNet, Taps};
/// use dp_models::TrainingData;
/// use dp_optim::{make_private, Noise, Optimizer, PrivateSettings};
///
/// /// 100 rows of 2 features with float targets.
/// struct Rows(Tensor, Tensor);
/// impl TrainingData for Rows {
///     fn len(&self) -> usize { self.0.dims()[0] }
///     fn validate(&self) -> dp_models::Result<()> { Ok(()) }
///     fn digest(&self) -> String { "rows".into() }
/// }
///
/// # fn main() -> dp_optim::Result<()> {
/// let device = Device::Cpu;
/// let x = Tensor::randn(0f32, 1.0, (100, 2), &device)?;
/// let data = Rows(x.clone(), (x.narrow(1, 0, 1)? * 3.0)?);
/// let (varmap, taps) = (VarMap::new(), Taps::new());
/// let fc = nn::linear(2, 1, DpVarBuilder::from_varmap(&varmap, &taps, &device).pp("fc"))?;
/// let net = PrivateNet::new(&varmap, &taps, &device, |d: &Rows, batch: &[usize]| {
///     let idx = Tensor::from_vec(batch.iter().map(|&i| i as u32).collect(), batch.len(), &Device::Cpu)?;
///     Ok(loss::mse(&fc.forward(&d.0.index_select(&idx, 0)?)?, &d.1.index_select(&idx, 0)?)?)
/// })?;
/// let sgd = Optimizer::Sgd { lr: 0.1, momentum: 0.9 };
/// let settings = PrivateSettings {
///     batch_size: 10,
///     epochs: 2,
///     delta: 1e-3,
///     optimizer: sgd,
///     ..PrivateSettings::default() // flat clipping at C = 1, a budget of ε = 8
/// };
/// let mut training = make_private(net, &data, &settings, NoiseSource::seeded(1))?;
/// training.fit(&data, &mut ())?;
/// assert!(training.engine().epsilon()?.unwrap() <= 8.0);
/// # Ok(()) }
/// ```
pub fn make_private<M: PrivateModel>(
    model: M,
    train: &M::Data,
    settings: &PrivateSettings,
    noise: NoiseSource,
) -> Result<PrivateTraining<M>> {
    let n = train.len();
    validate::at_least_one("batch_size", settings.batch_size)?;
    validate::at_least_one("epochs", settings.epochs)?;
    validate::at_least_one("bands", settings.bands)?;
    let sampler = match settings.bands {
        1 => Sampler::Poisson {
            sampling_rate: settings.batch_size as f64 / n.max(1) as f64,
        },
        bands => BandMf::sampler(settings.batch_size, bands, n)?,
    };
    sampler.validate(n)?;
    let steps_per_epoch = sampler.steps_per_epoch(n) as u64;
    let total_steps = steps_per_epoch * settings.epochs as u64;
    let orders = OrderGrid::Opacus;
    let (noise_multiplier, target_epsilon) = match settings.noise {
        Noise::Multiplier(sigma) => (sigma, None),
        Noise::TargetEpsilon(target) => {
            let solved = noise_multiplier_for(
                target,
                settings.delta,
                sampler,
                n,
                total_steps,
                settings.accountant,
                &orders,
            )?;
            (solved.value, Some(target))
        }
    };
    let config = TrainConfig {
        sampler,
        privacy: Some(PrivacyConfig {
            noise_multiplier,
            max_grad_norm: settings.max_grad_norm,
            clipping: settings.clipping,
            delta: settings.delta,
            target_epsilon,
            accountant: settings.accountant,
            orders,
            correlation: match settings.bands {
                1 => NoiseCorrelation::Independent,
                bands => NoiseCorrelation::Banded(BandMf::strategy(total_steps, bands)?),
            },
        }),
        optimizer: settings.optimizer,
        normalisation: GradientNormalisation::ExpectedBatchSize,
    };
    Ok(PrivateTraining {
        engine: PrivacyEngine::new(model, config, n, noise)?,
        total_steps,
        steps_per_epoch,
    })
}

/// The smallest noise multiplier (relative tolerance 1e-4, never overshooting) with which
/// `steps` steps of DP-SGD under `sampler` on `n` records meet `target_epsilon` at `delta`
/// by `accountant`.
pub fn noise_multiplier_for(
    target_epsilon: f64,
    delta: f64,
    sampler: Sampler,
    n: usize,
    steps: u64,
    accountant: AccountantKind,
    orders: &OrderGrid,
) -> Result<Calibrated<f64>> {
    let scheme = sampler.scheme(n);
    let make = || accountant.build(scheme.relation(), orders);
    let event = |sigma: f64| scheme.gaussian_run_event(sigma, steps);
    let options = CalibrationOptions {
        relative_tolerance: 1e-4,
        ..CalibrationOptions::default()
    };
    Ok(calibrate_noise(
        make,
        event,
        target_epsilon,
        delta,
        options,
    )?)
}

impl<M: PrivateModel> PrivateTraining<M> {
    /// Trains for the configured epochs (or until the budget refuses a step), calling
    /// `observer` after each step and epoch.
    pub fn fit<O: Observer<M, DpSgd>>(
        &mut self,
        train: &M::Data,
        observer: &mut O,
    ) -> Result<FitOutcome> {
        let trainer = Trainer {
            total_steps: self.total_steps,
            steps_per_epoch: self.steps_per_epoch,
            checkpoints: None,
            schedule: None,
        };
        trainer.fit(&mut self.engine, &mut DpSgd, train, observer)
    }

    /// The engine: ε, the ledger, the model, checkpoints.
    pub fn engine(&self) -> &PrivacyEngine<M> {
        &self.engine
    }

    /// The engine, mutably (learning rate, physical batch size, …).
    pub fn engine_mut(&mut self) -> &mut PrivacyEngine<M> {
        &mut self.engine
    }

    /// The noise multiplier the run uses (calibrated, or as given).
    pub fn noise_multiplier(&self) -> f64 {
        self.engine
            .config()
            .privacy
            .as_ref()
            .map_or(0.0, |p| p.noise_multiplier)
    }

    /// The run's length in steps.
    pub fn total_steps(&self) -> u64 {
        self.total_steps
    }

    /// The engine, for what follows training.
    pub fn into_engine(self) -> PrivacyEngine<M> {
        self.engine
    }
}
