//! `dp calibrate`.

use anyhow::{bail, Result};
use dp_accounting::{calibrate_noise, calibrate_steps, CalibrationOptions};
use serde_json::json;

use super::{check_delta, check_noise_multiplier, check_positive, resolve_run};
use crate::args::CalibrateArgs;

pub fn run(args: &CalibrateArgs) -> Result<String> {
    check_positive("--target-epsilon", args.target_epsilon)?;
    let delta = check_delta(args.delta)?;
    if !(args.tolerance.is_finite() && args.tolerance >= 0.0) {
        bail!("--tolerance ({}) must be finite and >= 0", args.tolerance);
    }
    let run = resolve_run(&args.run, args.noise_multiplier.is_none())?;
    let mut results = Vec::new();
    let mut text = String::new();
    for kind in &run.accountants {
        let make = || kind.build(run.relation(), &run.orders);
        let result = if let Some(sigma) = args.noise_multiplier {
            let sigma = check_noise_multiplier(sigma)?;
            if run.steps.is_some() {
                bail!("with --noise-multiplier, calibrate solves for the steps: drop --steps/--epochs");
            }
            let solved =
                calibrate_steps(make, |t| run.event(sigma, t), args.target_epsilon, delta)?;
            text.push_str(&format!(
                "{:<12} steps = {}  (epsilon = {:.6} at noise_multiplier = {sigma})\n",
                kind.name(),
                solved.value,
                solved.epsilon
            ));
            json!({"accountant": kind.name(), "steps": solved.value, "noise_multiplier": sigma,
                   "epsilon": solved.epsilon, "delta": delta})
        } else {
            let steps = run.steps.unwrap_or_default();
            let options = if args.opacus_search {
                CalibrationOptions::opacus()
            } else {
                CalibrationOptions {
                    relative_tolerance: args.tolerance,
                    ..CalibrationOptions::default()
                }
            };
            let solved = calibrate_noise(
                make,
                |s| run.event(s, steps),
                args.target_epsilon,
                delta,
                options,
            )?;
            text.push_str(&format!(
                "{:<12} noise_multiplier = {:.6}  (epsilon = {:.6} <= {} at {steps} steps)\n",
                kind.name(),
                solved.value,
                solved.epsilon,
                args.target_epsilon
            ));
            json!({"accountant": kind.name(), "noise_multiplier": solved.value, "steps": steps,
                   "epsilon": solved.epsilon, "delta": delta})
        };
        results.push(result);
    }
    if run.json {
        let value = if results.len() == 1 {
            results.remove(0)
        } else {
            serde_json::Value::Array(results)
        };
        return Ok(format!("{}\n", serde_json::to_string_pretty(&value)?));
    }
    Ok(format!(
        "{}; target epsilon = {}, delta = {delta:e}\n{text}",
        run.describe(),
        args.target_epsilon
    ))
}
