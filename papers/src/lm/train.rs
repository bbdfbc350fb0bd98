//! One run of the language-model table: a seeded GPT-2-style initialisation, the DP engine
//! (Poisson sampling, flat clipping through ghost norms, Gaussian noise, Adam; no privacy
//! settings for the non-private run), perplexities after every epoch, then the canaries'
//! exposures and the one-run audit.

use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::{Device, Tensor};
use candle_nn::VarMap;
use dp_accounting::{Accountant, AccountantKind, DpEvent, NeighbouringRelation, OrderGrid};
use dp_mechanisms::NoiseSource;
use dp_models::nn::{add_lora, DpVarBuilder, LoraConfig, PrivateNet, StateDict, Taps};
use dp_models::TrainingData;
use dp_optim::{
    noise_multiplier_for, Clipping, Control, DpSgd, EpochSummary, GradientNormalisation, Observer,
    Optimizer, PrivacyConfig, PrivacyEngine, Sampler, StepReport, TrainConfig, Trainer,
};
use serde::{Deserialize, Serialize};

use super::audit::{audit, AuditResult};
use super::canaries::{exposures, Exposure};
use super::corpus::LmCorpus;
use super::model::LmModel;
use super::rows::TokenRows;
use super::{LmProfile, LmRun, LmTable, LoraSpec, Start};

/// One epoch of one run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LmEpoch {
    /// 1-based.
    pub epoch: u32,
    /// Steps so far.
    pub steps: u64,
    /// Perplexity of evenly spaced training windows (private data: not covered by ε).
    pub train_perplexity: f64,
    /// Validation perplexity.
    pub validation_perplexity: f64,
    /// Test perplexity.
    pub test_perplexity: f64,
    /// ε so far (PLD, the run's ledger); `None` for the non-private run.
    pub epsilon: Option<f64>,
    /// Wall seconds so far.
    pub wall_s: f64,
}

/// A finished run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LmResult {
    /// Cache key.
    pub key: String,
    /// Label.
    pub label: String,
    /// The commit that trained it.
    pub commit: String,
    /// Trainable parameters (clipped, noised and updated).
    pub parameters: usize,
    /// Frozen parameters (the pretrained base under LoRA).
    #[serde(default)]
    pub frozen_parameters: usize,
    /// Where its weights started.
    #[serde(default)]
    pub start: Start,
    /// Its LoRA adapters, if any.
    #[serde(default)]
    pub lora: Option<LoraSpec>,
    /// Training rows N (windows and inserted canaries).
    pub records: usize,
    /// δ = 1/N^1.1.
    pub delta: f64,
    /// The target ε, if private.
    pub target_epsilon: Option<f64>,
    /// σ (0 for the non-private run).
    pub noise_multiplier: f64,
    /// Steps taken.
    pub steps: u64,
    /// ε of the steps taken: PLD (the ledger) and RDP (Opacus's orders).
    pub epsilon_pld: Option<f64>,
    /// ε by RDP.
    pub epsilon_rdp: Option<f64>,
    /// Per-epoch records.
    pub epochs: Vec<LmEpoch>,
    /// Every canary's exposure.
    pub exposures: Vec<Exposure>,
    /// The one-run audit.
    pub audit: AuditResult,
    /// Seconds in training steps (evaluations excluded).
    pub training_wall_s: f64,
    /// Expected examples per second in training: steps × batch size / training wall.
    pub samples_per_s: f64,
    /// Wall seconds of the whole run.
    pub wall_s: f64,
}

/// GPT-2's initialisation, seeded: matrices and embeddings N(0, 0.02²), biases 0 (norms
/// keep their ones and zeros).
pub(super) fn initialise(taps: &Taps, seed: u64) -> Result<()> {
    let mut rng = NoiseSource::seeded(seed);
    for p in taps.params() {
        let t = p.var.as_tensor();
        let n = t.elem_count();
        let values: Vec<f32> = if t.rank() >= 2 {
            (0..n)
                .map(|_| (0.02 * rng.standard_normal()) as f32)
                .collect()
        } else if p.name.ends_with("bias") {
            vec![0.0; n]
        } else {
            continue;
        };
        p.var
            .set(&Tensor::from_vec(values, t.shape(), t.device())?)?;
    }
    Ok(())
}

/// δ = 1/N^1.1 for `n` training rows.
pub fn delta_for(n: usize) -> f64 {
    1.0 / (n as f64).powf(1.1)
}

/// Steps of `epochs` epochs of round(N / B) Poisson steps each.
pub fn total_steps(n: usize, batch_size: usize, epochs: u32) -> u64 {
    (n as f64 / batch_size as f64).round() as u64 * u64::from(epochs)
}

