//! Every mechanism's event composes in one ledger with DP-SGD training.

use dp_accounting::{Accountant, DpEvent, PldConfig, RdpConfig};
use dp_mechanisms::hardened::{GridGaussian, GridLaplace};
use dp_mechanisms::{
    BudgetSplit, ExponentialMechanism, GaussianMechanism, LaplaceMechanism, Mechanism,
    NoisyMaxNoise, ReportNoisyMax, SparseVariant, SparseVector, TopK, TopKMethod,
};

#[test]
fn events_compose_with_training() -> dp_mechanisms::Result<()> {
    let mechanisms: Vec<Box<dyn Mechanism>> = vec![
        Box::new(GaussianMechanism::from_epsilon_delta_analytic(
            1.0, 1.0, 1e-6,
        )?),
        Box::new(LaplaceMechanism::from_epsilon(1.0, 0.5)?),
        Box::new(ExponentialMechanism::new(1.0, 0.5, false)?),
        Box::new(ReportNoisyMax::new(
            1.0,
            0.5,
            false,
            NoisyMaxNoise::Laplace,
        )?),
        Box::new(SparseVector::new(
            SparseVariant::Numeric,
            1.0,
            0.0,
            5,
            0.5,
            0.0,
        )?),
        Box::new(TopK::new(
            1.0,
            0.5,
            10,
            false,
            TopKMethod::OneShotGumbel,
            BudgetSplit::Basic,
        )?),
        Box::new(GridLaplace::new(1.0, 0.5, None)?),
    ];
    let mut rdp = RdpConfig::default().build()?;
    rdp.compose(&DpEvent::dp_sgd(0.01, 1.1, 1000), 1)?;
    let training_only = rdp.epsilon(1e-5)?;
    let mut pld = PldConfig::default().build()?;
    for m in &mechanisms {
        rdp.compose(&m.event(), 1)?;
        pld.compose(&m.event(), 1)?;
    }
    rdp.compose(&GridGaussian::new(1.0, 0.1, None)?.event(), 1)?;
    let total = rdp.epsilon(1e-5)?;
    assert!(
        total > training_only,
        "selection costs privacy: {training_only} -> {total}"
    );
    assert!(pld.epsilon(1e-5)?.is_finite());
    // Identical consecutive events (here two (0.5, 0)-DP releases) merge their counts.
    let composed: u64 = rdp.ledger().entries.iter().map(|e| e.count).sum();
    assert_eq!(composed, 1 + mechanisms.len() as u64 + 1);
    Ok(())
}

/// The analytic Gaussian is calibrated exactly: δ(ε) at its σ is at most the target, and
/// the classic bound needs more noise.
#[test]
fn gaussian_calibrations() -> dp_mechanisms::Result<()> {
    use dp_accounting::gdp::delta_for_mu;
    let analytic = GaussianMechanism::from_epsilon_delta_analytic(1.0, 0.5, 1e-5)?;
    let delta = delta_for_mu(0.5, 1.0 / analytic.noise_multiplier());
    assert!(delta <= 1e-5 && delta > 0.999_999 * 1e-5, "{delta}");
    let classic = GaussianMechanism::from_epsilon_delta_classic(1.0, 0.5, 1e-5)?;
    assert!(classic.noise_multiplier() > analytic.noise_multiplier());
    assert!((GaussianMechanism::from_zcdp(2.0, 0.125)?.std_dev() - 4.0).abs() < 1e-12);
    assert!((GaussianMechanism::from_gdp(1.0, 0.5)?.noise_multiplier() - 2.0).abs() < 1e-12);
    Ok(())
}
