//! `dp audit`: the one-run privacy audit of the engine (Steinke, Nasr & Jagielski 2023).

use anyhow::{bail, Result};
use dp_accounting::{AccountantKind, OrderGrid};
use dp_mechanisms::NoiseSource;
use dp_optim::audit::CanaryAudit;
use dp_optim::{Clipping, GradientNormalisation, Optimizer, PrivacyConfig, Sampler, TrainConfig};

use super::{check_delta, check_noise_multiplier, check_positive};
use crate::args::AuditArgs;
use crate::output::{number, short};

pub fn run(args: &AuditArgs) -> Result<String> {
    check_noise_multiplier(args.noise_multiplier)?;
    check_delta(args.delta)?;
    if !(args.q > 0.0 && args.q <= 1.0) {
        bail!("--q ({}) must be in (0, 1]", short(args.q));
    }
    check_positive("--max-grad-norm", args.max_grad_norm)?;
    check_positive("--lr", args.lr)?;
    if !(args.confidence > 0.0 && args.confidence < 1.0) {
        bail!(
            "--confidence ({}) must be in (0, 1)",
            short(args.confidence)
        );
    }
    if args.steps == 0 || args.steps > 1_000_000 {
        bail!("--steps ({}) must be in 1..=1000000", args.steps);
    }
    if args.canaries == 0 || args.guesses == 0 || args.guesses > args.canaries {
        bail!(
            "--guesses ({}) must be in 1..=--canaries ({})",
            args.guesses,
            args.canaries
        );
    }
    let audit = CanaryAudit {
        canaries: args.canaries,
        guesses: args.guesses,
        confidence: args.confidence,
        ..CanaryAudit::default()
    };
    let config = TrainConfig {
        sampler: Sampler::Poisson {
            sampling_rate: args.q,
        },
        privacy: Some(PrivacyConfig {
            noise_multiplier: args.noise_multiplier,
            max_grad_norm: args.max_grad_norm,
            clipping: Clipping::Flat,
            delta: args.delta,
            target_epsilon: None,
            accountant: AccountantKind::Rdp,
            orders: OrderGrid::Opacus,
        }),
        optimizer: Optimizer::Sgd {
            lr: args.lr,
            momentum: 0.0,
        },
        normalisation: GradientNormalisation::ExpectedBatchSize,
    };
    let noise = match args.seed {
        Some(seed) => NoiseSource::seeded(seed),
        None => NoiseSource::os_seeded()?,
    };
    let report = audit.run(config, args.steps, noise, |_| Ok(()))?;
    if args.json {
        return Ok(format!("{}\n", serde_json::to_string_pretty(&report)?));
    }
    Ok(format!(
        "one-run audit (Steinke, Nasr & Jagielski 2023): softmax regression on {} records + {} Dirac canaries ({} included), Poisson q = {}, noise_multiplier = {}, {} steps\n\
         claimed epsilon (rdp)     {}\n\
         audited lower bound       {}  ({} of {} guesses correct; holds with probability {})\n\
         delta                     {}\n",
        audit.records,
        audit.canaries,
        report.included,
        short(args.q),
        short(args.noise_multiplier),
        report.steps,
        number(report.claimed_epsilon),
        number(report.lower_bound),
        report.outcome.correct,
        report.outcome.guesses,
        short(args.confidence),
        short(args.delta),
    ))
}
