//! Each DP layer alone (with a small head where its output is not a loss), against the
//! per-example loop.

use candle_core::{Device, Module, Tensor};
use candle_nn::{Conv1dConfig, Conv2dConfig};
use dp_models::nn::{self, loss};

use super::check::{builder, check, random, tokens, Net};

/// The rows `batch` of `t`.
pub fn select(t: &Tensor, batch: &[usize]) -> dp_models::Result<Tensor> {
    let idx: Vec<u32> = batch.iter().map(|&i| i as u32).collect();
    Ok(t.index_select(&Tensor::from_vec(idx, batch.len(), &Device::Cpu)?, 0)?)
}

#[test]
fn linear_on_rows_and_on_sequences() {
    for (shape, seed) in [(vec![6, 5], 1), (vec![4, 7, 5], 2)] {
        let (varmap, taps, vb) = builder();
        let fc = nn::linear(5, 3, vb.pp("fc")).expect("layer");
        let head = nn::linear_no_bias(3, 2, vb.pp("head")).expect("layer");
        let x = random(seed, &shape, 1.0);
        let y = random(seed + 10, &[shape[0], 2], 1.0);
        let net = Net {
            taps,
            varmap,
            batch: shape[0],
            losses: Box::new(|b| {
                let h = fc.forward(&select(&x, b)?)?.tanh()?;
                let h = if h.rank() == 3 { h.sum(1)? } else { h };
                Ok(loss::mse(&head.forward(&h)?, &select(&y, b)?)?)
            }),
        };
        check(&net, &format!("linear {shape:?}"));
    }
}

/// A Linear layer with its GELU in one op (`forward_gelu`, `forward_gelu_erf`) behind
/// another layer, so that the private forward runs the fused op too (it fuses only where
/// its input is in the graph).
#[test]
fn linear_with_gelu_on_rows_and_on_sequences() {
    for (shape, seed, exact) in [(vec![6, 5], 1, false), (vec![4, 7, 5], 2, true)] {
        let (varmap, taps, vb) = builder();
        let first = nn::linear(5, 4, vb.pp("first")).expect("layer");
        let fc = nn::linear(4, 3, vb.pp("fc")).expect("layer");
        let head = nn::linear_no_bias(3, 2, vb.pp("head")).expect("layer");
        let x = random(seed, &shape, 1.0);
        let y = random(seed + 10, &[shape[0], 2], 1.0);
        let net = Net {
            taps,
            varmap,
            batch: shape[0],
            losses: Box::new(|b| {
                let h = first.forward(&select(&x, b)?)?;
                let h = if exact {
                    fc.forward_gelu_erf(&h)?
                } else {
                    fc.forward_gelu(&h)?
                };
                let h = if h.rank() == 3 { h.sum(1)? } else { h };
                Ok(loss::mse(&head.forward(&h)?, &select(&y, b)?)?)
            }),
        };
        check(&net, &format!("linear + gelu {shape:?}"));
    }
}

