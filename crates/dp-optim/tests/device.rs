//! The engine's device path (θ, clipped sums and moments as tensors where the model keeps
//! them, only the noise crossing from the host), forced on the CPU: the same run as the
//! host path, step for step, under SGD and Adam, through a checkpoint and a rollback.

use candle_core::{Device, Module, Tensor};
use candle_nn::VarMap;
use dp_mechanisms::NoiseSource;
use dp_models::nn::{self, loss, DpVarBuilder, PrivateNet, Taps};
use dp_models::{GradientSum, PrivateModel, TrainingData};
use dp_optim::{make_private, Noise, Optimizer, PrivacyEngine, PrivateSettings};

/// Regression rows with float targets.
struct Rows {
    x: Tensor,
    y: Tensor,
}

impl TrainingData for Rows {
    fn len(&self) -> usize {
        self.x.dims()[0]
    }
    fn validate(&self) -> dp_models::Result<()> {
        Ok(())
    }
    fn digest(&self) -> String {
        "device-test-rows".into()
    }
}

fn rows() -> Rows {
    let mut noise = NoiseSource::seeded(5);
    let x: Vec<f32> = (0..200 * 3)
        .map(|_| noise.standard_normal() as f32)
        .collect();
    let y: Vec<f32> = x
        .chunks(3)
        .map(|r| r[0] - 2.0 * r[1] + r[2] * r[2])
        .collect();
    Rows {
        x: Tensor::from_vec(x, (200, 3), &Device::Cpu).expect("x"),
        y: Tensor::from_vec(y, (200, 1), &Device::Cpu).expect("y"),
    }
}

/// Per-example losses of a batch of rows.
type Losses = Box<dyn Fn(&Rows, &[usize]) -> dp_models::Result<Tensor>>;
type Net = PrivateNet<Rows, Losses>;

/// A two-layer regressor with LayerNorm; weights set from `theta` when given.
fn network(on_device: bool, theta: Option<&[f32]>) -> Net {
    let (varmap, taps, device) = (VarMap::new(), Taps::new(), Device::Cpu);
    let vb = DpVarBuilder::from_varmap(&varmap, &taps, &device);
    let fc1 = nn::linear(3, 16, vb.pp("fc1")).expect("layer");
    let norm = nn::layer_norm(16, 1e-5, vb.pp("norm")).expect("layer");
    let fc2 = nn::linear(16, 1, vb.pp("fc2")).expect("layer");
    if let Some(theta) = theta {
        taps.set_flat_parameters(theta).expect("weights");
    }
    let losses: Losses = Box::new(move |d: &Rows, b: &[usize]| {
        let idx: Vec<u32> = b.iter().map(|&i| i as u32).collect();
        let idx = Tensor::from_vec(idx, b.len(), &Device::Cpu)?;
        let h = norm
            .forward(&fc1.forward(&d.x.index_select(&idx, 0)?)?)?
            .gelu()?;
        Ok(loss::mse(&fc2.forward(&h)?, &d.y.index_select(&idx, 0)?)?)
    });
    PrivateNet::new(&varmap, &taps, &device, losses)
        .expect("covered")
        .with_parameters_on_device(on_device)
}

fn engine(on_device: bool, theta: &[f32], optimizer: Optimizer, data: &Rows) -> PrivacyEngine<Net> {
    engine_with_batch(on_device, theta, optimizer, data, 20)
}

fn engine_with_batch(
    on_device: bool,
    theta: &[f32],
    optimizer: Optimizer,
    data: &Rows,
    batch_size: usize,
) -> PrivacyEngine<Net> {
    let settings = PrivateSettings {
        batch_size,
        epochs: 3,
        max_grad_norm: 1.0,
        noise: Noise::Multiplier(1.0),
        delta: 1e-5,
        optimizer,
        ..PrivateSettings::default()
    };
    make_private(
        network(on_device, Some(theta)),
        data,
        &settings,
        NoiseSource::seeded(9),
    )
    .expect("engine")
    .into_engine()
}

fn max_difference(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
}

#[test]
fn device_path_equals_the_host_path() -> dp_optim::Result<()> {
    let data = rows();
    let theta = network(false, None).parameters()?;
    let adam = Optimizer::Adam {
        lr: 1e-2,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
    };
    let sgd = Optimizer::Sgd {
        lr: 0.05,
        momentum: 0.9,
    };
    for (optimizer, tolerance) in [(sgd, 0.0), (adam, 1e-5)] {
        let mut host = engine(false, &theta, optimizer, &data);
        let mut device = engine(true, &theta, optimizer, &data);
        assert!(host.model().device_parameters().is_none());
        assert!(device.model().device_parameters().is_some());
        for step in 0..15 {
            let (a, b) = (host.step(&data)?, device.step(&data)?);
            assert_eq!(
                a.batch_size, b.batch_size,
                "{optimizer:?} step {step}: the same batches"
            );
            let d = max_difference(&host.model().parameters()?, &device.model().parameters()?);
            assert!(
                d <= tolerance,
                "{optimizer:?} step {step}: θ differs by {d}"
            );
        }
        assert_eq!(host.epsilon()?, device.epsilon()?);
    }
    Ok(())
}

