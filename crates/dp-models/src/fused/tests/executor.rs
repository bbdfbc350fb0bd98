//! The fused tier against the per-example reference.

use crate::fused::{from_torch, FusedModel, LayerSpec, NetSpec};
use crate::loss::cross_entropy;
use crate::ClipRule;
use candle_core::{Device, Tensor};
use dp_mechanisms::NoiseSource;

use super::mnist_cnn;
use super::reference::per_example;

fn batch(noise: &mut NoiseSource, n: usize, size: usize) -> (Vec<f32>, Vec<u32>) {
    let x = (0..n * size).map(|_| noise.uniform() as f32).collect();
    let y = (0..n)
        .map(|_| (noise.uniform() * 10.0) as u32 % 10)
        .collect();
    (x, y)
}

/// max |a − b| / max |b|.
fn relative_error(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-12);
    a.iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
        / scale
}

/// A tanh MLP on flat inputs as a fused spec.
fn mlp(inputs: usize, hidden: &[usize], classes: usize) -> crate::Result<NetSpec> {
    let mut layers = vec![LayerSpec::Flatten];
    for &width in hidden {
        layers.extend([
            LayerSpec::Linear {
                out_features: width,
            },
            LayerSpec::Tanh,
        ]);
    }
    layers.push(LayerSpec::Linear {
        out_features: classes,
    });
    NetSpec::new(1, 1, inputs, &layers)
}

fn specs() -> Vec<(&'static str, NetSpec)> {
    vec![
        ("mnist-cnn-tanh", mnist_cnn(LayerSpec::Tanh).expect("valid")),
        ("mnist-cnn-relu", mnist_cnn(LayerSpec::Relu).expect("valid")),
        ("mlp", mlp(20, &[16, 8], 10).expect("valid")),
        (
            "conv-avgpool-linear",
            NetSpec::new(
                1,
                12,
                12,
                &[
                    LayerSpec::Conv2d {
                        out_channels: 4,
                        kernel: 3,
                        stride: 1,
                        padding: 1,
                    },
                    LayerSpec::AvgPool {
                        kernel: 2,
                        stride: 2,
                    },
                    LayerSpec::Flatten,
                    LayerSpec::Linear { out_features: 10 },
                ],
            )
            .expect("valid"),
        ),
        (
            "conv-relu-linear",
            NetSpec::new(
                1,
                12,
                12,
                &[
                    LayerSpec::Conv2d {
                        out_channels: 4,
                        kernel: 3,
                        stride: 1,
                        padding: 1,
                    },
                    LayerSpec::Relu,
                    LayerSpec::Flatten,
                    LayerSpec::Linear { out_features: 10 },
                ],
            )
            .expect("valid"),
        ),
        (
            "two-convs-padding-avgpool",
            NetSpec::new(
                1,
                12,
                12,
                &[
                    LayerSpec::Conv2d {
                        out_channels: 4,
                        kernel: 3,
                        stride: 1,
                        padding: 1,
                    },
                    LayerSpec::AvgPool {
                        kernel: 2,
                        stride: 2,
                    },
                    LayerSpec::Conv2d {
                        out_channels: 6,
                        kernel: 3,
                        stride: 2,
                        padding: 0,
                    },
                    LayerSpec::Flatten,
                    LayerSpec::Linear { out_features: 10 },
                ],
            )
            .expect("valid"),
        ),
        (
            "maxpool-on-odd-size",
            NetSpec::new(
                1,
                12,
                12,
                &[
                    LayerSpec::Conv2d {
                        out_channels: 4,
                        kernel: 3,
                        stride: 2,
                        padding: 0,
                    },
                    LayerSpec::MaxPool {
                        kernel: 2,
                        stride: 2,
                    },
                    LayerSpec::Flatten,
                    LayerSpec::Linear { out_features: 10 },
                ],
            )
            .expect("valid"),
        ),
        (
            "conv-relu-avgpool-conv-tanh-maxpool",
            NetSpec::new(
                1,
                12,
                12,
                &[
                    LayerSpec::Conv2d {
                        out_channels: 4,
                        kernel: 3,
                        stride: 1,
                        padding: 1,
                    },
                    LayerSpec::Relu,
                    LayerSpec::AvgPool {
                        kernel: 2,
                        stride: 2,
                    },
                    LayerSpec::Conv2d {
                        out_channels: 6,
                        kernel: 3,
                        stride: 2,
                        padding: 0,
                    },
                    LayerSpec::Tanh,
                    LayerSpec::MaxPool {
                        kernel: 2,
                        stride: 2,
                    },
                    LayerSpec::Flatten,
                    LayerSpec::Linear { out_features: 10 },
                ],
            )
            .expect("valid"),
        ),
    ]
}