/// σ calibrated by PLD (Opacus's orders for the search's RDP start) to `target` at `delta`
/// for `steps` Poisson steps of rate `batch_size / n`.
pub fn calibrated_sigma(
    target: f64,
    delta: f64,
    batch_size: usize,
    n: usize,
    steps: u64,
) -> Result<f64> {
    let sampler = Sampler::Poisson {
        sampling_rate: batch_size as f64 / n as f64,
    };
    let orders = OrderGrid::Opacus;
    let sigma = noise_multiplier_for(
        target,
        delta,
        sampler,
        n,
        steps,
        AccountantKind::Pld,
        &orders,
    )?;
    Ok(sigma.value)
}

/// The run's engine configuration: Poisson at rate B/N, Adam, and for a private run
/// flat clipping at C with σ calibrated by PLD to the target ε at δ (or the run's fixed σ).
fn train_config(
    table: &LmTable,
    run: &LmRun,
    (n, batch_size): (usize, usize),
    delta: f64,
    total_steps: u64,
) -> Result<TrainConfig> {
    let sigma = match (run.noise_multiplier, run.epsilon) {
        (Some(sigma), _) => Some(sigma),
        (None, Some(target)) => Some(calibrated_sigma(target, delta, batch_size, n, total_steps)?),
        (None, None) => None,
    };
    let privacy = sigma.map(|sigma| PrivacyConfig {
        noise_multiplier: sigma,
        max_grad_norm: table.clip,
        clipping: Clipping::Flat,
        delta,
        target_epsilon: run.epsilon.filter(|_| run.noise_multiplier.is_none()),
        accountant: AccountantKind::Pld,
        orders: OrderGrid::Opacus,
        correlation: Default::default(),
    });
    Ok(TrainConfig {
        sampler: Sampler::Poisson {
            sampling_rate: batch_size as f64 / n as f64,
        },
        privacy,
        optimizer: Optimizer::Adam {
            lr: run.lr.unwrap_or(table.lr),
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        },
        normalisation: GradientNormalisation::ExpectedBatchSize,
    })
}

/// ε by RDP (Opacus's orders) of `steps` Poisson-sampled Gaussian steps.
fn rdp_epsilon(q: f64, sigma: f64, steps: u64, delta: f64) -> Result<f64> {
    let mut a =
        AccountantKind::Rdp.build(NeighbouringRelation::AddOrRemoveOne, &OrderGrid::Opacus)?;
    a.compose(
        &DpEvent::poisson_sampled(q, DpEvent::gaussian(sigma)),
        steps,
    )?;
    Ok(a.epsilon(delta)?)
}

/// The run's starting weights: the seeded initialisation, or `pretrained` loaded by name;
/// with LoRA, adapters on every block's q and v (A seeded N(0, 1/d), B = 0) and all else
/// frozen.
fn starting_point(
    run: &LmRun,
    model: &mut LmModel,
    varmap: &VarMap,
    vb: &DpVarBuilder,
    pretrained: Option<&StateDict>,
) -> Result<()> {
    initialise(vb.taps(), 1)?;
    if run.start == Start::Pretrained {
        let weights = pretrained.context("a pretrained run without pretrained weights")?;
        weights.load_into(varmap, true)?;
    }
    if let Some(spec) = run.lora {
        let config = LoraConfig {
            rank: spec.rank,
            alpha: spec.alpha,
            keep_trainable: Vec::new(),
        };
        add_lora(model, vb, &config, |name| {
            name.ends_with(".q") || name.ends_with(".v")
        })?;
        let mut rng = NoiseSource::seeded(4);
        for p in vb.taps().params() {
            let t = p.var.as_tensor();
            if p.name.contains("lora_a") {
                let std = 1.0 / (t.dim(1)? as f64).sqrt();
                let values: Vec<f32> = (0..t.elem_count())
                    .map(|_| (std * rng.standard_normal()) as f32)
                    .collect();
                p.var
                    .set(&Tensor::from_vec(values, t.shape(), t.device())?)?;
            }
        }
    }
    Ok(())
}

