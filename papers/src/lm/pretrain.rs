//! Non-private pretraining on the public part of the corpus: the weights the fine-tuning
//! runs start from, trained once per table and profile and kept in the run cache
//! (`pretrained-<key>.safetensors`, with its record in `pretrained-<key>.json`).
//!
//! Privacy: the public genres are treated as public data — nothing here reads the private
//! part — so the pretrained weights are constants of every private run (post-processing
//! of public data; no charge).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use candle_core::Device;
use candle_nn::VarMap;
use dp_mechanisms::NoiseSource;
use dp_models::nn::{DpVarBuilder, PrivateNet, StateDict, Taps};
use dp_models::TrainingData;
use dp_optim::{
    DpSgd, GradientNormalisation, Optimizer, PrivacyEngine, Sampler, TrainConfig, Trainer,
};
use serde::{Deserialize, Serialize};

use super::corpus::{LmCorpus, PublicRows};
use super::model::LmModel;
use super::rows::TokenRows;
use super::train::initialise;
use super::{LmProfile, LmTable, PublicPart};
use crate::atomic_file::write_atomically;
use crate::lock_file::LockFile;
use crate::run_cache::RunCache;

/// The record of one pretraining.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Pretrained {
    /// Steps of expected batch `batch_size`.
    pub steps: u64,
    /// Public training windows.
    pub windows: usize,
    /// Perplexity on the public validation windows after pretraining.
    pub public_validation_perplexity: f64,
    /// Wall seconds.
    pub wall_s: f64,
    /// The commit that trained it.
    pub commit: String,
}

/// The cache key of a table's pretraining in `profile`.
fn key(table: &LmTable, public: &PublicPart, profile: &LmProfile) -> Result<String> {
    let material = serde_json::json!({
        "schema": 1,
        "sizes": profile.sizes, "shape": profile.shape,
        "epochs": profile.pretrain_epochs, "batch": profile.batch_size,
        "physical_batch": table.physical_batch,
        "public": public,
        // The initialisation's and the engine's seeds (pretrain below).
        "seeds": [1, 3],
    });
    RunCache::key(&material)
}

/// A table's pretraining: its record, and its weights where they were needed.
pub struct Pretraining {
    /// What the pretraining did.
    pub record: Pretrained,
    /// The weights (read or trained only when a run must train from them).
    pub weights: Option<StateDict>,
}

/// The pretraining of `table`'s public part from `runs_dir`: with `train` (a run must
/// train from it) its weights, read or trained and written there; without, its record
/// where one is (the weights are not committed, the record is). `None` without a public
/// part, or without `train` before any pretraining.
pub fn pretrained(
    table: &LmTable,
    profile: &LmProfile,
    corpus: &LmCorpus,
    runs_dir: &Path,
    train: bool,
) -> Result<Option<Pretraining>> {
    let (Some(public), Some(rows)) = (&table.public, &corpus.public) else {
        return Ok(None);
    };
    anyhow::ensure!(
        profile.pretrain_epochs >= 1,
        "a table with a public part needs pretrain_epochs >= 1"
    );
    let key = key(table, public, profile)?;
    let weights = runs_dir.join(format!("pretrained-{key}.safetensors"));
    let record = runs_dir.join(format!("pretrained-{key}.json"));
    let read_record = || -> Result<Pretrained> {
        serde_json::from_str(&std::fs::read_to_string(&record)?)
            .with_context(|| format!("reading {}", record.display()))
    };
    if !train {
        return Ok(match record.exists() {
            true => Some(Pretraining {
                record: read_record()?,
                weights: None,
            }),
            false => None,
        });
    }
    let trained = || -> Result<Option<Pretraining>> {
        if !(weights.exists() && record.exists()) {
            return Ok(None);
        }
        Ok(Some(Pretraining {
            record: read_record()?,
            weights: Some(StateDict::read(&weights)?),
        }))
    };
    if let Some(done) = trained()? {
        return Ok(Some(done));
    }
    // One worker pretrains; another that needs the weights meanwhile waits for them
    // instead of training the same weights beside it.
    let _lock = LockFile::acquire(
        &runs_dir.join(format!("pretrained-{key}.lock")),
        Duration::from_secs(10),
    )?;
    if let Some(done) = trained()? {
        return Ok(Some(done));
    }
    let (state, r) = pretrain(table, public, profile, corpus.vocab, rows)?;
    // Renamed whole, so that a kill never leaves a torn weights file under the final name.
    let partial = weights.with_extension(format!("{}.partial", std::process::id()));
    state.write(&partial)?;
    std::fs::rename(&partial, &weights)?;
    write_atomically(&record, &serde_json::to_vec_pretty(&r)?)?;
    println!(
        "  pretrained on {} public windows: {} steps, public validation perplexity {:.1}, {:.0} s",
        r.windows, r.steps, r.public_validation_perplexity, r.wall_s
    );
    Ok(Some(Pretraining {
        record: r,
        weights: Some(state),
    }))
}

/// Adam on the public training windows, Poisson batches of the profile's size, no
/// clipping or noise, from the seeded initialisation of every run.
fn pretrain(
    table: &LmTable,
    public: &PublicPart,
    profile: &LmProfile,
    vocab: usize,
    rows: &PublicRows,
) -> Result<(StateDict, Pretrained)> {
    let started = Instant::now();
    let (varmap, taps, device) = (VarMap::new(), Taps::new(), Device::Cpu);
    let vb = DpVarBuilder::from_varmap(&varmap, &taps, &device);
    let model = LmModel::new(profile.shape, vocab, &vb)?;
    initialise(&taps, 1)?;
    let n = rows.train.len();
    let steps_per_epoch = (n as f64 / profile.batch_size as f64).round().max(1.0) as u64;
    let total_steps = steps_per_epoch * u64::from(profile.pretrain_epochs);
    let config = TrainConfig {
        sampler: Sampler::Poisson {
            sampling_rate: (profile.batch_size as f64 / n as f64).min(1.0),
        },
        privacy: None,
        optimizer: Optimizer::Adam {
            lr: public.lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        },
        normalisation: GradientNormalisation::ExpectedBatchSize,
    };
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
    let mut engine = PrivacyEngine::new(net, config, n, NoiseSource::seeded(3))?;
    engine.set_physical_batch_size(table.physical_batch)?;
    let trainer = Trainer {
        total_steps,
        steps_per_epoch,
        checkpoints: None,
        schedule: None,
    };
    trainer.fit(&mut engine, &mut DpSgd, &rows.train, &mut ())?;
    let record = Pretrained {
        steps: engine.steps(),
        windows: n,
        public_validation_perplexity: model
            .perplexity(&rows.validation, table.physical_batch * 4)?,
        wall_s: started.elapsed().as_secs_f64(),
        commit: crate::provenance::git_commit(),
    };
    Ok((taps.state_dict(), record))
}
