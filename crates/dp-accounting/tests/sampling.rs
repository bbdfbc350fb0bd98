//! Sampling schemes: relation, amplification, the per-step and whole-run events.

use dp_accounting::{DpEvent, Error, NeighbouringRelation, SamplingScheme};

#[test]
fn each_scheme_names_its_relation_and_wraps_the_inner_event() {
    let inner = DpEvent::gaussian(1.5);
    let poisson = SamplingScheme::Poisson { sampling_rate: 0.1 };
    assert_eq!(poisson.relation(), NeighbouringRelation::AddOrRemoveOne);
    assert_eq!(
        poisson.amplify(inner.clone()).expect("analysed"),
        DpEvent::poisson_sampled(0.1, inner.clone())
    );
    let fixed = SamplingScheme::FixedSize {
        dataset_size: 100,
        batch_size: 10,
    };
    assert_eq!(fixed.relation(), NeighbouringRelation::ReplaceOne);
    assert_eq!(
        fixed.amplify(inner.clone()).expect("analysed"),
        DpEvent::sampled_without_replacement(100, 10, inner.clone())
    );
    let shuffle = SamplingScheme::Shuffle {
        dataset_size: 100,
        batch_size: 30,
    };
    assert_eq!(shuffle.relation(), NeighbouringRelation::ReplaceOne);
    assert_eq!(shuffle.amplify(inner.clone()).expect("analysed"), inner);
}

#[test]
fn replace_one_doubles_the_sensitivity_of_a_sum() {
    assert_eq!(
        NeighbouringRelation::AddOrRemoveOne.sum_sensitivity(1.5),
        1.5
    );
    assert_eq!(NeighbouringRelation::ReplaceOne.sum_sensitivity(1.5), 3.0);
    let fixed = SamplingScheme::FixedSize {
        dataset_size: 100,
        batch_size: 10,
    };
    assert_eq!(fixed.gaussian_on_sum(3.0), DpEvent::gaussian(1.5));
    let poisson = SamplingScheme::Poisson { sampling_rate: 0.1 };
    assert_eq!(poisson.gaussian_on_sum(3.0), DpEvent::gaussian(3.0));
}

#[test]
fn a_shuffled_run_is_charged_once_per_epoch() {
    // 100 records in batches of 30: 4 steps per epoch, charged at steps 0, 4, 8, ...
    let shuffle = SamplingScheme::Shuffle {
        dataset_size: 100,
        batch_size: 30,
    };
    let inner = DpEvent::gaussian(1.0);
    assert_eq!(shuffle.charge_period(), Some(4));
    let charged: Vec<u64> = (0..10)
        .filter(|&t| {
            shuffle
                .event_at_step(inner.clone(), t)
                .expect("analysed")
                .is_some()
        })
        .collect();
    assert_eq!(charged, vec![0, 4, 8]);
    // Five steps touch two epochs.
    assert_eq!(
        shuffle.run_event(inner.clone(), 5).expect("analysed"),
        DpEvent::self_composed(inner.clone(), 2)
    );
    let poisson = SamplingScheme::Poisson { sampling_rate: 0.5 };
    assert!((0..10).all(|t| poisson
        .event_at_step(inner.clone(), t)
        .expect("analysed")
        .is_some()));
    assert_eq!(
        poisson.gaussian_run_event(1.0, 5),
        DpEvent::self_composed(DpEvent::poisson_sampled(0.5, inner), 5)
    );
}

/// A cyclic run charges one Poisson-sampled event per cycle of its groups: b = 4 groups
/// over 10 steps make 3 charges, at steps 0, 4 and 8 (amplified BandMF's ⌈T/b⌉ rounds).
#[test]
fn a_cyclic_run_is_charged_once_per_cycle_of_its_groups() {
    let cyclic = SamplingScheme::CyclicPoisson {
        groups: 4,
        sampling_rate: 0.25,
    };
    let inner = DpEvent::gaussian(1.0);
    assert_eq!(cyclic.relation(), NeighbouringRelation::AddOrRemoveOne);
    assert_eq!(cyclic.charge_period(), Some(4));
    let charged: Vec<u64> = (0..10)
        .filter(|&t| {
            cyclic
                .event_at_step(inner.clone(), t)
                .expect("analysed")
                .is_some()
        })
        .collect();
    assert_eq!(charged, vec![0, 4, 8]);
    assert_eq!(cyclic.charges(10), 3);
    assert_eq!(
        cyclic.gaussian_run_event(1.0, 10),
        DpEvent::self_composed(DpEvent::poisson_sampled(0.25, inner), 3)
    );
}

