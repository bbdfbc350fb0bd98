//! One run of the study, by one of three implementations: the library's engine, Opacus
//! (the same data, loss and initial weights, through `xtask/scripts/opacus_word2vec.py`)
//! and a noise-only control that feeds the update rule the DP noise without any data.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use dp_accounting::DpEvent;
use dp_mechanisms::NoiseSource;
use dp_optim::{Control, Observer, Optimizer, PrivacyEngine, StepReport, Trainer};
use serde::{Deserialize, Serialize};

use super::probe::{EvalSets, Point};
use crate::wide::word2vec::{PairSet, SharedEmbedding};
use crate::wide::{calibrate_selection, run_epsilon, WideAlgorithm, WideMethod, WideSettings};

/// Who trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Implementation {
    /// `dp_optim::PrivacyEngine` with `DpSgd` or `SparseDpSgd`.
    Ours,
    /// PyTorch + Opacus (`make_private`, Poisson sampling).
    Opacus,
    /// θ ← update(θ, N(0, (σS₁/b)²)): the noise of a dense DP-SGD step, no gradient.
    NoiseOnly,
}

/// What one run trains.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StudyRun {
    /// File name and id.
    pub name: String,
    /// Who trains.
    pub implementation: Implementation,
    /// The method (a sparse method's selection ε is calibrated when
    /// `calibrate_total_epsilon` is set).
    pub method: WideMethod,
    /// The update rule.
    pub optimizer: Optimizer,
    /// Seed of the initial weights (shared by both implementations) and of the noise.
    pub seed: u64,
    /// Steps.
    pub steps: u64,
    /// Sparse methods: the per-step selection ε keeping the full-length run at this ε.
    pub calibrate_total_epsilon: Option<f64>,
}

/// A finished run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Curve {
    /// What was run.
    pub run: StudyRun,
    /// The method as run (with the calibrated selection ε).
    pub method: WideMethod,
    /// ε of the full-length run (RDP, noise and selection jointly) at the table's δ.
    pub full_run_epsilon: Option<f64>,
    /// The evaluation points, from step 0.
    pub points: Vec<Point>,
    /// Wall seconds.
    pub wall_s: f64,
    /// Commit.
    pub commit: String,
}

/// What every run shares.
pub struct StudyContext<'a> {
    /// The training split.
    pub train: &'a PairSet,
    /// The evaluation subsets.
    pub eval: &'a EvalSets,
    /// q, S₁, δ (the optimiser is the run's).
    pub settings: WideSettings,
    /// Embedding sizes and initialisation.
    pub vocabulary: usize,
    /// Embedding width.
    pub dim: usize,
    /// N(0, init_std²) initial weights.
    pub init_std: f64,
    /// Steps of the full-length run the selection budget is calibrated for.
    pub full_steps: u64,
    /// Steps between evaluation points.
    pub eval_every: u64,
    /// Where the data were exported for Opacus.
    pub export_dir: PathBuf,
    /// The Python with torch and opacus.
    pub python: String,
}