/// For every model, per-sample gradients from the fused backward equal the per-example
/// autograd loop, the logits agree, the clipped sum is Σ cᵢ∇ᵢ and the plain sum is Σ∇ᵢ.
#[test]
fn fused_per_sample_gradients_match_a_per_example_loop() -> Result<(), Box<dyn std::error::Error>> {
    let mut noise = NoiseSource::seeded(1);
    for (name, spec) in specs() {
        let model = FusedModel::new(spec.clone(), &mut noise)?;
        let n = 7;
        let (x, y) = batch(&mut noise, n, spec.input_size());
        let logits = model.forward(&Tensor::from_vec(
            x.clone(),
            (n, spec.input_size()),
            &Device::Cpu,
        )?)?;
        let logits: Vec<f32> = logits.flatten_all()?.to_vec1()?;
        let (_, dlogits) = cross_entropy(&logits, &y, 10);
        let psg = model.per_sample_gradients(&dlogits)?;
        let torch = model.to_torch()?;
        for i in 0..n {
            let (grads, ref_logits) = per_example(
                &spec,
                &torch,
                &x[i * spec.input_size()..][..spec.input_size()],
                y[i],
            )?;
            let want = from_torch(&spec, &grads)?;
            let err = relative_error(&psg[i], &want);
            assert!(
                err < 1e-5,
                "{name}: sample {i} per-sample gradient error {err}"
            );
            let logit_err = relative_error(&logits[i * 10..][..10], &ref_logits);
            assert!(logit_err < 1e-5, "{name}: logits error {logit_err}");
        }
        // Clipped and plain sums from the same backward op.
        let clip = 0.5f32;
        let (sum, norms) = model.backward(
            &Tensor::from_vec(dlogits.clone(), (n, 10), &Device::Cpu)?,
            ClipRule::Flat {
                max_grad_norm: f64::from(clip),
            },
        )?;
        let (sum, norms): (Vec<f32>, Vec<f32>) = (sum.to_vec1()?, norms.to_vec1()?);
        let mut want = vec![0.0f32; spec.num_params()];
        for (i, g) in psg.iter().enumerate() {
            let sq: f32 = g.iter().map(|v| v * v).sum();
            assert!((norms[i] - sq).abs() <= 1e-5 * sq, "{name}: norm {i}");
            let c = (clip / (sq.sqrt() + 1e-6)).min(1.0);
            want.iter_mut().zip(g).for_each(|(w, v)| *w += c * v);
        }
        assert!(relative_error(&sum, &want) < 1e-5, "{name}: clipped sum");
        let (plain, _) = model.backward(
            &Tensor::from_vec(dlogits, (n, 10), &Device::Cpu)?,
            ClipRule::None,
        )?;
        let plain: Vec<f32> = plain.to_vec1()?;
        let mut want = vec![0.0f32; spec.num_params()];
        psg.iter()
            .for_each(|g| want.iter_mut().zip(g).for_each(|(w, v)| *w += v));
        assert!(relative_error(&plain, &want) < 1e-5, "{name}: plain sum");
    }
    Ok(())
}