/// Truncated Poisson sampling makes the Gaussian's event on the dataset with a record
/// added, and refuses any other mechanism rather than guess its analysis.
#[test]
fn a_truncated_poisson_step_is_the_truncated_gaussian_event_and_nothing_else() {
    let truncated = SamplingScheme::TruncatedPoisson {
        dataset_size: 60_000,
        sampling_rate: 0.004,
        max_batch_size: 300,
    };
    assert_eq!(truncated.relation(), NeighbouringRelation::AddOrRemoveOne);
    assert_eq!(truncated.charge_period(), None);
    assert_eq!(
        truncated.truncation_probability(),
        Some(dp_accounting::truncation_probability(60_001, 0.004, 300))
    );
    assert_eq!(
        SamplingScheme::Poisson {
            sampling_rate: 0.004
        }
        .truncation_probability(),
        None
    );
    assert_eq!(
        truncated
            .amplify(truncated.gaussian_on_sum(1.1))
            .expect("analysed"),
        DpEvent::TruncatedPoissonGaussian {
            dataset_size: 60_001,
            sampling_rate: 0.004,
            max_batch_size: 300,
            noise_multiplier: 1.1,
        }
    );
    let composed = DpEvent::Composed {
        events: vec![DpEvent::gaussian(1.0), DpEvent::gaussian(2.0)],
    };
    assert!(matches!(
        truncated.amplify(composed),
        Err(Error::Unsupported { .. })
    ));
    assert_eq!(
        truncated.gaussian_run_event(1.1, 3),
        DpEvent::self_composed(truncated.gaussian_step(1.1), 3)
    );
}

#[test]
fn bad_schemes_are_typed_errors_naming_the_parameter() {
    let cases = [
        (
            SamplingScheme::Poisson { sampling_rate: 0.0 },
            "sampling_rate",
        ),
        (
            SamplingScheme::Poisson {
                sampling_rate: f64::NAN,
            },
            "sampling_rate",
        ),
        (
            SamplingScheme::Poisson { sampling_rate: 1.5 },
            "sampling_rate",
        ),
        (
            SamplingScheme::FixedSize {
                dataset_size: 10,
                batch_size: 11,
            },
            "batch_size",
        ),
        (
            SamplingScheme::FixedSize {
                dataset_size: 0,
                batch_size: 0,
            },
            "dataset_size",
        ),
        (
            SamplingScheme::Shuffle {
                dataset_size: 10,
                batch_size: 0,
            },
            "batch_size",
        ),
        (
            SamplingScheme::CyclicPoisson {
                groups: 0,
                sampling_rate: 0.5,
            },
            "groups",
        ),
        (
            SamplingScheme::CyclicPoisson {
                groups: 4,
                sampling_rate: 0.0,
            },
            "sampling_rate",
        ),
        (
            SamplingScheme::TruncatedPoisson {
                dataset_size: 100,
                sampling_rate: 0.1,
                max_batch_size: 0,
            },
            "max_batch_size",
        ),
        (
            SamplingScheme::TruncatedPoisson {
                dataset_size: 0,
                sampling_rate: 0.1,
                max_batch_size: 5,
            },
            "dataset_size",
        ),
    ];
    for (scheme, expected) in cases {
        match scheme.validate() {
            Err(Error::InvalidParameter { name, .. }) => assert_eq!(name, expected, "{scheme:?}"),
            other => panic!("{scheme:?}: {other:?}"),
        }
    }
    assert!(SamplingScheme::Poisson { sampling_rate: 1.0 }
        .validate()
        .is_ok());
}
