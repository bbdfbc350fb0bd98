//! `dp account`.

use anyhow::Result;

use super::{check_delta, check_noise_multiplier, resolve_run};
use crate::args::AccountArgs;
use crate::output::{number, render_reports, Row};

pub fn run(args: &AccountArgs) -> Result<String> {
    let sigma = check_noise_multiplier(args.noise_multiplier)?;
    let delta = check_delta(args.delta)?;
    let run = resolve_run(&args.run, true)?;
    let steps = run.steps.unwrap_or_default();
    let event = run.event(sigma, steps);
    let single = run.accountants.len() == 1;
    let mut rows = Vec::new();
    for kind in &run.accountants {
        let mut accountant = kind.build(run.relation(), &run.orders)?;
        let outcome = accountant
            .compose(&event, 1)
            .and_then(|()| accountant.epsilon_report(delta));
        match outcome {
            Ok(report) => rows.push(Row::Report(report)),
            // One accountant asked for: its refusal is the command's error.
            Err(err) if single => return Err(err.into()),
            Err(err) => rows.push(Row::Unsupported {
                accountant: kind.name().to_string(),
                reason: err.to_string(),
            }),
        }
    }
    let header = format!(
        "DP-SGD: noise_multiplier = {}, {steps} steps, delta = {delta:e}; {}",
        number(sigma),
        run.describe()
    );
    render_reports(&header, &rows, run.json)
}
