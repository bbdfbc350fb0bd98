//! The per-example losses as a PyTorch port uses them: signed targets with the `-100`
//! ignore index, sum and mean over positions, and no silent wrap of a bad class id.

use candle_core::{DType, Device, Tensor};
use dp_models::nn::loss::{self, Reduction};

use super::check::random;

fn host(t: &Tensor) -> Vec<f32> {
    t.to_vec1().expect("host")
}

#[test]
fn pytorchs_ignore_index_on_signed_targets_equals_an_unsigned_one() {
    let logits = random(71, &[2, 3, 4], 2.0);
    let signed = Tensor::new(&[[1i64, -100, 3], [-100, -100, 0]], &Device::Cpu).expect("t");
    let unsigned = Tensor::new(&[[1u32, 9, 3], [9, 9, 0]], &Device::Cpu).expect("t");
    let a = loss::cross_entropy(&logits, &signed, Some(-100)).expect("signed");
    let b = loss::cross_entropy(&logits, &unsigned, Some(9)).expect("unsigned");
    assert_eq!(host(&a), host(&b));
    // By hand: example 0 counts positions 0 and 2, example 1 position 2.
    let lp = candle_nn::ops::log_softmax(&logits, 2).expect("log-softmax");
    let lp: Vec<Vec<Vec<f32>>> = lp.to_vec3().expect("host");
    let want = [-(lp[0][0][1] + lp[0][2][3]) / 2.0, -lp[1][2][0]];
    for (got, want) in host(&a).iter().zip(want) {
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    }
    let sum =
        loss::cross_entropy_reduced(&logits, &signed, Some(-100), Reduction::Sum).expect("sum");
    let (sum, mean) = (host(&sum), host(&a));
    assert!((sum[0] - 2.0 * mean[0]).abs() < 1e-6 && (sum[1] - mean[1]).abs() < 1e-6);
}

#[test]
fn a_target_outside_the_classes_is_an_error_not_a_wrapped_id() {
    let logits = random(72, &[2, 4], 1.0);
    for targets in [
        Tensor::new(&[1i64, -100], &Device::Cpu).expect("t"),
        Tensor::new(&[1i64, 4], &Device::Cpu).expect("t"),
        Tensor::new(&[1u32, 7], &Device::Cpu).expect("t"),
    ] {
        let err = loss::cross_entropy(&logits, &targets, None).expect_err("refused");
        assert!(err.to_string().contains("not a class in 0..4"), "{err}");
    }
    let floats = Tensor::new(&[1f32, 0.0], &Device::Cpu).expect("t");
    assert!(loss::cross_entropy(&logits, &floats, None).is_err());
    let empty = Tensor::zeros((0, 4), DType::F32, &Device::Cpu).expect("empty");
    let none = Tensor::zeros(0, DType::U32, &Device::Cpu).expect("none");
    assert_eq!(
        loss::cross_entropy(&empty, &none, None)
            .expect("empty")
            .dims(),
        [0]
    );
}
