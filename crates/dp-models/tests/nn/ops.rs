//! The differentiable ops: the same values as candle-nn's fused ops, and gradients equal
//! to central finite differences (in f64).

use candle_core::{DType, Device, Tensor, Var};
use dp_models::nn::ops;

use super::check::{random, relative_error};

fn host64(t: &Tensor) -> Vec<f64> {
    t.flatten_all().and_then(|t| t.to_vec1()).expect("host")
}

/// The gradient of `Σ w ⊙ op(x)` by autograd and by central differences agree.
fn check_gradient(
    op: &dyn Fn(&Tensor) -> candle_core::Result<Tensor>,
    shape: &[usize],
    what: &str,
) {
    let x0 = random(51, shape, 1.5).to_dtype(DType::F64).expect("x");
    let w = random(52, shape, 1.0).to_dtype(DType::F64).expect("w");
    let objective = |x: &Tensor| (op(x)? * &w)?.sum_all();
    let x = Var::from_tensor(&x0).expect("var");
    let grads = objective(x.as_tensor())
        .and_then(|o| o.backward())
        .expect("backward");
    let analytic = host64(grads.get(x.as_tensor()).expect("a gradient reaches x"));
    let base = host64(&x0);
    let h = 1e-6;
    let numeric: Vec<f64> = (0..base.len())
        .map(|i| {
            let at = |delta: f64| {
                let mut v = base.clone();
                v[i] += delta;
                let t = Tensor::from_vec(v, shape, &Device::Cpu).expect("shape");
                objective(&t)
                    .and_then(|o| o.to_scalar::<f64>())
                    .expect("objective")
            };
            (at(h) - at(-h)) / (2.0 * h)
        })
        .collect();
    let scale = numeric.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let err = analytic
        .iter()
        .zip(&numeric)
        .fold(0.0f64, |m, (a, n)| m.max((a - n).abs()))
        / scale;
    assert!(err < 1e-6, "{what}: gradient relative error {err}");
}

#[test]
fn gradients_equal_finite_differences() {
    check_gradient(&|x| ops::layer_norm(x, 1e-5), &[3, 4, 6], "layer_norm");
    check_gradient(&|x| ops::rms_norm(x, 1e-6), &[3, 4, 6], "rms_norm");
    check_gradient(&ops::softmax_last_dim, &[3, 4, 6], "softmax_last_dim");
    let angles = random(53, &[4, 3], 3.0)
        .to_dtype(DType::F64)
        .expect("angles");
    let (cos, sin) = (angles.cos().expect("cos"), angles.sin().expect("sin"));
    check_gradient(&|x| ops::rope(x, &cos, &sin), &[2, 2, 4, 6], "rope");
}

#[test]
fn values_equal_candle_nn_fused_ops() {
    let x = random(54, &[3, 5, 8], 2.0);
    let ones = Tensor::ones(8, DType::F32, &Device::Cpu).expect("ones");
    let zeros = Tensor::zeros(8, DType::F32, &Device::Cpu).expect("zeros");
    let host = |t: Tensor| {
        t.flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .expect("host")
    };
    let pairs = [
        (
            ops::layer_norm(&x, 1e-5),
            candle_nn::ops::layer_norm(&x, &ones, &zeros, 1e-5),
            "layer_norm",
        ),
        (
            ops::rms_norm(&x, 1e-6),
            candle_nn::ops::rms_norm(&x, &ones, 1e-6),
            "rms_norm",
        ),
        (
            ops::softmax_last_dim(&x),
            candle_nn::ops::softmax_last_dim(&x),
            "softmax_last_dim",
        ),
    ];
    for (ours, theirs, what) in pairs {
        let err = relative_error(&host(ours.expect("ours")), &host(theirs.expect("theirs")));
        assert!(err < 1e-5, "{what}: {err}");
    }
    let q = random(55, &[2, 3, 4, 8], 1.0);
    let angles = random(56, &[4, 4], 3.0);
    let (cos, sin) = (angles.cos().expect("cos"), angles.sin().expect("sin"));
    let ours = ops::rope(&q, &cos, &sin).expect("rope");
    let theirs = candle_nn::rotary_emb::rope(&q, &cos, &sin).expect("candle rope");
    let err = relative_error(&host(ours), &host(theirs));
    assert!(err < 1e-6, "rope: {err}");
}

/// The value and the gradient of `Σ w ⊙ op(x)` through `op` at `x`.
fn value_and_gradient(
    op: &dyn Fn(&Tensor) -> candle_core::Result<Tensor>,
    x: &Tensor,
    w: &Tensor,
) -> (Vec<f32>, Vec<f32>) {
    let host = |t: &Tensor| {
        t.flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .expect("host")
    };
    let x = Var::from_tensor(x).expect("var");
    let y = op(x.as_tensor()).expect("forward");
    let grads = (&y * w)
        .and_then(|o| o.sum_all())
        .and_then(|o| o.backward())
        .expect("backward");
    (host(&y), host(grads.get(x.as_tensor()).expect("gradient")))
}

