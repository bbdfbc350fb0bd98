//! Private fine-tuning of a model with a frozen (public) part through `make_private`: the
//! engine's θ is the trainable parameters only, the frozen ones never move, and a
//! checkpoint does not resume onto other frozen weights.

use candle_core::{Device, Module, Tensor};
use candle_nn::VarMap;
use dp_mechanisms::NoiseSource;
use dp_models::nn::{self, loss, DpVarBuilder, Linear, PrivateNet, Taps};
use dp_models::{PrivateModel, TrainingData};
use dp_optim::{make_private, Error, Noise, Optimizer, PrivateSettings, PrivateTraining};

struct Points {
    x: Tensor,
    y: Tensor,
}

impl TrainingData for Points {
    fn len(&self) -> usize {
        self.x.dims()[0]
    }
    fn validate(&self) -> dp_models::Result<()> {
        Ok(())
    }
    fn digest(&self) -> String {
        "points".into()
    }
}

fn points(n: usize) -> Points {
    let mut noise = NoiseSource::seeded(3);
    let x: Vec<f32> = (0..n * 4).map(|_| noise.standard_normal() as f32).collect();
    let y: Vec<u32> = x.chunks(4).map(|r| u32::from(r[0] + r[1] > 0.0)).collect();
    Points {
        x: Tensor::from_vec(x, (n, 4), &Device::Cpu).expect("x"),
        y: Tensor::from_vec(y, n, &Device::Cpu).expect("y"),
    }
}

/// A frozen stem (a "pretrained" public layer with fixed weights `stem`) under a
/// trainable head.
struct Model {
    stem: Linear,
    head: Linear,
}

impl Module for Model {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.head.forward(&self.stem.forward(x)?.tanh()?)
    }
}

type Losses = Box<dyn Fn(&Points, &[usize]) -> dp_models::Result<Tensor>>;
type Net = PrivateNet<Points, Losses>;

fn train(stem: f32) -> (PrivateTraining<Net>, Taps, Model) {
    let (varmap, taps) = (VarMap::new(), Taps::new());
    let vb = DpVarBuilder::from_varmap(&varmap, &taps, &Device::Cpu);
    let model = Model {
        stem: nn::linear(4, 16, vb.pp("stem")).expect("stem"),
        head: nn::linear(16, 2, vb.pp("head")).expect("head"),
    };
    for p in taps.params() {
        let fill = if p.name.starts_with("stem") {
            stem
        } else {
            0.1
        };
        let t = p.var.as_tensor();
        p.var
            .set(
                &t.ones_like()
                    .and_then(|o| o * f64::from(fill))
                    .expect("fill"),
            )
            .expect("set");
    }
    taps.freeze("stem").expect("freeze");
    let forward = model.clone_layers();
    let losses: Losses = Box::new(move |data: &Points, batch: &[usize]| {
        let idx: Vec<u32> = batch.iter().map(|&i| i as u32).collect();
        let idx = Tensor::from_vec(idx, batch.len(), &Device::Cpu)?;
        let (x, y) = (data.x.index_select(&idx, 0)?, data.y.index_select(&idx, 0)?);
        Ok(loss::cross_entropy(&forward.forward(&x)?, &y, None)?)
    });
    let net = PrivateNet::new(&varmap, &taps, &Device::Cpu, losses).expect("net");
    let settings = PrivateSettings {
        batch_size: 64,
        epochs: 1,
        max_grad_norm: 1.0,
        noise: Noise::Multiplier(1.0),
        delta: 1e-5,
        optimizer: Optimizer::Sgd {
            lr: 0.5,
            momentum: 0.0,
        },
        ..PrivateSettings::default()
    };
    let training =
        make_private(net, &points(512), &settings, NoiseSource::seeded(11)).expect("make_private");
    (training, taps, model)
}

impl Model {
    fn clone_layers(&self) -> Model {
        Model {
            stem: self.stem.clone(),
            head: self.head.clone(),
        }
    }
}

fn values(l: &Linear) -> Vec<f32> {
    l.weight()
        .as_tensor()
        .flatten_all()
        .and_then(|t| t.to_vec1())
        .expect("values")
}

#[test]
fn the_frozen_stem_never_moves_and_the_head_trains() {
    let (mut training, taps, model) = train(0.25);
    assert_eq!(training.engine().model().num_params(), 16 * 2 + 2);
    let (stem, head) = (values(&model.stem), values(&model.head));
    training.fit(&points(512), &mut ()).expect("fit");
    assert!(training.engine().steps() > 0);
    assert_eq!(values(&model.stem), stem, "a frozen weight moved");
    assert_ne!(values(&model.head), head, "the head did not train");
    assert_eq!(taps.frozen_params().len(), 2);
}

#[test]
fn a_checkpoint_does_not_resume_onto_other_frozen_weights() {
    let (mut training, _, _) = train(0.25);
    training.fit(&points(512), &mut ()).expect("fit");
    let checkpoint = training.engine().checkpoint().expect("checkpoint");
    let (mut same, _, _) = train(0.25);
    same.engine_mut()
        .restore(&checkpoint)
        .expect("same frozen weights resume");
    let (mut other, _, _) = train(0.5);
    match other.engine_mut().restore(&checkpoint) {
        Err(Error::ResumeMismatch { field, .. }) => assert_eq!(field, "model"),
        other => panic!("expected ResumeMismatch, got {other:?}"),
    }
}
