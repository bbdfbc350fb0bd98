//! The one-run privacy audit (Steinke, Nasr & Jagielski 2023) of the engine, with Dirac
//! canaries: a correct engine's audited lower bound stays below its claimed ε, and the
//! same audit catches an engine that adds no noise or skips clipping.

use dp_accounting::{AccountantKind, OrderGrid};
use dp_mechanisms::NoiseSource;
use dp_optim::audit::{AuditReport, CanaryAudit};
use dp_optim::fault::Fault;
use dp_optim::{Clipping, GradientNormalisation, Optimizer, PrivacyConfig, Sampler, TrainConfig};

/// The audited run: softmax regression, Poisson q = 0.1, σ = 2, C = 1, SGD η = 0.1,
/// 100 steps, δ = 1e-5.
fn audit(fault: Option<Fault>, seed: u64) -> dp_optim::Result<AuditReport> {
    let config = TrainConfig {
        sampler: Sampler::Poisson { sampling_rate: 0.1 },
        privacy: Some(PrivacyConfig {
            noise_multiplier: 2.0,
            max_grad_norm: 1.0,
            clipping: Clipping::Flat,
            delta: 1e-5,
            target_epsilon: None,
            accountant: AccountantKind::Rdp,
            orders: OrderGrid::Opacus,
            correlation: Default::default(),
        }),
        optimizer: Optimizer::Sgd {
            lr: 0.1,
            momentum: 0.0,
        },
        normalisation: GradientNormalisation::ExpectedBatchSize,
    };
    CanaryAudit::default().run(config, 100, NoiseSource::seeded(seed), |engine| {
        if let Some(fault) = fault {
            engine.inject_fault(fault);
        }
        Ok(())
    })
}

#[test]
fn the_audit_bounds_a_correct_engine_and_catches_a_broken_one() -> dp_optim::Result<()> {
    for seed in [1, 2] {
        let correct = audit(None, seed)?;
        eprintln!("correct: {correct:?}");
        assert!(
            correct.lower_bound <= correct.claimed_epsilon,
            "a correct run's audited bound exceeds its claim: {correct:?}"
        );
    }
    for fault in [Fault::SkipNoise, Fault::SkipClipping] {
        let broken = audit(Some(fault), 1)?;
        eprintln!("{fault:?}: {broken:?}");
        assert!(
            broken.lower_bound > broken.claimed_epsilon,
            "the audit missed {fault:?}: {broken:?}"
        );
    }
    Ok(())
}
