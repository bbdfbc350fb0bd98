//! Which runs the study trains, in two phases (the second needs the SGD learning rate
//! the first chose on the validation split), and how they are cached and run in parallel.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{anyhow, Result};
use dp_optim::{CoordinateSelection, Optimizer};

use super::runs::{Curve, Implementation, StudyContext, StudyRun};
use super::{lazy_adam, sgd};
use crate::wide::{WideMethod, WideSettings};

/// A part of the study.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// Ours beside Opacus: non-private, DP-SGD σ = 0.32 and 0.5, Adam.
    Opacus,
    /// DP-SGD with plain SGD, and the noise-only controls.
    Optimizers,
    /// Sparse DP-SGD over the validation grid.
    Tuning,
}

/// The DP-SGD noise levels of the figure.
pub const SIGMAS: [f64; 2] = [0.32, 0.5];
/// The learning rates tried for plain SGD (DP-SGD σ = 0.32, validation split).
pub const SGD_LRS: [f64; 3] = [0.0003, 0.001, 0.003];
/// The tuning grid: σ of the sparse step (its share of ε = 30 against the selection).
pub const TUNE_SIGMAS: [f64; 2] = [0.5, 1.0];
/// γ: the fraction of coordinates selected.
pub const TUNE_FRACTIONS: [f64; 2] = [0.01, 0.05];
/// S₂: the clipping norm on the support.
pub const TUNE_SECOND_CLIPS: [f64; 2] = [3.0, 15.0];
/// The total ε every tuned run is calibrated to (the paper's).
pub const TUNE_EPSILON: f64 = 30.0;

/// The study's runs.
pub struct StudyPlan {
    /// Steps of the comparison and update-rule runs.
    pub steps: u64,
    /// Steps of each tuning run.
    pub tuning_steps: u64,
    /// Seeds of the Opacus comparison.
    pub seeds: u64,
    /// The paper's Adam η.
    pub adam_lr: f64,
    /// Parts requested.
    pub parts: Vec<Part>,
}

/// A short name of an update rule.
pub fn rule_name(optimizer: &Optimizer) -> String {
    match optimizer {
        Optimizer::Adam { .. } => "adam".into(),
        Optimizer::LazyAdam { .. } => "lazy-adam".into(),
        Optimizer::Sgd { lr, .. } => format!("sgd-{lr}"),
    }
}

impl StudyPlan {
    /// The run `<name>-<rule>-s<seed>`: tuning runs (calibrated to a total ε) take the
    /// tuning length, the others the comparison length.
    fn spec(
        &self,
        name: &str,
        (implementation, method): (Implementation, WideMethod),
        optimizer: Optimizer,
        seed: u64,
        calibrate_total_epsilon: Option<f64>,
    ) -> StudyRun {
        StudyRun {
            name: format!("{name}-{}-s{seed}", rule_name(&optimizer)),
            implementation,
            method,
            optimizer,
            seed,
            steps: match calibrate_total_epsilon {
                Some(_) => self.tuning_steps,
                None => self.steps,
            },
            calibrate_total_epsilon,
        }
    }

    /// Phase one: the Opacus comparison, the SGD learning rates and Adam's noise-only
    /// control.
    pub fn first_phase(&self) -> Vec<StudyRun> {
        let adam = WideSettings::adam(self.adam_lr);
        let mut runs = Vec::new();
        if self.parts.contains(&Part::Opacus) {
            let mut methods = vec![("non-private".to_string(), WideMethod::NonPrivate)];
            for s in SIGMAS {
                methods.push((
                    format!("dpsgd-{s}"),
                    WideMethod::DpSgd {
                        noise_multiplier: s,
                    },
                ));
            }
            for seed in 1..=self.seeds.max(1) {
                for (label, method) in &methods {
                    for (who, implementation) in [
                        ("ours", Implementation::Ours),
                        ("opacus", Implementation::Opacus),
                    ] {
                        let name = format!("{who}-{label}");
                        runs.push(self.spec(&name, (implementation, *method), adam, seed, None));
                    }
                }
            }
        }
        if self.parts.contains(&Part::Optimizers) || self.parts.contains(&Part::Tuning) {
            let dense = WideMethod::DpSgd {
                noise_multiplier: SIGMAS[0],
            };
            for lr in SGD_LRS {
                let ours = (Implementation::Ours, dense);
                runs.push(self.spec("ours-dpsgd-0.32", ours, sgd(lr), 1, None));
            }
            if self.parts.contains(&Part::Optimizers) {
                let noise = (Implementation::NoiseOnly, dense);
                runs.push(self.spec("noise-only-0.32", noise, adam, 1, None));
            }
        }
        runs
    }