#[test]
fn one_pass_cpu_ops_equal_the_composed_ones() {
    let x = random(57, &[3, 7, 16], 2.0);
    let w = random(58, &[3, 7, 16], 1.0);
    // Masked scores, as causal attention feeds the softmax.
    let masked = x
        .broadcast_add(
            &ops::causal_mask(16, &Device::Cpu)
                .expect("mask")
                .narrow(0, 0, 7)
                .expect("rows"),
        )
        .expect("masked");
    type Op = Box<dyn Fn(&Tensor) -> candle_core::Result<Tensor>>;
    let cases: [(Op, Op, &Tensor, &str); 5] = [
        (
            Box::new(|x| ops::layer_norm(x, 1e-5)),
            Box::new(|x| ops::layer_norm_composed(x, 1e-5)),
            &x,
            "layer_norm",
        ),
        (
            Box::new(|x| ops::rms_norm(x, 1e-6)),
            Box::new(|x| ops::rms_norm_composed(x, 1e-6)),
            &x,
            "rms_norm",
        ),
        (
            Box::new(ops::softmax_last_dim),
            Box::new(ops::softmax_last_dim_composed),
            &masked,
            "softmax",
        ),
        (Box::new(ops::gelu), Box::new(|x| x.gelu()), &x, "gelu"),
        (
            Box::new(ops::gelu_erf),
            Box::new(|x| x.gelu_erf()),
            &x,
            "gelu_erf",
        ),
    ];
    for (fast, composed, input, what) in cases {
        let (v1, g1) = value_and_gradient(&*fast, input, &w);
        let (v2, g2) = value_and_gradient(&*composed, input, &w);
        let (ev, eg) = (relative_error(&v1, &v2), relative_error(&g1, &g2));
        assert!(
            ev < 1e-6 && eg < 1e-5,
            "{what}: value error {ev}, gradient error {eg}"
        );
    }
}

/// Exact GELU against PyTorch's `nn.GELU()` (`torch.nn.functional.gelu(x)`, erf form):
/// values computed in float64 as x·Φ(x).
#[test]
fn exact_gelu_equals_pytorchs_default() {
    let x = Tensor::new(&[-3.0f32, -0.5, 0.0, 1.0, 2.5], &Device::Cpu).expect("x");
    let expected = [
        -0.004_049_694f32,
        -0.154_268_77,
        0.0,
        0.841_344_7,
        2.484_475_8,
    ];
    let got: Vec<f32> = ops::gelu_erf(&x).and_then(|y| y.to_vec1()).expect("gelu");
    for (g, e) in got.iter().zip(expected) {
        assert!((g - e).abs() < 1e-6, "{g} vs {e}");
    }
}

/// Outside a private forward, a LayerNorm's scale and shift get their gradients from the
/// one-pass CPU op: `Σ g⊙x̂` and `Σ g` over every row, and the input's through `g·γ`.
#[test]
fn a_trainable_layer_norm_gets_its_scale_and_shift_gradients() {
    use candle_core::Module;
    let host =
        |t: &Tensor| -> Vec<f32> { t.flatten_all().and_then(|t| t.to_vec1()).expect("host") };
    let (_varmap, _taps, vb) = super::check::builder();
    let norm = dp_models::nn::layer_norm(6, 1e-5, vb.pp("ln")).expect("layer norm");
    let gamma = random(61, &[6], 1.0).affine(1.0, 1.0).expect("γ");
    norm.weight().set(&gamma).expect("γ");
    let x = candle_core::Var::from_tensor(&random(62, &[3, 4, 6], 2.0)).expect("x");
    let g = random(63, &[3, 4, 6], 1.0);
    let y = norm.forward(x.as_tensor()).expect("forward");
    let want_y = ops::layer_norm_composed(x.as_tensor(), 1e-5)
        .and_then(|h| h.broadcast_mul(&gamma))
        .expect("composed forward");
    assert!(relative_error(&host(&y), &host(&want_y)) < 1e-5, "values");
    let grads = (y * &g)
        .and_then(|l| l.sum_all())
        .and_then(|l| l.backward())
        .expect("backward");
    let xhat = ops::layer_norm_composed(x.as_tensor(), 1e-5).expect("x̂");
    let rows = |t: Tensor| {
        t.reshape((12, 6))
            .and_then(|t| t.sum(0))
            .map(|t| host(&t))
            .expect("sum")
    };
    let want_gamma = rows((&g * &xhat).expect("g x̂"));
    let want_beta = rows(g.clone());
    let got = |v: &candle_core::Var| host(grads.get(v.as_tensor()).expect("a gradient"));
    assert!(relative_error(&got(norm.weight()), &want_gamma) < 1e-5, "γ");
    let bias = norm.bias().expect("a bias");
    assert!(relative_error(&got(bias), &want_beta) < 1e-5, "β");
    let composed = (ops::layer_norm_composed(x.as_tensor(), 1e-5)
        .and_then(|h| h.broadcast_mul(&gamma))
        .and_then(|h| h * &g))
    .and_then(|l| l.sum_all())
    .and_then(|l| l.backward())
    .expect("composed");
    let want_x = host(composed.get(x.as_tensor()).expect("x gradient"));
    assert!(relative_error(&got(&x), &want_x) < 1e-5, "x");
}

