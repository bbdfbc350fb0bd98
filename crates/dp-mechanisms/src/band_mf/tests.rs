use super::*;
use crate::noise::NoiseSource;

/// With n bands, the square root of the prefix sums squares to the all-ones triangle:
/// `Σ_{i≤k} c_i c_{k−i} = 1` for every k.
#[test]
fn the_square_root_of_prefix_sums_squares_to_the_prefix_sums() {
    let c = BandedToeplitz::square_root_of_prefix_sums(10).expect("strategy");
    for k in 0..10 {
        let square: f64 = (0..=k).map(|i| c.coefs()[i] * c.coefs()[k - i]).sum();
        assert!((square - 1.0).abs() < 1e-14, "k {k}: {square}");
    }
    assert_eq!(&c.coefs()[..3], &[1.0, 0.5, 0.375]);
}

/// c = (1, ½) over 4 steps by hand: β = (1, ½, ¾, ⅝), cumulative β² = (1, 1¼, 1 13/16,
/// 2 13/64), mean 1.56640625, times ‖c‖² = 1.25. The identity strategy over 9 steps has
/// mean error (n + 1)/2 = 5.
#[test]
fn the_loss_by_hand() {
    let c = BandedToeplitz::new(vec![1.0, 0.5]).expect("strategy");
    assert_eq!(c.solve(&[1.0; 4]), vec![1.0, 0.5, 0.75, 0.625]);
    assert_eq!(c.prefix_loss(4), 1.9580078125);
    let identity = BandedToeplitz::new(vec![1.0]).expect("strategy");
    assert_eq!(identity.prefix_loss(9), 5.0);
}

/// The analytic gradient against central differences.
#[test]
fn the_gradient_matches_central_differences() {
    let c = BandedToeplitz::new(vec![1.0, 0.4, 0.3, -0.1]).expect("strategy");
    let n = 20;
    let (_, grad) = c.loss_and_gradient_for_tests(n);
    for j in 0..4 {
        let h = 1e-6;
        let shifted = |d: f64| {
            let mut coefs = c.coefs().to_vec();
            coefs[j] += d;
            BandedToeplitz::new(coefs).expect("strategy").prefix_loss(n)
        };
        let numeric = (shifted(h) - shifted(-h)) / (2.0 * h);
        assert!(
            (grad[j] - numeric).abs() < 1e-6 * numeric.abs().max(1.0),
            "j {j}: {} vs {numeric}",
            grad[j]
        );
    }
}

/// The optimiser never ends above its start, more bands never lose, the result has unit
/// norm; bands beyond n and no bands are refused.
#[test]
fn optimising_helps_and_more_bands_never_lose() {
    let n = 64;
    let mut previous = f64::INFINITY;
    for bands in [1, 2, 4, 8, 16] {
        let start = BandedToeplitz::square_root_of_prefix_sums(bands).expect("start");
        let best = BandedToeplitz::optimize(n, bands, 300).expect("optimised");
        let loss = best.prefix_loss(n);
        assert!(loss <= start.prefix_loss(n) * (1.0 + 1e-12), "b {bands}");
        assert!(
            loss <= previous * (1.0 + 1e-9),
            "b {bands}: {loss} > {previous}"
        );
        let norm: f64 = best.coefs().iter().map(|c| c * c).sum();
        assert!((norm - 1.0).abs() < 1e-12);
        previous = loss;
    }
    assert!(BandedToeplitz::optimize(4, 5, 10).is_err());
    assert!(BandedToeplitz::optimize(4, 0, 10).is_err());
    assert!(BandedToeplitz::new(vec![]).is_err());
    assert!(BandedToeplitz::new(vec![0.0, 1.0]).is_err());
    assert!(BandedToeplitz::new(vec![1.0, f64::NAN]).is_err());
}

/// c = (1, ½) over 4 steps, two participations: columns 0 and 2 are orthogonal at
/// separation 2 (1.25 + 1.25), columns 0 and 1 overlap at separation 1 (‖(1, 1.5, .5, 0)‖²
/// = 3.5); one participation is ‖c‖²; signs do not matter once the bands are separated,
/// and below that the running maximum of |c| bounds the sum.
#[test]
fn sensitivity_by_hand() {
    let c = BandedToeplitz::new(vec![1.0, 0.5]).expect("strategy");
    assert_eq!(c.sensitivity_squared(4, 2, 2), 2.5);
    assert_eq!(c.sensitivity_squared(4, 1, 2), 3.5);
    assert_eq!(c.sensitivity_squared(4, 1, 1), 1.25);
    let signed = BandedToeplitz::new(vec![1.0, -0.5]).expect("strategy");
    assert_eq!(signed.sensitivity_squared(4, 2, 2), 2.5);
    assert_eq!(signed.sensitivity_squared(4, 1, 2), 3.5);
    // Four participations every 2 steps over 7 steps: columns 0, 2, 4, 6 (the last cut).
    assert_eq!(c.sensitivity_squared(7, 2, 4), 1.25 * 3.0 + 1.0);
}

/// The streamed noise is `C⁻¹ z` of its own draws (the same seeded source, drawn the
/// same way), coordinate by coordinate, and remembers b − 1 steps.
#[test]
fn the_stream_is_c_inverse_of_its_draws() {
    let strategy = BandedToeplitz::new(vec![1.0, 0.6, 0.25]).expect("strategy");
    let (steps, d, std) = (12, 5, 0.7);
    let mut stream = CorrelatedNoise::new(strategy.clone(), std);
    let (mut source, mut twin) = (NoiseSource::seeded(7), NoiseSource::seeded(7));
    let mut emitted = Vec::new();
    let mut draws = Vec::new();
    for _ in 0..steps {
        let mut out = vec![0.0; d];
        stream.add_next(&mut source, &mut out);
        emitted.push(out);
        let mut z = vec![0.0; d];
        twin.add_gaussian_f64(&mut z, std);
        draws.push(z);
    }
    assert_eq!(stream.remembered(), 2);
    for i in 0..d {
        let z: Vec<f64> = draws.iter().map(|z| z[i]).collect();
        let want = strategy.solve(&z);
        for (t, w) in want.iter().enumerate() {
            assert!((emitted[t][i] - w).abs() < 1e-12, "step {t} coordinate {i}");
        }
    }
}

/// One band is DP-SGD; b bands charge ⌈T/b⌉ rounds at the group's rate.
#[test]
fn the_amplified_event_counts_rounds() {
    use dp_accounting::DpEvent;
    assert_eq!(
        amplified_event(1.1, 100, 1, 0.01).expect("event"),
        DpEvent::dp_sgd(0.01, 1.1, 100)
    );
    assert_eq!(
        amplified_event(1.1, 100, 8, 0.08).expect("event"),
        DpEvent::dp_sgd(0.08, 1.1, 13)
    );
    assert_eq!(
        amplified_event(1.1, 96, 8, 0.08).expect("event"),
        DpEvent::dp_sgd(0.08, 1.1, 12)
    );
    assert!(amplified_event(1.1, 96, 0, 0.08).is_err());
}
