//! Truncated Poisson sampling (`DpEvent::TruncatedPoissonGaussian`) against the output of
//! `xtask/scripts/truncated_poisson_reference.py` (`truncated_poisson_reference.jsonl`):
//! our bound built independently from dp_accounting 0.6's primitives, dp_accounting's own
//! bound for the event, and the untruncated Poisson Gaussian.

use dp_accounting::{
    truncation_probability, Accountant, DpEvent, NeighbouringRelation, PldConfig, RdpConfig,
    Result, TruncatedPoissonBound,
};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Setting {
    dataset_size: u64,
    sampling_rate: f64,
    max_batch_size: u64,
    noise_multiplier: f64,
    steps: u64,
    delta: f64,
    p_trunc: f64,
    eps_ours: f64,
    eps_dp_acc: f64,
    eps_poisson: f64,
}

fn settings() -> Vec<Setting> {
    include_str!("truncated_poisson_reference.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a reference line"))
        .collect()
}

fn event(s: &Setting) -> DpEvent {
    DpEvent::TruncatedPoissonGaussian {
        dataset_size: s.dataset_size,
        sampling_rate: s.sampling_rate,
        max_batch_size: s.max_batch_size,
        noise_multiplier: s.noise_multiplier,
    }
}

fn pld_epsilon(e: &DpEvent, steps: u64, delta: f64, bound: TruncatedPoissonBound) -> Result<f64> {
    let mut acc = PldConfig {
        truncated_poisson: bound,
        ..PldConfig::default()
    }
    .build()?;
    acc.compose(e, steps)?;
    acc.epsilon(delta)
}

fn relative(got: f64, want: f64) -> f64 {
    (got / want - 1.0).abs()
}

/// Our bound (crate::truncated) against the same construction built independently from
/// dp_accounting's primitives and scipy's binomial tail: the branch weight within 1e-9,
/// ε within 1e-6 on all 24 settings (measured ≤ 7e-9), the untruncated Poisson Gaussian
/// the same.
#[test]
fn the_revealed_bound_equals_its_independent_build() -> Result<()> {
    let all = settings();
    assert!(all.len() >= 20);
    for s in &all {
        let p = truncation_probability(s.dataset_size, s.sampling_rate, s.max_batch_size);
        assert!(
            (p - s.p_trunc).abs() <= 1e-9 * s.p_trunc + 1e-300,
            "{s:?}: p {p}"
        );
        let got = pld_epsilon(&event(s), s.steps, s.delta, TruncatedPoissonBound::Revealed)?;
        assert!(relative(got, s.eps_ours) < 1e-6, "{s:?}: {got}");
        let poisson =
            DpEvent::poisson_sampled(s.sampling_rate, DpEvent::gaussian(s.noise_multiplier));
        let got = pld_epsilon(&poisson, s.steps, s.delta, TruncatedPoissonBound::Revealed)?;
        assert!(relative(got, s.eps_poisson) < 1e-6, "{s:?}: Poisson {got}");
    }
    Ok(())
}

/// The conditional bound is dp_accounting 0.6's `TruncatedSubsampledGaussianDpEvent`:
/// within 1e-6 on all 24 settings; the revealed bound (the default) is never above it
/// there.
#[test]
fn the_conditional_bound_agrees_with_dp_accounting() -> Result<()> {
    for s in &settings() {
        let got = pld_epsilon(
            &event(s),
            s.steps,
            s.delta,
            TruncatedPoissonBound::Conditional,
        )?;
        assert!(relative(got, s.eps_dp_acc) < 1e-6, "{s:?}: {got}");
        let revealed = pld_epsilon(&event(s), s.steps, s.delta, TruncatedPoissonBound::Revealed)?;
        assert!(revealed <= got * (1.0 + 1e-9), "{s:?}: {revealed} > {got}");
    }
    Ok(())
}

/// A cap no draw can reach is plain Poisson sampling (both bounds, PLD and RDP); a lower
/// cap never lowers ε; truncation is not accounted under replace-one neighbours.
#[test]
fn a_cap_never_reached_is_poisson_and_a_lower_cap_costs_more() -> Result<()> {
    let (n, q, sigma, steps, delta) = (1000u64, 0.05, 1.0, 200, 1e-5);
    let capped = |b: u64| DpEvent::TruncatedPoissonGaussian {
        dataset_size: n,
        sampling_rate: q,
        max_batch_size: b,
        noise_multiplier: sigma,
    };
    let poisson = DpEvent::poisson_sampled(q, DpEvent::gaussian(sigma));
    for bound in [
        TruncatedPoissonBound::Revealed,
        TruncatedPoissonBound::Conditional,
    ] {
        let plain = pld_epsilon(&poisson, steps, delta, bound)?;
        assert_eq!(pld_epsilon(&capped(n), steps, delta, bound)?, plain);
        let (loose, tight) = (
            pld_epsilon(&capped(60), steps, delta, bound)?,
            pld_epsilon(&capped(45), steps, delta, bound)?,
        );
        assert!(
            plain <= loose && loose <= tight,
            "{bound:?}: {plain} {loose} {tight}"
        );
    }
    let rdp = |e: &DpEvent| -> Result<f64> {
        let mut acc = RdpConfig::default().build()?;
        acc.compose(e, steps)?;
        acc.epsilon(delta)
    };
    assert_eq!(rdp(&capped(n))?, rdp(&poisson)?);
    let (r60, r45) = (rdp(&capped(60))?, rdp(&capped(45))?);
    assert!(rdp(&poisson)? <= r60 && r60 <= r45);
    // RDP is the looser accountant here too.
    assert!(pld_epsilon(&capped(45), steps, delta, TruncatedPoissonBound::Revealed)? <= r45);
    let replace = PldConfig {
        relation: NeighbouringRelation::ReplaceOne,
        ..PldConfig::default()
    }
    .build()?;
    assert!(replace.supports(&capped(60)).is_err());
    Ok(())
}

/// A noiseless sampled step (σ = 0) composed with a Gaussian: its finite mass (the
/// record not drawn or not kept) stays in the composition, so δ(1) is at least
/// `d + (1 − d)·δ_Gaussian(1)`, d the step's own δ (it was about d when that mass was
/// dropped).
#[test]
fn a_noiseless_step_keeps_its_finite_mass_in_a_composition() -> Result<()> {
    let q = 0.01;
    let delta_at_one = |events: Vec<DpEvent>| -> Result<f64> {
        let mut acc = PldConfig::default().build()?;
        acc.compose(&DpEvent::Composed { events }, 1)?;
        acc.delta(1.0)
    };
    let gaussian = delta_at_one(vec![DpEvent::gaussian(1.0)])?;
    let steps = [
        DpEvent::poisson_sampled(q, DpEvent::gaussian(0.0)),
        DpEvent::TruncatedPoissonGaussian {
            dataset_size: 1000,
            sampling_rate: q,
            max_batch_size: 5,
            noise_multiplier: 0.0,
        },
    ];
    for step in steps {
        let own = delta_at_one(vec![step.clone()])?;
        assert!(own > 0.0 && own <= q * (1.0 + 1e-12), "{step}: {own}");
        let floor = own + (1.0 - own) * gaussian;
        let delta = delta_at_one(vec![step.clone(), DpEvent::gaussian(1.0)])?;
        assert!(delta >= floor * (1.0 - 1e-9), "{step}: {delta} < {floor}");
    }
    Ok(())
}