impl StudyContext<'_> {
    /// The initial embedding of `seed` (the same weights are exported for Opacus).
    pub fn initial_model(&self, seed: u64) -> SharedEmbedding {
        let mut rng = NoiseSource::seeded(seed);
        SharedEmbedding::new(self.vocabulary, self.dim, self.init_std, &mut rng)
    }

    fn event_of(&self, method: WideMethod) -> Result<DpEvent> {
        let p = self.vocabulary * self.dim;
        Ok(method
            .step_event(self.settings, p)?
            .unwrap_or(DpEvent::NoOp))
    }

    /// The method with its selection ε calibrated, and the full-length run's ε.
    fn as_run(&self, run: &StudyRun) -> Result<(WideMethod, Option<f64>)> {
        let delta = self.settings.delta;
        let method = match run.calibrate_total_epsilon {
            Some(target) => calibrate_selection(run.method, target, self.full_steps, delta, |m| {
                self.event_of(m)
            })?,
            None => run.method,
        };
        let epsilon = match method {
            WideMethod::NonPrivate => None,
            _ => Some(run_epsilon(
                &self.event_of(method)?,
                self.full_steps,
                delta,
            )?),
        };
        Ok((method, epsilon))
    }

    /// Trains `run`.
    pub fn train(&self, run: &StudyRun) -> Result<Curve> {
        let started = Instant::now();
        let (method, full_run_epsilon) = self.as_run(run)?;
        let points = match run.implementation {
            Implementation::Ours => self.ours(run, method)?,
            Implementation::Opacus => self.opacus(run)?,
            Implementation::NoiseOnly => self.noise_only(run)?,
        };
        Ok(Curve {
            run: run.clone(),
            method,
            full_run_epsilon,
            points,
            wall_s: started.elapsed().as_secs_f64(),
            commit: crate::provenance::git_commit(),
        })
    }

    fn ours(&self, run: &StudyRun, method: WideMethod) -> Result<Vec<Point>> {
        let model = self.initial_model(run.seed);
        let initial = model.weights().to_vec();
        let settings = WideSettings {
            optimizer: run.optimizer,
            ..self.settings
        };
        let n = self.train.len();
        let noise = NoiseSource::seeded(1000 + run.seed);
        let mut engine = method.engine(model, settings, n, noise)?;
        let mut algorithm = method.algorithm(settings.clip)?;
        let mut probe = Probe {
            eval: self.eval,
            points: vec![self.eval.measure(engine.model(), &initial, 0)?],
            initial,
            every: self.eval_every,
            steps: 0,
        };
        let trainer = Trainer {
            total_steps: run.steps,
            steps_per_epoch: (n as f64 * settings.sampling_rate).round().max(1.0) as u64,
            checkpoints: None,
            schedule: None,
        };
        trainer.fit(&mut engine, &mut algorithm, self.train, &mut probe)?;
        Ok(probe.points)
    }

    fn noise_only(&self, run: &StudyRun) -> Result<Vec<Point>> {
        let WideMethod::DpSgd { noise_multiplier } = run.method else {
            bail!("the noise-only control is defined for dense DP-SGD");
        };
        let mut model = self.initial_model(run.seed);
        let initial = model.weights().to_vec();
        let expected_batch = self.settings.sampling_rate * self.train.len() as f64;
        let std = noise_multiplier * self.settings.clip / expected_batch;
        let mut noise = NoiseSource::seeded(1000 + run.seed);
        let mut theta = initial.clone();
        let mut moments = run.optimizer.initial_moments(theta.len());
        let mut gradient = vec![0.0f32; theta.len()];
        let mut points = vec![self.eval.measure(&model, &initial, 0)?];
        for step in 1..=run.steps {
            gradient.iter_mut().for_each(|g| *g = 0.0);
            noise.add_gaussian_f32(&mut gradient, std);
            run.optimizer
                .update(&mut theta, &mut moments, &gradient, step);
            if step.is_multiple_of(self.eval_every) || step == run.steps {
                model.weights_mut().copy_from_slice(&theta);
                points.push(self.eval.measure(&model, &initial, step)?);
            }
        }
        Ok(points)
    }

    fn opacus(&self, run: &StudyRun) -> Result<Vec<Point>> {
        let (sigma, kind, lr) = match (run.method, run.optimizer) {
            (WideMethod::NonPrivate, o) => (0.0, o, o.learning_rate()),
            (WideMethod::DpSgd { noise_multiplier }, o) => (noise_multiplier, o, o.learning_rate()),
            _ => bail!("the Opacus script runs the dense methods only"),
        };
        let optimizer = match kind {
            Optimizer::Adam { .. } => "adam",
            Optimizer::Sgd { momentum: 0.0, .. } => "sgd",
            other => bail!("the Opacus script has no {other:?}"),
        };
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../xtask/scripts/opacus_word2vec.py"
        );
        let output = Command::new(&self.python)
            .arg(script)
            .arg(&self.export_dir)
            .args([
                format!("{sigma}"),
                optimizer.to_string(),
                format!("{lr}"),
                format!("{}", run.seed),
                format!("{}", run.steps),
                format!("{}", self.eval_every),
                format!("{}", self.settings.clip),
                format!("{}", self.eval.train.len()),
            ])
            .output()
            .with_context(|| format!("running {}", self.python))?;
        if !output.status.success() {
            bail!(
                "{script} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        serde_json::from_slice(&output.stdout).context("reading the script's points")
    }
}