/// Trains one run of `table` on `corpus` (a pretrained run from `pretrained`).
pub fn train_one(
    table: &LmTable,
    profile: &LmProfile,
    run: &LmRun,
    corpus: &LmCorpus,
    key: &str,
    pretrained: Option<&StateDict>,
) -> Result<LmResult> {
    let started = Instant::now();
    let (varmap, taps, device) = (VarMap::new(), Taps::new(), Device::Cpu);
    let vb = DpVarBuilder::from_varmap(&varmap, &taps, &device);
    let mut model = LmModel::new(profile.shape, corpus.vocab, &vb)?;
    starting_point(run, &mut model, &varmap, &vb, pretrained)?;
    let batch = table.physical_batch;
    let audit_rows = corpus.audit_format.rows(&corpus.audit.sequences)?;
    let initial_audit = model.row_losses(&audit_rows, batch)?;
    let n = corpus.train.len();
    let delta = delta_for(n);
    let batch_size = run.batch_size.unwrap_or(profile.batch_size);
    let steps_per_epoch = total_steps(n, batch_size, 1);
    let total_steps = total_steps(n, batch_size, profile.epochs);
    let config = train_config(table, run, (n, batch_size), delta, total_steps)?;
    let sigma = config.privacy.as_ref().map_or(0.0, |p| p.noise_multiplier);
    let lm = model.clone();
    let net = PrivateNet::new(
        &varmap,
        &taps,
        &device,
        move |d: &TokenRows, b: &[usize]| {
            let (x, y) = d.batch(b)?;
            Ok(lm.losses(&x, &y)?)
        },
    )?;
    let mut engine = PrivacyEngine::new(net, config, n, NoiseSource::seeded(2))?;
    engine.set_physical_batch_size(batch)?;
    let mut observer = Recorder {
        model: &model,
        corpus,
        batch,
        started,
        evaluating_s: 0.0,
        bar: crate::progress::run_bar(total_steps, &run.label)?,
        records: Vec::new(),
    };
    let trainer = Trainer {
        total_steps,
        steps_per_epoch,
        checkpoints: None,
        schedule: None,
    };
    trainer.fit(&mut engine, &mut DpSgd, &corpus.train, &mut observer)?;
    observer.bar.finish_and_clear();
    let training_wall_s = started.elapsed().as_secs_f64() - observer.evaluating_s;
    let steps = engine.steps();
    let q = batch_size as f64 / n as f64;
    let private = sigma > 0.0;
    let mut rng = NoiseSource::seeded(22);
    let sizes = &profile.sizes;
    Ok(LmResult {
        key: key.into(),
        label: run.label.clone(),
        commit: crate::provenance::git_commit(),
        parameters: taps.num_params(),
        frozen_parameters: taps
            .frozen_params()
            .iter()
            .map(|p| p.var.as_tensor().elem_count())
            .sum(),
        start: run.start,
        lora: run.lora,
        records: n,
        delta,
        target_epsilon: run.epsilon,
        noise_multiplier: sigma,
        steps,
        epsilon_pld: engine.epsilon()?,
        epsilon_rdp: if private {
            Some(rdp_epsilon(q, sigma, steps, delta)?)
        } else {
            None
        },
        epochs: observer.records,
        exposures: exposures(
            &model,
            &corpus.canary_format,
            &corpus.canaries,
            sizes.candidates,
            &mut rng,
            batch * 8,
        )?,
        audit: audit(
            &model,
            &corpus.audit_format,
            &corpus.audit,
            &initial_audit,
            &profile.audit,
            delta,
            batch * 8,
        )?,
        training_wall_s,
        samples_per_s: (steps * batch_size as u64) as f64 / training_wall_s,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

/// Perplexities and ε after every epoch; a progress bar.
struct Recorder<'a> {
    model: &'a LmModel,
    corpus: &'a LmCorpus,
    batch: usize,
    started: Instant,
    evaluating_s: f64,
    bar: indicatif::ProgressBar,
    records: Vec<LmEpoch>,
}

impl<M: dp_models::PrivateModel> Observer<M, DpSgd> for Recorder<'_> {
    fn step_done(
        &mut self,
        _: &PrivacyEngine<M>,
        _: &DpSgd,
        _: &StepReport,
    ) -> dp_optim::Result<Control> {
        self.bar.inc(1);
        Ok(Control::Continue)
    }

    fn epoch_done(
        &mut self,
        engine: &PrivacyEngine<M>,
        _: &DpSgd,
        epoch: &EpochSummary,
    ) -> dp_optim::Result<Control> {
        let start = Instant::now();
        let perplexity = |rows: &TokenRows| {
            self.model.perplexity(rows, self.batch * 4).map_err(|e| {
                dp_optim::Error::from(dp_models::Error::invalid_data("perplexity", e.to_string()))
            })
        };
        let record = LmEpoch {
            epoch: self.records.len() as u32 + 1,
            steps: epoch.steps,
            train_perplexity: perplexity(&self.corpus.train_eval)?,
            validation_perplexity: perplexity(&self.corpus.validation)?,
            test_perplexity: perplexity(&self.corpus.test)?,
            epsilon: engine.epsilon()?,
            wall_s: self.started.elapsed().as_secs_f64(),
        };
        self.records.push(record);
        self.evaluating_s += start.elapsed().as_secs_f64();
        Ok(Control::Continue)
    }
}