/// The output and the gradients of q, k, v of `Σ w ⊙ f(q, k, v)`.
fn attention_value_and_gradients(
    f: &dyn Fn(&Tensor, &Tensor, &Tensor) -> candle_core::Result<Tensor>,
    inputs: [&Tensor; 3],
    w: &Tensor,
) -> Vec<Vec<f32>> {
    let host = |t: &Tensor| {
        t.flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .expect("host")
    };
    let vars = inputs.map(|t| Var::from_tensor(t).expect("var"));
    let y = f(
        vars[0].as_tensor(),
        vars[1].as_tensor(),
        vars[2].as_tensor(),
    )
    .expect("forward");
    let grads = (&y * w)
        .and_then(|o| o.sum_all())
        .and_then(|o| o.backward())
        .expect("backward");
    let mut out = vec![host(&y)];
    out.extend(vars.iter().map(|v| {
        host(
            grads
                .get(v.as_tensor())
                .expect("a gradient reaches q, k, v"),
        )
    }));
    out
}

/// Heads side by side in (B, T, H·w), and already split into (B, H, T, w) with one "head".
#[test]
fn attention_in_one_op_equals_the_composed_attention() {
    for (shape, heads) in [(vec![2, 9, 24], 3), (vec![2, 3, 9, 8], 1)] {
        let (q, k, v) = (
            random(61, &shape, 1.5),
            random(62, &shape, 1.5),
            random(63, &shape, 1.0),
        );
        let w = random(64, &shape, 1.0);
        for causal in [false, true] {
            let fast = attention_value_and_gradients(
                &|q, k, v| ops::attention(q, k, v, heads, causal),
                [&q, &k, &v],
                &w,
            );
            let composed = attention_value_and_gradients(
                &|q, k, v| ops::attention_composed(q, k, v, heads, causal),
                [&q, &k, &v],
                &w,
            );
            let outputs = ["output", "dq", "dk", "dv"];
            for (what, (a, b)) in outputs.iter().zip(fast.iter().zip(&composed)) {
                let err = relative_error(a, b);
                assert!(
                    err < 1e-5,
                    "{shape:?}, causal {causal}, {what}: error {err}"
                );
            }
        }
    }
}

#[test]
fn attention_gradients_equal_finite_differences() {
    let shape = [2, 5, 8];
    let at = |seed| random(seed, &shape, 1.0).to_dtype(DType::F64).expect("f64");
    let (k, v) = (at(65), at(66));
    for causal in [false, true] {
        check_gradient(
            &|q| ops::attention(q, &k, &v, 2, causal),
            &shape,
            "attention dq",
        );
        check_gradient(
            &|x| ops::attention(&k, x, &v, 2, causal),
            &shape,
            "attention dk",
        );
        check_gradient(
            &|x| ops::attention(&k, &v, x, 2, causal),
            &shape,
            "attention dv",
        );
    }
}

#[test]
fn causal_attention_never_looks_ahead() {
    let shape = [1, 6, 8];
    let (q, k, v) = (
        random(67, &shape, 1.0),
        random(68, &shape, 1.0),
        random(69, &shape, 1.0),
    );
    let before = ops::attention(&q, &k, &v, 2, true).expect("attention");
    // Change the last position's keys and values: every earlier output stays.
    let changed = |t: &Tensor| {
        let last = (t.narrow(1, 5, 1).expect("last") * 3.0).expect("scaled");
        Tensor::cat(&[t.narrow(1, 0, 5).expect("first"), last], 1).expect("cat")
    };
    let after = ops::attention(&q, &changed(&k), &changed(&v), 2, true).expect("attention");
    let head = |t: &Tensor| {
        t.narrow(1, 0, 5)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .expect("host")
    };
    assert_eq!(head(&before), head(&after));
}