/// Records a point every `every` steps.
struct Probe<'a> {
    eval: &'a EvalSets,
    initial: Vec<f32>,
    every: u64,
    steps: u64,
    points: Vec<Point>,
}

impl Observer<SharedEmbedding, WideAlgorithm> for Probe<'_> {
    fn step_done(
        &mut self,
        engine: &PrivacyEngine<SharedEmbedding>,
        _: &WideAlgorithm,
        _: &StepReport,
    ) -> dp_optim::Result<Control> {
        self.steps += 1;
        if self.steps.is_multiple_of(self.every) {
            let point = self
                .eval
                .measure(engine.model(), &self.initial, self.steps)?;
            self.points.push(point);
        }
        Ok(Control::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wide::study::{sgd, EvalSets};

    fn pairs(n: usize, vocabulary: u32, seed: u64) -> PairSet {
        let mut rng = NoiseSource::seeded(seed);
        let mut word = || rng.index_below(vocabulary as usize) as u32;
        let (targets, contexts): (Vec<u32>, Vec<u32>) = (0..n).map(|_| (word(), word())).unzip();
        let negatives = (0..n * 2).map(|_| word()).collect();
        PairSet {
            targets,
            contexts,
            negatives,
            negatives_per_sample: 2,
        }
    }

    fn final_drift(
        context: &StudyContext,
        method: WideMethod,
        rule: Optimizer,
        who: Implementation,
    ) -> f64 {
        let run = StudyRun {
            name: "t".into(),
            implementation: who,
            method,
            optimizer: rule,
            seed: 1,
            steps: 300,
            calibrate_total_epsilon: None,
        };
        let curve = context.train(&run).expect("run");
        assert_eq!(curve.points.len(), 4, "points at 0, 100, 200, 300");
        curve.points[3].drift_rms
    }

    /// The measurements the study rests on: Adam's drift under pure noise does not
    /// depend on the noise's size (it normalises each coordinate), SGD's grows with it;
    /// and with σ large the engine's DP-SGD run drifts as its noise-only control does.
    #[test]
    fn adam_drifts_by_its_learning_rate_whatever_the_noise() {
        let train = pairs(400, 30, 1);
        let eval = EvalSets::first(&train, &pairs(100, 30, 2), &pairs(100, 30, 3), 100);
        let context = StudyContext {
            train: &train,
            eval: &eval,
            settings: WideSettings {
                sampling_rate: 0.05,
                clip: 1.0,
                optimizer: WideSettings::adam(0.01),
                delta: 1e-5,
            },
            vocabulary: 30,
            dim: 8,
            init_std: 0.1,
            full_steps: 300,
            eval_every: 100,
            export_dir: std::env::temp_dir(),
            python: String::new(),
        };
        let dense = |s| WideMethod::DpSgd {
            noise_multiplier: s,
        };
        let adam = WideSettings::adam(0.01);
        let noise = Implementation::NoiseOnly;
        let (small, large) = (
            final_drift(&context, dense(0.5), adam, noise),
            final_drift(&context, dense(50.0), adam, noise),
        );
        assert!(
            (small / large - 1.0).abs() < 0.1,
            "Adam: {small} vs {large}"
        );
        let (small, large) = (
            final_drift(&context, dense(0.5), sgd(0.01), noise),
            final_drift(&context, dense(50.0), sgd(0.01), noise),
        );
        assert!(
            (large / small / 100.0 - 1.0).abs() < 0.1,
            "SGD: {small} vs {large}"
        );
        let ours = final_drift(&context, dense(50.0), adam, Implementation::Ours);
        assert!(
            (ours / final_drift(&context, dense(50.0), adam, noise) - 1.0).abs() < 0.05,
            "{ours}"
        );
    }
}
