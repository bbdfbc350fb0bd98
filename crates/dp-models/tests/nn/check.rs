//! The reference every DP network is checked against: a loop over single examples with
//! Candle's own backward on the graph variables.

use std::collections::BTreeMap;

use candle_core::{Device, Tensor};
use candle_nn::VarMap;
use dp_mechanisms::NoiseSource;
use dp_models::nn::{DpVarBuilder, NormMethod, Taps};
use dp_models::ClipRule;

/// Per-example losses of the examples given by index.
pub type Losses<'a> = Box<dyn Fn(&[usize]) -> dp_models::Result<Tensor> + 'a>;

/// A network under test: its taps and a closure from example indices to their losses.
pub struct Net<'a> {
    pub taps: Taps,
    /// Kept so the network's variables outlive the checks.
    #[allow(dead_code)]
    pub varmap: VarMap,
    pub losses: Losses<'a>,
    pub batch: usize,
}

/// A fresh varmap, taps and builder on the CPU.
pub fn builder() -> (VarMap, Taps, DpVarBuilder) {
    let (varmap, taps) = (VarMap::new(), Taps::new());
    let vb = DpVarBuilder::from_varmap(&varmap, &taps, &Device::Cpu);
    (varmap, taps, vb)
}

/// Uniform values in ±scale from a seeded source.
pub fn random(seed: u64, shape: &[usize], scale: f64) -> Tensor {
    let mut noise = NoiseSource::seeded(seed);
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| ((2.0 * noise.uniform() - 1.0) * scale) as f32)
        .collect();
    Tensor::from_vec(v, shape, &Device::Cpu).expect("shape")
}

/// Token ids in `0..vocab` from a seeded source, as u32 (B, T).
pub fn tokens(seed: u64, b: usize, t: usize, vocab: usize) -> Tensor {
    let mut noise = NoiseSource::seeded(seed);
    let v: Vec<u32> = (0..b * t)
        .map(|_| ((noise.uniform() * vocab as f64) as u32).min(vocab as u32 - 1))
        .collect();
    Tensor::from_vec(v, (b, t), &Device::Cpu).expect("shape")
}

fn host(t: &Tensor) -> Vec<f32> {
    t.flatten_all().and_then(|t| t.to_vec1()).expect("host")
}

/// A clipped sum flat on the host, whichever form it came in.
pub fn flat(sum: &dp_models::GradientSum) -> Vec<f32> {
    sum.to_flat().expect("the clipped sum, flat")
}

/// Max |a − b| / max |b|.
pub fn relative_error(a: &[f32], b: &[f32]) -> f32 {
    error_against(a, b, 1e-12)
}

/// The most a ghost norm may exceed the reference, relative to the largest: the
/// worst-case rounding slack of the bound on these layers' shapes.
pub const GHOST_SLACK: f32 = 5e-4;

/// (max (b − a)⁺, max (a − b)⁺), each over max(max |b|, floor).
pub fn one_sided_error(a: &[f32], b: &[f32], floor: f32) -> (f32, f32) {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(floor);
    let below = a.iter().zip(b).fold(0.0f32, |m, (x, y)| m.max(y - x));
    let above = a.iter().zip(b).fold(0.0f32, |m, (x, y)| m.max(x - y));
    (below / scale, above / scale)
}

/// Max |a − b| / max(max |b|, floor).
fn error_against(a: &[f32], b: &[f32], floor: f32) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(floor);
    a.iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
        / scale
}

/// Each example's gradient of every parameter by name, from its own backward.
fn loop_gradients(net: &Net) -> Vec<BTreeMap<String, Vec<f32>>> {
    let params = net.taps.params();
    (0..net.batch)
        .map(|i| {
            let loss = (net.losses)(&[i]).expect("forward of one example");
            let grads = loss.sum_all().and_then(|l| l.backward()).expect("backward");
            params
                .iter()
                .map(|p| {
                    let g = match grads.get(p.var.as_tensor()) {
                        Some(g) => host(g),
                        None => vec![0.0; p.var.as_tensor().elem_count()],
                    };
                    (p.name.clone(), g)
                })
                .collect()
        })
        .collect()
}