/// `forward_gelu` is `ops::gelu` of `forward` (and `forward_gelu_erf` `ops::gelu_erf`'s):
/// the same values and the same gradients of the input and both parameters.
#[test]
fn linear_with_gelu_equals_the_two_ops() {
    type Both = (
        fn(&nn::Linear, &Tensor) -> candle_core::Result<Tensor>,
        fn(&Tensor) -> candle_core::Result<Tensor>,
    );
    let forms: [Both; 2] = [
        (nn::Linear::forward_gelu, nn::ops::gelu),
        (nn::Linear::forward_gelu_erf, nn::ops::gelu_erf),
    ];
    for (fused, activation) in forms {
        let (_varmap, _taps, vb) = builder();
        let fc = nn::linear(5, 3, vb.pp("fc")).expect("layer");
        let x = candle_core::Var::from_tensor(&random(3, &[2, 4, 5], 1.0)).expect("x");
        let g = random(4, &[2, 4, 3], 1.0);
        let one = fused(&fc, x.as_tensor()).expect("fused");
        let two = fc
            .forward(x.as_tensor())
            .and_then(|z| activation(&z))
            .expect("two ops");
        let host = |t: &Tensor| -> Vec<f32> {
            t.flatten_all()
                .and_then(|t| t.to_vec1())
                .expect("host values")
        };
        assert_eq!(host(&one), host(&two), "values");
        let grads = |y: &Tensor| {
            (y * &g)
                .and_then(|l| l.sum_all())
                .and_then(|l| l.backward())
                .expect("backward")
        };
        let (a, b) = (grads(&one), grads(&two));
        let bias = fc.bias().expect("bias");
        for t in [x.as_tensor(), fc.weight().as_tensor(), bias.as_tensor()] {
            let (ga, gb) = (a.get(t).expect("fused"), b.get(t).expect("two ops"));
            let close = host(ga)
                .iter()
                .zip(host(gb))
                .all(|(p, q)| (p - q).abs() <= 1e-6 * (1.0 + q.abs()));
            assert!(close, "gradient");
        }
    }
}

/// `forward_residual` (the projection and a residual addition in one op) against the
/// per-example loop, with and without a bias, the residual itself in the graph.
#[test]
fn linear_with_residual_on_sequences() {
    for (seed, with_bias) in [(1, true), (2, false)] {
        let (varmap, taps, vb) = builder();
        let first = nn::linear(5, 3, vb.pp("first")).expect("layer");
        let fc = if with_bias {
            nn::linear(4, 3, vb.pp("fc"))
        } else {
            nn::linear_no_bias(4, 3, vb.pp("fc"))
        }
        .expect("layer");
        let head = nn::linear_no_bias(3, 2, vb.pp("head")).expect("layer");
        let x = random(seed, &[4, 7, 5], 1.0);
        let h = random(seed + 5, &[4, 7, 4], 1.0);
        let y = random(seed + 10, &[4, 2], 1.0);
        let net = Net {
            taps,
            varmap,
            batch: 4,
            losses: Box::new(|b| {
                let stream = first.forward(&select(&x, b)?)?;
                let out = fc.forward_residual(&select(&h, b)?, &stream)?.tanh()?;
                Ok(loss::mse(&head.forward(&out.sum(1)?)?, &select(&y, b)?)?)
            }),
        };
        check(&net, &format!("linear + residual, bias {with_bias}"));
    }
}

/// `forward_residual` is `residual + forward`: values within 1e-6 and the same gradients
/// of the input, the residual, the weight and the bias.
#[test]
fn linear_with_residual_equals_the_two_ops() {
    let (_varmap, _taps, vb) = builder();
    let fc = nn::linear(5, 3, vb.pp("fc")).expect("layer");
    let x = candle_core::Var::from_tensor(&random(3, &[2, 4, 5], 1.0)).expect("x");
    let r = candle_core::Var::from_tensor(&random(5, &[2, 4, 3], 1.0)).expect("r");
    let g = random(4, &[2, 4, 3], 1.0);
    let one = fc
        .forward_residual(x.as_tensor(), r.as_tensor())
        .expect("fused");
    let two = fc
        .forward(x.as_tensor())
        .and_then(|z| r.as_tensor() + z)
        .expect("two ops");
    let host = |t: &Tensor| -> Vec<f32> {
        t.flatten_all()
            .and_then(|t| t.to_vec1())
            .expect("host values")
    };
    let close = |a: Vec<f32>, b: Vec<f32>| {
        a.len() == b.len()
            && a.iter()
                .zip(&b)
                .all(|(p, q)| (p - q).abs() <= 1e-6 * (1.0 + q.abs()))
    };
    assert!(close(host(&one), host(&two)), "values");
    let grads = |y: &Tensor| {
        (y * &g)
            .and_then(|l| l.sum_all())
            .and_then(|l| l.backward())
            .expect("backward")
    };
    let (a, b) = (grads(&one), grads(&two));
    let bias = fc.bias().expect("bias");
    for t in [
        x.as_tensor(),
        r.as_tensor(),
        fc.weight().as_tensor(),
        bias.as_tensor(),
    ] {
        let (ga, gb) = (a.get(t).expect("fused"), b.get(t).expect("two ops"));
        assert!(close(host(ga), host(gb)), "gradient");
    }
}