#[test]
fn device_path_checkpoints_resume_and_roll_back() -> dp_optim::Result<()> {
    let data = rows();
    let theta = network(false, None).parameters()?;
    let adam = Optimizer::Adam {
        lr: 1e-2,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
    };
    let mut first = engine(true, &theta, adam, &data);
    for _ in 0..5 {
        first.step(&data)?;
    }
    let checkpoint = first.checkpoint()?;
    let mut resumed = engine(true, &theta, adam, &data);
    resumed.restore(&checkpoint)?;
    assert_eq!(resumed.model().parameters()?, first.model().parameters()?);
    // θ and the moments (on the device) continue exactly as the uninterrupted run.
    for step in 0..5 {
        first.step(&data)?;
        resumed.step(&data)?;
        let d = max_difference(&first.model().parameters()?, &resumed.model().parameters()?);
        assert_eq!(d, 0.0, "step {step} after the resume");
    }
    // The replayed ledger composes its first five steps as one entry: PLD's float
    // arithmetic then differs in the last digits (both are upper bounds).
    let (a, b) = (
        resumed.epsilon()?.unwrap_or(f64::NAN),
        first.epsilon()?.unwrap_or(f64::NAN),
    );
    assert!((a - b).abs() <= 1e-9 * b, "epsilon {a} vs {b}");
    // A rollback puts θ and the moments back; the ledger keeps the step.
    let saved = resumed.snapshot()?;
    let before = resumed.model().parameters()?;
    let moments_before = resumed.checkpoint()?.moments;
    resumed.step(&data)?;
    resumed.rollback(saved)?;
    assert_eq!(resumed.model().parameters()?, before);
    assert_eq!(resumed.checkpoint()?.moments, moments_before);
    assert_eq!(resumed.steps(), 11);
    assert!(resumed.epsilon()? > first.epsilon()?);
    Ok(())
}

#[test]
fn an_empty_poisson_batch_is_a_noise_only_step_on_both_paths() -> dp_optim::Result<()> {
    let data = rows();
    let theta = network(false, None).parameters()?;
    for on_device in [false, true] {
        // Expected batch 1 of 200: about a third of the draws are empty.
        let mut e = engine_with_batch(
            on_device,
            &theta,
            Optimizer::Sgd {
                lr: 0.1,
                momentum: 0.0,
            },
            &data,
            1,
        );
        // Draw until the Poisson batch is empty (each attempt a fresh charge, none
        // committed: a dropped charge costs nothing).
        let (charge, batch) = (0..1_000)
            .find_map(|_| {
                let mut charge = e.begin_step(&data).ok()?;
                let batch = e.draw_batch(&mut charge).ok()?;
                batch.is_empty().then_some((charge, batch))
            })
            .expect("an empty Poisson batch");
        let clipped = e.clipped_sum(&data, &batch)?;
        let noisy = e.release(charge, clipped)?;
        assert!(noisy.sum()?.iter().any(|&g| g != 0.0), "noise only");
        let report = e.apply_update(&noisy)?;
        assert_eq!(report.batch_size, 0);
        assert_ne!(e.model().parameters()?, theta);
    }
    Ok(())
}

/// A network whose per-tensor clipped sum loses its last tensor, or reshapes it.
struct Broken {
    net: Net,
    reshape: bool,
}

impl PrivateModel for Broken {
    type Data = Rows;

    fn num_params(&self) -> usize {
        self.net.num_params()
    }
    fn parameters(&self) -> dp_models::Result<Vec<f32>> {
        self.net.parameters()
    }
    fn set_parameters(&mut self, theta: &[f32]) -> dp_models::Result<()> {
        self.net.set_parameters(theta)
    }
    fn device_parameters(&self) -> Option<Vec<candle_core::Var>> {
        self.net.device_parameters()
    }
    fn clipped_gradient(
        &self,
        data: &Rows,
        batch: &[usize],
        rule: dp_models::ClipRule,
    ) -> dp_models::Result<dp_models::ClippedGradient> {
        let mut clipped = self.net.clipped_gradient(data, batch, rule)?;
        let GradientSum::Tensors(sums) = &mut clipped.sum else {
            panic!("the DP layers return one sum per tensor");
        };
        let (name, last) = sums.pop().expect("a tensor");
        if self.reshape {
            let values = last.elem_count();
            sums.push((name, last.reshape((1, values))?)); // the same values, another shape
        }
        Ok(clipped)
    }
}

#[test]
fn a_sum_that_misses_or_reshapes_a_tensor_is_refused_on_both_paths() -> dp_optim::Result<()> {
    let data = rows();
    let theta = network(false, None).parameters()?;
    for (on_device, reshape) in [(false, false), (true, false), (true, true)] {
        let net = network(on_device, Some(&theta));
        let settings = PrivateSettings {
            batch_size: 20,
            epochs: 1,
            noise: Noise::Multiplier(1.0),
            ..PrivateSettings::default()
        };
        let model = Broken { net, reshape };
        let mut e = make_private(model, &data, &settings, NoiseSource::seeded(3))?.into_engine();
        let result = e.step(&data);
        assert!(
            matches!(result, Err(dp_optim::Error::UnprotectedParameter(_))),
            "on device {on_device}, reshaped {reshape}: {result:?}"
        );
        assert_eq!(e.model().parameters()?, theta, "nothing applied");
        assert!(
            e.ledger().expect("private").entries.is_empty(),
            "nothing charged"
        );
    }
    Ok(())
}
