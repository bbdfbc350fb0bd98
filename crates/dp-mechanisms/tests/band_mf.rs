//! BandMF's strategy against jax_privacy 2.0 (`xtask/scripts/band_mf_reference.py`, its
//! output in `band_mf_reference.jsonl`): the loss and the min-separated sensitivity of
//! jax_privacy's optimised coefficients, and our optimiser against its L-BFGS.

use dp_mechanisms::band_mf::BandedToeplitz;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Setting {
    n: usize,
    bands: usize,
    coefs: Vec<f64>,
    loss: f64,
    /// (min_sep, max_participations, sensitivity²).
    sensitivity: Vec<(usize, usize, f64)>,
}

fn settings() -> Vec<Setting> {
    include_str!("band_mf_reference.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a reference line"))
        .collect()
}

fn relative(got: f64, want: f64) -> f64 {
    (got / want - 1.0).abs()
}

/// The same coefficients give jax_privacy's loss and sensitivities (1e-9 relative) on
/// all 12 settings, ≥ 10 of them with more than one band.
#[test]
fn loss_and_sensitivity_agree_with_jax_privacy() {
    let all = settings();
    assert!(all.iter().filter(|s| s.bands > 1).count() >= 10);
    for s in &all {
        let c = BandedToeplitz::new(s.coefs.clone()).expect("coefficients");
        assert!(relative(c.prefix_loss(s.n), s.loss) < 1e-9, "{s:?}");
        for &(min_sep, k, want) in &s.sensitivity {
            let got = c.sensitivity_squared(s.n, min_sep, k);
            assert!(
                relative(got, want) < 1e-9,
                "n {} b {} sep {min_sep} k {k}: {got} vs {want}",
                s.n,
                s.bands
            );
        }
    }
}

/// Our optimiser reaches jax_privacy's optimum within 0.1% on every setting.
#[test]
fn the_optimiser_reaches_jax_privacys_optimum() {
    for s in settings() {
        let ours = BandedToeplitz::optimize(s.n, s.bands, 500).expect("optimised");
        let loss = ours.prefix_loss(s.n);
        assert!(
            loss <= s.loss * (1.0 + 1e-3),
            "n {} b {}: {loss} vs {}",
            s.n,
            s.bands,
            s.loss
        );
    }
}