#[test]
fn embedding_with_repeated_tokens() {
    let (varmap, taps, vb) = builder();
    let emb = nn::embedding(6, 4, vb.pp("emb")).expect("layer");
    let head = nn::linear(4, 3, vb.pp("head")).expect("layer");
    // Vocabulary 6, length 9: every example repeats tokens, so the ghost norm's
    // same-token terms matter.
    let ids = tokens(3, 5, 9, 6);
    let labels = tokens(4, 5, 1, 3).squeeze(1).expect("labels");
    let net = Net {
        taps,
        varmap,
        batch: 5,
        losses: Box::new(|b| {
            let h = emb.forward(&select(&ids, b)?)?.mean(1)?;
            Ok(loss::cross_entropy(
                &head.forward(&h)?,
                &select(&labels, b)?,
                None,
            )?)
        }),
    };
    check(&net, "embedding");
}

#[test]
fn normalisations() {
    for kind in ["layer", "rms", "group"] {
        let (varmap, taps, vb) = builder();
        let fc = nn::linear(4, 8, vb.pp("fc")).expect("layer");
        let norm: Box<dyn Module> = match kind {
            "layer" => Box::new(nn::layer_norm(8, 1e-5, vb.pp("norm")).expect("layer")),
            "rms" => Box::new(nn::rms_norm(8, 1e-5, vb.pp("norm")).expect("layer")),
            _ => Box::new(nn::group_norm(2, 8, 1e-5, vb.pp("norm")).expect("layer")),
        };
        let head = nn::linear(8, 1, vb.pp("head")).expect("layer");
        let x = random(5, &[6, 3, 4], 1.0);
        let y = random(6, &[6, 1], 1.0);
        let net = Net {
            taps,
            varmap,
            batch: 6,
            losses: Box::new(|b| {
                let h = fc.forward(&select(&x, b)?)?;
                // Group norm reads channels at axis 1: (B, C, T).
                let h = match kind {
                    "group" => norm.forward(&h.transpose(1, 2)?)?.transpose(1, 2)?,
                    _ => norm.forward(&h)?,
                };
                Ok(loss::mse(
                    &head.forward(&h.gelu()?.mean(1)?)?,
                    &select(&y, b)?,
                )?)
            }),
        };
        check(&net, kind);
    }
}

#[test]
fn convolutions() {
    let (varmap, taps, vb) = builder();
    let c1 = nn::conv1d(
        2,
        3,
        3,
        Conv1dConfig {
            padding: 1,
            stride: 2,
            ..Default::default()
        },
        vb.pp("c1"),
    )
    .expect("layer");
    let c2 = nn::conv2d(
        1,
        2,
        3,
        Conv2dConfig {
            padding: 1,
            ..Default::default()
        },
        vb.pp("c2"),
    )
    .expect("layer");
    let head = nn::linear(3 * 4 + 2 * 5 * 5, 2, vb.pp("head")).expect("layer");
    let seq = random(7, &[5, 2, 8], 1.0);
    let img = random(8, &[5, 1, 5, 5], 1.0);
    let labels = tokens(9, 5, 1, 2).squeeze(1).expect("labels");
    let net = Net {
        taps,
        varmap,
        batch: 5,
        losses: Box::new(|b| {
            let a = c1.forward(&select(&seq, b)?)?.relu()?.flatten_from(1)?;
            let c = c2.forward(&select(&img, b)?)?.tanh()?.flatten_from(1)?;
            let h = Tensor::cat(&[a, c], 1)?;
            Ok(loss::cross_entropy(
                &head.forward(&h)?,
                &select(&labels, b)?,
                None,
            )?)
        }),
    };
    check(&net, "convolutions");
}