#[test]
fn mnist_cnn_has_26010_parameters_and_layouts_round_trip() -> Result<(), Box<dyn std::error::Error>>
{
    let spec = mnist_cnn(LayerSpec::Tanh)?;
    assert_eq!(spec.num_params(), 26_010);
    let model = FusedModel::new(spec.clone(), &mut NoiseSource::seeded(2))?;
    let torch = model.to_torch()?;
    assert_eq!(
        torch
            .iter()
            .map(|t| t.weight_shape.clone())
            .collect::<Vec<_>>(),
        vec![
            vec![16, 1, 8, 8],
            vec![32, 16, 4, 4],
            vec![32, 512],
            vec![10, 32]
        ]
    );
    assert_eq!(from_torch(&spec, &torch)?, model.theta_values()?);
    Ok(())
}

/// The same seed gives the same weights and bit-identical sums, whatever the thread count.
#[test]
fn fused_steps_are_bit_reproducible() -> Result<(), Box<dyn std::error::Error>> {
    let spec = mnist_cnn(LayerSpec::Tanh)?;
    let run =
        |threads: usize| -> Result<(Vec<f32>, Vec<f32>), Box<dyn std::error::Error + Send + Sync>> {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()?;
            pool.install(|| {
                let mut noise = NoiseSource::seeded(3);
                let model = FusedModel::new(spec.clone(), &mut noise).map_err(|e| e.to_string())?;
                let (x, y) = batch(&mut noise, 100, 784);
                let logits = model
                    .forward(&Tensor::from_vec(x, (100, 784), &Device::Cpu)?)
                    .map_err(|e| e.to_string())?;
                let (_, d) = cross_entropy(&logits.flatten_all()?.to_vec1()?, &y, 10);
                let (sum, norms) = model
                    .backward(
                        &Tensor::from_vec(d, (100, 10), &Device::Cpu)?,
                        ClipRule::Flat { max_grad_norm: 0.1 },
                    )
                    .map_err(|e| e.to_string())?;
                Ok((sum.to_vec1()?, norms.to_vec1()?))
            })
        };
    let one = run(1).map_err(|e| e.to_string())?;
    let two = run(2).map_err(|e| e.to_string())?;
    let again = run(2).map_err(|e| e.to_string())?;
    assert!(one
        .0
        .iter()
        .zip(&two.0)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
    assert!(two
        .0
        .iter()
        .zip(&again.0)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
    assert_eq!(one.1, two.1);
    Ok(())
}

#[test]
fn invalid_networks_are_rejected() {
    assert!(
        NetSpec::new(1, 4, 4, &[LayerSpec::Linear { out_features: 2 }]).is_err(),
        "linear needs flatten"
    );
    assert!(NetSpec::new(
        1,
        4,
        4,
        &[
            LayerSpec::Conv2d {
                out_channels: 2,
                kernel: 9,
                stride: 1,
                padding: 0
            },
            LayerSpec::Flatten,
            LayerSpec::Linear { out_features: 2 }
        ]
    )
    .is_err());
    assert!(
        NetSpec::new(1, 4, 4, &[LayerSpec::Flatten]).is_err(),
        "no parameters"
    );
    assert!(NetSpec::new(
        0,
        4,
        4,
        &[LayerSpec::Flatten, LayerSpec::Linear { out_features: 1 }]
    )
    .is_err());
}

#[test]
fn safetensors_round_trip_in_pytorch_layout() -> Result<(), Box<dyn std::error::Error>> {
    let spec = mnist_cnn(LayerSpec::Tanh)?;
    let model = FusedModel::new(spec.clone(), &mut NoiseSource::seeded(11))?;
    let path = std::env::temp_dir().join(format!("dp-models-{}.safetensors", std::process::id()));
    model.save_safetensors(&path)?;
    let tensors = candle_core::safetensors::load(&path, &Device::Cpu)?;
    assert_eq!(tensors["0.weight"].dims(), &[16, 1, 8, 8]);
    assert_eq!(tensors["7.weight"].dims(), &[32, 512]);
    assert_eq!(tensors["9.bias"].dims(), &[10]);
    let loaded = FusedModel::load_safetensors(spec.clone(), &path)?;
    assert_eq!(loaded.theta_values()?, model.theta_values()?);
    // A file for another architecture is refused with a typed error.
    assert!(FusedModel::load_safetensors(mlp(784, &[8], 10)?, &path).is_err());
    // The papers' network from the DP layers writes the same names and shapes.
    let net = crate::models::mnist_cnn(
        crate::models::Activation::Tanh,
        &mut NoiseSource::seeded(11),
    )?;
    net.taps().state_dict().write(&path)?;
    let ours = candle_core::safetensors::load(&path, &Device::Cpu)?;
    let mut names: Vec<_> = ours.keys().collect();
    names.sort();
    let mut want: Vec<_> = tensors.keys().collect();
    want.sort();
    assert_eq!(names, want);
    for (name, t) in &tensors {
        assert_eq!(ours[name].dims(), t.dims(), "{name}");
    }
    let _ = std::fs::remove_file(path);
    Ok(())
}

/// A backward whose batch does not match the last forward is an error, not a panic.
#[test]
fn mismatched_backward_is_an_error() -> Result<(), Box<dyn std::error::Error>> {
    let spec = mlp(4, &[3], 10)?;
    let model = FusedModel::new(spec, &mut NoiseSource::seeded(5))?;
    model.forward(&Tensor::zeros(
        (3, 4),
        candle_core::DType::F32,
        &Device::Cpu,
    )?)?;
    let wrong = Tensor::zeros((2, 10), candle_core::DType::F32, &Device::Cpu)?;
    assert!(model.backward(&wrong, ClipRule::None).is_err());
    let right = Tensor::zeros((3, 10), candle_core::DType::F32, &Device::Cpu)?;
    assert!(model.backward(&right, ClipRule::None).is_ok());
    Ok(())
}

/// A backward after an inference forward (`Classifier::logits`) is refused: its
/// activations were not kept, and the training forward's before it are overwritten.
#[test]
fn a_backward_after_an_inference_forward_is_an_error() -> Result<(), Box<dyn std::error::Error>> {
    use crate::Classifier;
    let spec = mlp(4, &[3], 10)?;
    let model = FusedModel::new(spec, &mut NoiseSource::seeded(5))?;
    let x = Tensor::zeros((3, 4), candle_core::DType::F32, &Device::Cpu)?;
    let dlogits = Tensor::zeros((3, 10), candle_core::DType::F32, &Device::Cpu)?;
    model.forward(&x)?;
    let logits = model.logits(&x)?;
    assert_eq!(logits, model.forward(&x)?.flatten_all()?.to_vec1::<f32>()?);
    model.logits(&x)?;
    let err = model
        .backward(&dlogits, ClipRule::None)
        .expect_err("a backward after an inference forward must be refused");
    assert!(err.to_string().contains("inference forward"), "{err}");
    Ok(())
}

/// The MNIST CNN's arithmetic per sample, counted by hand: multiply-adds conv1 13·13·16·64
/// = 173,056, conv2 5·5·32·256 = 204,800, fc1 512·32 = 16,384, fc2 32·10 = 320; the
/// backward adds the weight gradients of all four, the input gradients of all but the
/// first, and 4·P for the norm and clipped sum (P = 26,010).
#[test]
fn mnist_cnn_flops_per_sample() -> crate::Result<()> {
    use crate::models::{mnist_cnn, Activation};
    let net = mnist_cnn(Activation::Tanh, &mut NoiseSource::seeded(1))?;
    let flops = net.flops_per_sample().expect("the fused executor counts");
    let macs = [173_056u64, 204_800, 16_384, 320];
    let forward: u64 = macs.iter().map(|m| 2 * m).sum();
    let inputs: u64 = macs[1..].iter().map(|m| 2 * m).sum();
    assert_eq!(flops.forward, forward);
    assert_eq!(flops.backward, forward + inputs + 4 * 26_010);
    Ok(())
}