/// Checks a network end to end: per-sample gradients, ghost and materialised norms, flat
/// and per-layer clipped sums, and losses, all against the per-example loop.
pub fn check(net: &Net, what: &str) {
    // candle-nn initialises from an unseeded generator: fix the weights, so that every
    // run checks the same network.
    let theta = random(97, &[net.taps.num_params()], 0.5);
    let theta = theta.to_vec1::<f32>().expect("weights");
    net.taps.set_flat_parameters(&theta).expect("weights");
    let all: Vec<usize> = (0..net.batch).collect();
    let reference = loop_gradients(net);
    let per_sample = net
        .taps
        .per_sample_gradients(|| (net.losses)(&all))
        .expect("per-sample gradients");
    for (name, g) in &per_sample {
        let g = host(g);
        let n = g.len() / net.batch;
        for (i, r) in reference.iter().enumerate() {
            // A parameter whose true gradient is zero (attention's key bias: softmax is
            // shift-invariant) is compared at the scale of the example's whole gradient:
            // float noise of 1e-6 of the largest entry, where a real error is of order 1.
            let floor = r.values().flatten().fold(0.0f32, |m, v| m.max(v.abs())) * 1e-1;
            let err = error_against(&g[i * n..(i + 1) * n], &r[name], floor);
            assert!(
                err < 1e-5,
                "{what}: {name} example {i}: relative error {err}"
            );
        }
    }
    check_norms(net, &reference, what);
    let c = median_norm(&reference) * 0.7;
    check_clipped(net, &reference, ClipRule::Flat { max_grad_norm: c }, what);
    check_clipped(
        net,
        &reference,
        ClipRule::PerLayer { max_grad_norm: c },
        what,
    );
}

fn squared_norm(g: &BTreeMap<String, Vec<f32>>, names: &[String]) -> f32 {
    names.iter().flat_map(|n| &g[n]).map(|v| v * v).sum()
}

fn median_norm(reference: &[BTreeMap<String, Vec<f32>>]) -> f64 {
    let mut norms: Vec<f32> = reference
        .iter()
        .map(|g| g.values().flatten().map(|v| v * v).sum::<f32>().sqrt())
        .collect();
    norms.sort_by(f32::total_cmp);
    norms[norms.len() / 2] as f64
}

fn check_norms(net: &Net, reference: &[BTreeMap<String, Vec<f32>>], what: &str) {
    let all: Vec<usize> = (0..net.batch).collect();
    for method in [
        NormMethod::Ghost,
        NormMethod::Materialised,
        NormMethod::Auto,
    ] {
        let norms = net
            .taps
            .squared_norms(|| (net.losses)(&all), method)
            .expect("norms");
        let total: f32 = reference
            .iter()
            .map(|g| g.values().flatten().map(|v| v * v).sum::<f32>())
            .fold(0.0, f32::max);
        for (name, sq) in norms {
            let expected: Vec<f32> = reference
                .iter()
                .map(|g| squared_norm(g, std::slice::from_ref(&name)))
                .collect();
            let got = host(&sq);
            if method == NormMethod::Materialised {
                let err = error_against(&got, &expected, total * 1e-3);
                assert!(
                    err < 1e-5,
                    "{what}: {name} {method:?} norms: relative error {err}"
                );
            } else {
                // Ghost norms are rigorous upper bounds (src/nn/ghost.rs): never below
                // the per-example loop's, and above it by the rounding slack only.
                let (below, above) = one_sided_error(&got, &expected, total * 1e-3);
                assert!(
                    below < 1e-5 && above < GHOST_SLACK,
                    "{what}: {name} {method:?} norms: {below} below, {above} above"
                );
            }
        }
    }
}

fn check_clipped(net: &Net, reference: &[BTreeMap<String, Vec<f32>>], rule: ClipRule, what: &str) {
    let all: Vec<usize> = (0..net.batch).collect();
    let out = net
        .taps
        .clipped_gradients(|| (net.losses)(&all), rule, NormMethod::Auto)
        .expect("clipped gradients");
    let params = net.taps.params();
    let mut owners: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in &params {
        owners
            .entry(p.owner.clone())
            .or_default()
            .push(p.name.clone());
    }
    let names: Vec<String> = params.iter().map(|p| p.name.clone()).collect();
    for (name, sum) in out.sum.tensors().expect("a DP-layer sum is per tensor") {
        let owner = &params
            .iter()
            .find(|p| &p.name == name)
            .expect("param")
            .owner;
        let mut expected = vec![0.0f32; reference[0][name].len()];
        for g in reference {
            let factor = match rule {
                ClipRule::PerLayer { .. } => {
                    rule.factor(squared_norm(g, &owners[owner]), owners.len())
                }
                _ => rule.factor(squared_norm(g, &names), 1),
            };
            for (e, v) in expected.iter_mut().zip(&g[name]) {
                *e += factor * v;
            }
        }
        // As for the per-sample gradients: a sum that is zero in exact arithmetic (the key
        // bias) is compared at the scale of the clipped gradient as a whole.
        let floor = median_norm(reference) as f32 * 1e-1;
        let err = error_against(&host(sum), &expected, floor);
        assert!(
            err < 1e-5,
            "{what}: {name} {rule:?} clipped sum: relative error {err}"
        );
    }
    let losses: Vec<f32> = (0..net.batch)
        .map(|i| host(&(net.losses)(&[i]).expect("loss"))[0])
        .collect();
    let err = relative_error(&out.losses, &losses);
    assert!(err < 1e-5, "{what}: losses differ: {err}");
}