    /// Phase two, with SGD at `sgd_lr`: its noise-only control and the tuning grid.
    pub fn second_phase(&self, sgd_lr: f64) -> Vec<StudyRun> {
        let mut runs = Vec::new();
        if self.parts.contains(&Part::Optimizers) {
            let dense = WideMethod::DpSgd {
                noise_multiplier: SIGMAS[0],
            };
            let noise = (Implementation::NoiseOnly, dense);
            runs.push(self.spec("noise-only-0.32", noise, sgd(sgd_lr), 1, None));
        }
        if !self.parts.contains(&Part::Tuning) {
            return runs;
        }
        let rules = [
            WideSettings::adam(self.adam_lr),
            lazy_adam(self.adam_lr),
            sgd(sgd_lr),
        ];
        let selections = [
            (
                "em",
                CoordinateSelection::ExponentialTopK { epsilon: 5000.0 },
            ),
            (
                "svt",
                CoordinateSelection::SparseVector {
                    epsilon: 5000.0,
                    threshold: 1.0,
                },
            ),
        ];
        for (kind, selection) in selections {
            for sigma in TUNE_SIGMAS {
                for fraction in TUNE_FRACTIONS {
                    for second_clip in TUNE_SECOND_CLIPS {
                        let method = WideMethod::Sparse {
                            noise_multiplier: sigma,
                            fraction,
                            second_clip,
                            selection,
                        };
                        let name = format!("tune-{kind}-n{sigma}-g{fraction}-c{second_clip}");
                        for rule in rules {
                            let ours = (Implementation::Ours, method);
                            runs.push(self.spec(&name, ours, rule, 1, Some(TUNE_EPSILON)));
                        }
                    }
                }
            }
        }
        runs
    }

    /// Both phases, each run loaded from `dir` when its spec is unchanged.
    pub fn execute(&self, context: &StudyContext, dir: &Path, jobs: usize) -> Result<Vec<Curve>> {
        let mut curves = run_all(context, &self.first_phase(), dir, jobs)?;
        let lr = best_sgd_lr(&curves).unwrap_or(SGD_LRS[1]);
        curves.extend(run_all(context, &self.second_phase(lr), dir, jobs)?);
        Ok(curves)
    }
}

/// The SGD learning rate whose DP-SGD run ends with the lowest validation loss.
pub fn best_sgd_lr(curves: &[Curve]) -> Option<f64> {
    curves
        .iter()
        .filter(|c| c.run.name.starts_with("ours-dpsgd-0.32-sgd-"))
        .filter_map(|c| Some((c.points.last()?.validation_loss, c.run.optimizer)))
        .filter(|(loss, _)| loss.is_finite())
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, o)| o.learning_rate())
}

fn load_or_train(context: &StudyContext, run: &StudyRun, dir: &Path) -> Result<Curve> {
    let path = dir.join(format!("{}.json", run.name));
    if let Ok(bytes) = std::fs::read(&path) {
        if let Ok(curve) = serde_json::from_slice::<Curve>(&bytes) {
            if curve.run == *run {
                return Ok(curve);
            }
        }
    }
    let curve = context.train(run)?;
    let last = curve.points.last().map_or(f64::NAN, |p| p.test_loss);
    println!(
        "  {:44} test loss {last:.3}, {:.0} s",
        run.name, curve.wall_s
    );
    crate::atomic_file::write_atomically(&path, &serde_json::to_vec_pretty(&curve)?)?;
    Ok(curve)
}

fn run_all(
    context: &StudyContext,
    runs: &[StudyRun],
    dir: &Path,
    jobs: usize,
) -> Result<Vec<Curve>> {
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<Option<Result<Curve>>>> = Mutex::new(runs.iter().map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(runs.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(run) = runs.get(i) else { break };
                let result = load_or_train(context, run, dir);
                if let Ok(mut done) = done.lock() {
                    done[i] = Some(result);
                }
            });
        }
    });
    let done = done.into_inner().map_err(|_| anyhow!("a run panicked"))?;
    done.into_iter()
        .zip(runs)
        .map(|(r, run)| r.unwrap_or_else(|| Err(anyhow!("{} did not run", run.name))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(parts: Vec<Part>) -> StudyPlan {
        StudyPlan {
            steps: 30,
            tuning_steps: 10,
            seeds: 2,
            adam_lr: 0.001,
            parts,
        }
    }

    /// Every run has its own file; the grid is the documented one, calibrated and at the
    /// tuning length; only the dense methods go to Opacus.
    #[test]
    fn the_plan_names_each_run_once() {
        let p = plan(vec![Part::Opacus, Part::Optimizers, Part::Tuning]);
        let runs: Vec<StudyRun> = p
            .first_phase()
            .into_iter()
            .chain(p.second_phase(0.001))
            .collect();
        let mut names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), runs.len());
        let grid: Vec<&StudyRun> = runs
            .iter()
            .filter(|r| r.name.starts_with("tune-"))
            .collect();
        assert_eq!(grid.len(), 2 * 2 * 2 * 2 * 3);
        assert!(grid
            .iter()
            .all(|r| r.calibrate_total_epsilon == Some(TUNE_EPSILON) && r.steps == 10));
        for r in runs
            .iter()
            .filter(|r| r.implementation == Implementation::Opacus)
        {
            assert!(!matches!(r.method, WideMethod::Sparse { .. }), "{}", r.name);
            assert_eq!(r.steps, 30);
        }
        assert_eq!(
            runs.iter()
                .filter(|r| r.implementation == Implementation::Opacus)
                .count(),
            6
        );
        assert!(plan(vec![Part::Opacus]).second_phase(0.001).is_empty());
    }
}
