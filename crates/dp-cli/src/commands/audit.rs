//! `dp audit`: the one-run privacy audit of the engine (Steinke, Nasr & Jagielski 2023).

use anyhow::{bail, Result};
use dp_accounting::{AccountantKind, OrderGrid};
use dp_mechanisms::NoiseSource;
use dp_optim::audit::CanaryAudit;
use dp_optim::{Clipping, GradientNormalisation, Optimizer, PrivacyConfig, Sampler, TrainConfig};

use super::{check_delta, check_noise_multiplier, check_positive};
use crate::args::AuditArgs;
use crate::output::{number, short};

/// Most steps of an audit, and most examples (steps × expected batch) it processes.
const MAX_AUDIT_STEPS: u64 = 1_000_000;
const MAX_AUDIT_EXAMPLES: f64 = 2e7;

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
    if args.canaries == 0 || args.canaries > CanaryAudit::MAX_CANARIES {
        bail!(
            "--canaries ({}) must be in 1..={} (the design matrix grows as its square)",
            args.canaries,
            CanaryAudit::MAX_CANARIES
        );
    }
    // Bounded work: steps × the expected batch (records + canaries, each included with
    // probability ½, at rate q) examples.
    let audit_records = CanaryAudit::default().records as f64 + args.canaries as f64 / 2.0;
    let per_step = (args.q * audit_records).max(1.0);
    let max_steps = ((MAX_AUDIT_EXAMPLES / per_step).floor() as u64).clamp(1, MAX_AUDIT_STEPS);
    if args.steps == 0 || args.steps > max_steps {
        bail!(
            "--steps ({}) must be in 1..={max_steps} at --q {} and --canaries {} (an audit \
             processes at most {} examples)",
            args.steps,
            short(args.q),
            args.canaries,
            short(MAX_AUDIT_EXAMPLES)
        );
    }
    if args.guesses == 0 || args.guesses > args.canaries {
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
            correlation: Default::default(),
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
    let report = audit.run_observed(config, args.steps, noise, |_| Ok(()), progress)?;
    if args.json {
        let mut json = serde_json::to_value(&report)?;
        // ∞ is not a JSON number: "unbounded", as `dp account` writes it.
        if !report.claimed_epsilon.is_finite() {
            json["claimed_epsilon"] = "unbounded".into();
        }
        return Ok(format!("{}\n", serde_json::to_string_pretty(&json)?));
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
        if report.claimed_epsilon.is_finite() {
            number(report.claimed_epsilon)
        } else {
            "unbounded".into()
        },
        number(report.lower_bound),
        report.outcome.correct,
        report.outcome.guesses,
        args.confidence,
        short(args.delta),
    ))
}

/// Progress on stderr for a long audit: every tenth of the steps, when there are many.
fn progress(done: u64, steps: u64) {
    let tenth = steps.div_ceil(10);
    if steps >= 10_000 && (done.is_multiple_of(tenth) || done == steps) {
        crate::output::diag(&format!("audit: step {done} of {steps}"));
    }
}
