//! The GDP paper's NCF model: closed-form per-sample gradients against finite
//! differences, and clipping.

use candle_core::{Device, Tensor};
use dp_mechanisms::NoiseSource;
use dp_models::ClipRule;
use dp_models::{Classifier, Error, PrivateModel};
use dp_papers::gdp::ncf::{NcfModel, NcfShape};

fn loss_of(model: &NcfModel, x: &Tensor, y: u32) -> f64 {
    let logits = model.logits(x).expect("logits");
    let max = logits.iter().copied().fold(f32::MIN, f32::max) as f64;
    let lse = max
        + logits
            .iter()
            .map(|&z| (z as f64 - max).exp())
            .sum::<f64>()
            .ln();
    lse - logits[y as usize] as f64
}

#[test]
fn ncf_per_sample_gradients_match_finite_differences_and_clip() {
    let shape = NcfShape {
        users: 3,
        items: 4,
        gmf_dim: 2,
        mlp_dim: 3,
        classes: 5,
    };
    let mut noise = NoiseSource::seeded(5);
    let mut model = NcfModel::new(shape, &mut noise).expect("model");
    // Larger weights than Keras's init so every gradient entry is well above f32 noise.
    let theta: Vec<f32> = model
        .parameters()
        .expect("theta")
        .iter()
        .map(|v| v * 20.0)
        .collect();
    model.set_parameters(&theta).expect("set");
    assert_eq!(
        shape.num_params(),
        3 * 2 + 4 * 2 + 3 * 3 + 4 * 3 + 5 * 8 + 5
    );
    let ids = [(0.0f32, 1.0f32, 3u32), (2.0, 3.0, 0), (0.0, 3.0, 4)];
    let x = Tensor::from_vec(
        ids.iter().flat_map(|&(u, i, _)| [u, i]).collect::<Vec<_>>(),
        (3, 2),
        &Device::Cpu,
    )
    .expect("x");
    let labels: Vec<u32> = ids.iter().map(|r| r.2).collect();
    let per_sample = model.per_sample_gradients(&x, &labels).expect("psg");
    for (k, &(u, i, y)) in ids.iter().enumerate() {
        let xi = Tensor::from_vec(vec![u, i], (1, 2), &Device::Cpu).expect("xi");
        for p in 0..theta.len() {
            let h = 1e-2f32;
            let mut plus = theta.clone();
            plus[p] += h;
            model.set_parameters(&plus).expect("set");
            let up = loss_of(&model, &xi, y);
            plus[p] -= 2.0 * h;
            model.set_parameters(&plus).expect("set");
            let down = loss_of(&model, &xi, y);
            let numeric = (up - down) / (2.0 * h as f64);
            let analytic = per_sample[k][p] as f64;
            assert!(
                (numeric - analytic).abs() <= 2e-3 * (1.0 + analytic.abs()),
                "example {k}, parameter {p}: {analytic} vs {numeric}"
            );
        }
    }
    model.set_parameters(&theta).expect("restore");
    // The clipped sum is Σ cᵢ gᵢ with cᵢ = min(1, C/‖gᵢ‖).
    let c = 0.1f32;
    let clipped = model
        .clipped_cross_entropy_gradient(
            &x,
            &labels,
            5,
            ClipRule::Flat {
                max_grad_norm: f64::from(c),
            },
        )
        .expect("clipped");
    let mut expected = vec![0.0f32; theta.len()];
    for (g, &sq) in per_sample.iter().zip(&clipped.squared_norms) {
        let own: f32 = g.iter().map(|v| v * v).sum();
        assert!((own - sq).abs() <= 1e-4 * own.max(1.0));
        let factor = (c / (sq.sqrt() + 1e-6)).min(1.0);
        expected
            .iter_mut()
            .zip(g)
            .for_each(|(e, v)| *e += factor * v);
    }
    for (a, b) in clipped.sum.into_flat().expect("flat").iter().zip(&expected) {
        assert!((a - b).abs() <= 1e-6, "{a} vs {b}");
    }
    // Out-of-range ids are a typed error, not a panic.
    let bad = Tensor::from_vec(vec![7.0f32, 0.0], (1, 2), &Device::Cpu).expect("bad");
    assert!(matches!(
        model.clipped_cross_entropy_gradient(&bad, &[0], 5, ClipRule::None),
        Err(Error::InvalidModel { part: "NCF", .. })
    ));
}
