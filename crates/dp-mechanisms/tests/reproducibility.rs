//! Seeds, state, and input validation.

use dp_mechanisms::hardened::{DiscreteGaussian, GridGaussian, GridLaplace};
use dp_mechanisms::{
    BudgetSplit, Error, ExponentialMechanism, GaussianMechanism, LaplaceMechanism, NoiseSource,
    NoisyMaxNoise, ReportNoisyMax, SparseVariant, SparseVector, TopK, TopKMethod,
};

fn draws(noise: &mut NoiseSource) -> Vec<u64> {
    let mut buffer = vec![0.0f32; 1000];
    noise.add_gaussian_f32(&mut buffer, 1.0);
    let mut out: Vec<u64> = buffer.iter().map(|x| u64::from(x.to_bits())).collect();
    out.push(noise.laplace(1.0).to_bits());
    out.push(noise.standard_gumbel().to_bits());
    out
}

#[test]
fn seeded_runs_are_bit_identical_and_os_runs_differ() -> dp_mechanisms::Result<()> {
    assert_eq!(
        draws(&mut NoiseSource::seeded(7)),
        draws(&mut NoiseSource::seeded(7))
    );
    assert_ne!(
        draws(&mut NoiseSource::seeded(7)),
        draws(&mut NoiseSource::seeded(8))
    );
    assert_ne!(
        draws(&mut NoiseSource::os_seeded()?),
        draws(&mut NoiseSource::os_seeded()?)
    );
    assert!(NoiseSource::seeded(1).is_reproducible());
    assert!(!NoiseSource::os_seeded()?.is_reproducible());
    // A whole mechanism pipeline is reproducible too.
    let select = |seed| -> dp_mechanisms::Result<Vec<usize>> {
        let scores: Vec<f64> = (0..500).map(|i| f64::from(i % 17)).collect();
        TopK::new(
            1.0,
            1.0,
            20,
            false,
            TopKMethod::OneShotGumbel,
            BudgetSplit::Basic,
        )?
        .select(&scores, &mut NoiseSource::seeded(seed))
    };
    assert_eq!(select(3)?, select(3)?);
    Ok(())
}

#[test]
fn state_round_trips_through_json_mid_stream() -> Result<(), Box<dyn std::error::Error>> {
    let mut noise = NoiseSource::seeded(5);
    draws(&mut noise);
    let saved = serde_json::to_string(&noise.state())?;
    let expected = draws(&mut noise);
    let mut resumed = NoiseSource::restore(&serde_json::from_str(&saved)?);
    assert_eq!(draws(&mut resumed), expected);
    assert!(resumed.is_reproducible());
    Ok(())
}

#[test]
fn bad_parameters_are_typed_errors() {
    let invalid = |r: Result<(), Error>| matches!(r, Err(Error::InvalidParameter { .. }));
    assert!(invalid(GaussianMechanism::new(1.0, 0.0).map(drop)));
    assert!(invalid(GaussianMechanism::new(f64::NAN, 1.0).map(drop)));
    assert!(invalid(
        GaussianMechanism::from_epsilon_delta_classic(1.0, 2.0, 1e-5).map(drop)
    ));
    assert!(invalid(
        GaussianMechanism::from_epsilon_delta_analytic(1.0, 1.0, 1.0).map(drop)
    ));
    assert!(invalid(
        GaussianMechanism::from_epsilon_delta_analytic(1.0, 0.0, 1e-5).map(drop)
    ));
    assert!(invalid(LaplaceMechanism::from_epsilon(1.0, -1.0).map(drop)));
    assert!(invalid(
        ExponentialMechanism::new(1.0, 0.0, false).map(drop)
    ));
    assert!(invalid(
        ReportNoisyMax::new(0.0, 1.0, false, NoisyMaxNoise::Laplace).map(drop)
    ));
    assert!(invalid(
        SparseVector::new(SparseVariant::Numeric, 1.0, 0.0, 0, 1.0, 0.0).map(drop)
    ));
    assert!(invalid(
        SparseVector::new(SparseVariant::Numeric, 1.0, 0.0, 1, 1.0, 1.5).map(drop)
    ));
    assert!(invalid(
        TopK::new(1.0, 1.0, 0, false, TopKMethod::Peeling, BudgetSplit::Basic).map(drop)
    ));
    assert!(invalid(
        TopK::new(
            1.0,
            1.0,
            2,
            false,
            TopKMethod::Peeling,
            BudgetSplit::Advanced { delta_prime: 0.0 }
        )
        .map(drop)
    ));
    assert!(invalid(DiscreteGaussian::new(1e9).map(drop)));
    assert!(invalid(
        GridLaplace::new(1.0, f64::INFINITY, None).map(drop)
    ));
    assert!(invalid(GridGaussian::new(1.0, -1.0, None).map(drop)));
}

#[test]
fn bad_inputs_are_typed_errors() -> dp_mechanisms::Result<()> {
    let mut noise = NoiseSource::seeded(6);
    let input = |r: Result<(), Error>| matches!(r, Err(Error::InvalidInput(_)));
    let em = ExponentialMechanism::new(1.0, 1.0, false)?;
    assert!(input(em.select(&[], &mut noise).map(drop)));
    assert!(input(em.select(&[1.0, f64::NAN], &mut noise).map(drop)));
    assert!(input(
        em.select(&[1.0, f64::INFINITY], &mut noise).map(drop)
    ));
    let top = TopK::new(
        1.0,
        1.0,
        3,
        false,
        TopKMethod::OneShotGumbel,
        BudgetSplit::Basic,
    )?;
    assert!(input(top.select(&[1.0, 2.0], &mut noise).map(drop)));
    let rnm = ReportNoisyMax::new(1.0, 1.0, false, NoisyMaxNoise::Laplace)?;
    assert!(input(rnm.select(&[], &mut noise).map(drop)));
    let svt = SparseVector::above_threshold(1.0, 0.0, 1.0)?;
    assert!(input(svt.release(&[f64::NAN], &mut noise).map(drop)));
    let grid = GridLaplace::new(1.0, 1.0, Some(-10))?;
    assert!(input(grid.release(1e300, &mut noise).map(drop)));
    assert!(input(grid.release(f64::NAN, &mut noise).map(drop)));
    Ok(())
}

/// Grid releases only ever output multiples of 2^k, whatever the input's low bits.
#[test]
fn grid_outputs_are_on_the_grid() -> dp_mechanisms::Result<()> {
    let mut noise = NoiseSource::seeded(9);
    let laplace = GridLaplace::new(1.0, 1.0, Some(-8))?;
    let gaussian = GridGaussian::new(1.0, 0.5, Some(-8))?;
    assert!(laplace.epsilon() <= 1.0 && gaussian.rho() <= 0.5);
    for input in [0.1, 0.100000000001, std::f64::consts::PI, -7.77] {
        for out in [
            laplace.release(input, &mut noise)?,
            gaussian.release(input, &mut noise)?,
        ] {
            let steps = out * 256.0;
            assert_eq!(steps, steps.round(), "{out} is off the grid");
        }
    }
    Ok(())
}
