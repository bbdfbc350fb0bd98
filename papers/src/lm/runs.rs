//! The language-model tables' runs: a run's key in the run cache, whether the pretrained
//! weights are needed by this invocation, and a run read from the cache or trained and
//! written there.

use std::path::Path;

use anyhow::Result;

use super::corpus::LmCorpus;
use super::train::{train_one, LmResult};
use super::{LmRun, LmTable, Start};
use crate::args::{Profile, ReproduceArgs};
use crate::report::fmt;
use crate::run_cache::RunCache;

/// A run's cache key: the table's settings for this profile and the run.
pub(in crate::lm) fn key(table: &LmTable, run: &LmRun, profile: Profile) -> Result<String> {
    let mut material = serde_json::json!({
        "schema": 2,
        "profile": table.profile(profile),
        "physical_batch": table.physical_batch, "clip": table.clip, "lr": table.lr,
        "copies": table.canary_copies,
        "epsilon": run.epsilon,
    });
    // Only where set, so that a table without them keeps its keys.
    if let Some(public) = &table.public {
        material["public"] = serde_json::json!(public);
    }
    if run.start != Start::Scratch {
        material["start"] = serde_json::json!(run.start);
    }
    if let Some(lora) = run.lora {
        material["lora"] = serde_json::json!(lora);
        // What train.rs fixes about the adapters.
        material["lora_targets"] = serde_json::json!(["q", "v"]);
        material["lora_init_seed"] = serde_json::json!(4);
    }
    if let Some(lr) = run.lr {
        material["run_lr"] = serde_json::json!(lr);
    }
    if let Some(batch) = run.batch_size {
        material["run_batch"] = serde_json::json!(batch);
    }
    if let Some(sigma) = run.noise_multiplier {
        material["run_sigma"] = serde_json::json!(sigma);
    }
    RunCache::key(&material)
}

/// Whether this invocation must read or train the pretrained weights: a run from them is
/// neither in `runs_dir`'s cache nor excluded by `--run` / `--cached-only`.
pub(in crate::lm) fn needs_weights(
    table: &LmTable,
    runs_dir: &Path,
    args: &ReproduceArgs,
) -> Result<bool> {
    for run in table.runs.iter().filter(|r| r.start == Start::Pretrained) {
        let cached = RunCache::new(runs_dir)
            .path(&key(table, run, args.profile)?)
            .exists();
        if !cached && args.may_train(&run.label) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// From the cache, trained, or `None` when this invocation may not train it.
pub(in crate::lm) fn train_or_load(
    table: &LmTable,
    run: &LmRun,
    corpus: &LmCorpus,
    args: &ReproduceArgs,
    runs_dir: &Path,
    pretrained: Option<&dp_models::nn::StateDict>,
) -> Result<Option<LmResult>> {
    let key = key(table, run, args.profile)?;
    let cache = RunCache::new(runs_dir);
    let result = match cache.get::<LmResult>(&key) {
        Some(r) => r,
        None if !args.may_train(&run.label) => {
            println!(
                "  {:<24} not run ({})",
                run.label,
                args.not_trained_reason()
            );
            return Ok(None);
        }
        None => {
            let profile = table.profile(args.profile);
            let r = train_one(table, profile, run, corpus, &key, pretrained)?;
            cache.put(&key, &r)?;
            r
        }
    };
    println!(
        "  {:<24} test perplexity {:.1}, ε {} (audited ≥ {:.2}, f-DP ≥ {:.2}), {:.0} s",
        run.label,
        result.epochs.last().map_or(f64::NAN, |e| e.test_perplexity),
        fmt(result.epsilon_pld, 2),
        result.audit.lower_bound,
        result
            .audit
            .fdp_lower_bound(result.delta)
            .unwrap_or(f64::NAN),
        result.wall_s
    );
    Ok(Some(result))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::key_listing;

    /// Every table run's cache key, as a snapshot (both profiles): a moved key orphans the
    /// committed results of its run, so it must be a decision, never a refactor's side
    /// effect.
    #[test]
    fn every_runs_key_is_unchanged() -> Result<()> {
        let listing = key_listing("lm", |t: &LmTable| &t.runs, |r| &r.label, key)?;
        insta::assert_snapshot!(listing);
        Ok(())
    }
}
