//! One run's training: the engine and algorithm its plan names, resumed from its partial
//! file, its epochs through dp-optim's `Trainer` (observed by `EpochObserver`), and the
//! result.

use std::ops::Range;
use std::time::Instant;

use anyhow::Result;
use dp_accounting::calibrate_steps;
use dp_mechanisms::NoiseSource;
use dp_models::data::Dataset;
use dp_models::Classifier;
use dp_optim::dpd::{implied_dropout_rates, GaussianDropout, PredictiveAverage};
use dp_optim::gdp::MuStopRule;
use dp_optim::{DpSgd, LearningRateSchedule, PrivacyConfig, PrivacyEngine, Sampler, Trainer};
use indicatif::ProgressBar;

use super::super::config::Algorithm;
use super::epochs::{EpochObserver, StopRules};
use super::plan::Plan;
use super::table_algorithm::TableAlgorithm;
use super::{DpdOutcome, EpochRecord, Partial, Run, RunResult};

impl Run<'_> {
    /// Trains `model` for this run (resuming its partial file) and returns its result.
    pub(super) fn execute<M: Classifier>(
        &self,
        model: M,
        noise: NoiseSource,
        train: &Dataset,
        test: &Dataset,
        physical_batch: Option<usize>,
        layers: Vec<Range<usize>>,
    ) -> Result<RunResult> {
        let n = train.len();
        let steps_per_epoch = self.sampler(n).steps_per_epoch(n) as u64;
        let plan = self.config(n, steps_per_epoch * u64::from(self.epochs))?;
        let private = plan.config.privacy.is_some();
        let (privacy, sampler) = (plan.config.privacy.clone(), plan.config.sampler);
        let mut engine = PrivacyEngine::new(model, plan.config.clone(), n, noise)?;
        if let Some(size) = physical_batch {
            engine.set_physical_batch_size(size)?;
        }
        let mut algorithm = self.algorithm_of(&plan);
        let (records, previous_wall) = self.resume(&mut engine, algorithm.as_mut())?;
        let stop = self.stop_rules(privacy.as_ref(), sampler, n, steps_per_epoch, &*algorithm)?;
        let done_before = stop.finished(&engine, &*algorithm, records.len() as u32);
        let mut observer = EpochObserver {
            table: self.table,
            test,
            sampler,
            n,
            training: plan.training,
            private,
            stop,
            partial: self.partial,
            bar: self.progress_bar(stop.max_iterations, engine.steps())?,
            stopped_by_mu: !records.is_empty()
                && stop
                    .mu
                    .is_some_and(|r| r.should_stop(&plan.training, engine.steps())),
            records,
            previous_wall,
            started: Instant::now(),
            predictive: PredictiveAverage::default(),
            failure: None,
        };
        if !done_before && !observer.stopped_by_mu {
            let schedule = self.schedule();
            let trainer = Trainer {
                total_steps: u64::MAX, // the observer's stop rules end the run
                steps_per_epoch,
                checkpoints: None, // the observer's partial file holds the checkpoint
                schedule: schedule
                    .as_ref()
                    .filter(|_| plan.dpd.is_none())
                    .map(|s| s as &dyn LearningRateSchedule),
            };
            trainer.fit(&mut engine, algorithm.as_mut(), train, &mut observer)?;
        }
        if let Some(failure) = observer.failure.take() {
            return Err(failure);
        }
        observer.bar.finish_and_clear();
        self.result(&plan, &engine, observer, test, &layers)
    }

    /// The algorithm the run names: one a paper provides (`crate::paper_algorithm`), DPD,
    /// the dropout baseline, or DP-SGD.
    fn algorithm_of<M: Classifier>(&self, plan: &Plan) -> Box<dyn TableAlgorithm<M>> {
        let private = plan.config.privacy.is_some();
        if private {
            if let Some(paper) = crate::paper_algorithm::table_algorithm(self.algorithm(), self.run)
            {
                return paper;
            }
        }
        match (&plan.dpd, self.run.gaussian_dropout) {
            (Some(dpd), _) if private => Box::new(*dpd),
            (_, Some(alpha)) if self.algorithm() == Algorithm::GaussianDropout => {
                Box::new(GaussianDropout { alpha })
            }
            _ => Box::new(DpSgd),
        }
    }

    /// Restores the engine (and the algorithm's own state, such as SA-DPSGD's counters)
    /// from the partial file, if there is one: the epochs recorded so far and their wall
    /// seconds.
    fn resume<M: Classifier>(
        &self,
        engine: &mut PrivacyEngine<M>,
        algorithm: &mut dyn TableAlgorithm<M>,
    ) -> Result<(Vec<EpochRecord>, f64)> {
        let Ok(text) = std::fs::read_to_string(self.partial) else {
            return Ok((Vec::new(), 0.0));
        };
        let Ok(p) = serde_json::from_str::<Partial>(&text) else {
            return Ok((Vec::new(), 0.0));
        };
        engine.restore(&p.checkpoint)?;
        algorithm.restore(p.algorithm_state)?;
        Ok((p.records, p.wall_s))
    }

    /// The run's stop rules: the step budget (the epochs, or fewer when the table's target
    /// ε is reached first), and the algorithm's iteration cap (SA-DPSGD's budget counts
    /// accepted steps; its iterations are capped so that a run that never accepts ends).
    fn stop_rules<M: Classifier>(
        &self,
        privacy: Option<&PrivacyConfig>,
        sampler: Sampler,
        n: usize,
        steps_per_epoch: u64,
        algorithm: &dyn TableAlgorithm<M>,
    ) -> Result<StopRules> {
        let mut budget = steps_per_epoch * u64::from(self.epochs);
        if let (Some(target), Some(p)) = (self.table.target_epsilon, privacy) {
            let scheme = sampler.scheme(n);
            let make = || p.accountant.build(scheme.relation(), &p.orders);
            let run = |steps| scheme.gaussian_run_event(p.noise_multiplier, steps);
            budget = budget.min(calibrate_steps(make, run, target, p.delta)?.value);
        }
        Ok(StopRules {
            epochs: self.epochs,
            budget,
            max_iterations: algorithm.max_iterations(budget),
            mu: self
                .table
                .stop_max_mu
                .filter(|_| privacy.is_some())
                .map(|max_mu| MuStopRule { max_mu }),
        })
    }

    /// The run's progress bar (drawn only on a terminal).
    fn progress_bar(&self, len: u64, position: u64) -> Result<ProgressBar> {
        let label = format!("{} (seed {})", self.run.label, self.seed);
        let bar = crate::progress::run_bar(len, &label)?;
        bar.set_position(position);
        Ok(bar)
    }

    /// The run's result: its epochs, DPD's calibration and implied dropout rates, the
    /// posterior predictive.
    fn result<M: Classifier>(
        &self,
        plan: &Plan,
        engine: &PrivacyEngine<M>,
        observer: EpochObserver<'_>,
        test: &Dataset,
        layers: &[Range<usize>],
    ) -> Result<RunResult> {
        let dpd = match &plan.dpd {
            Some(d) if plan.config.privacy.is_some() => {
                let theta = engine.model().parameters()?;
                let all = 0..theta.len();
                let whole = std::slice::from_ref(&all);
                let layers = if layers.is_empty() { whole } else { layers };
                Some(DpdOutcome {
                    calibration: d.calibration,
                    dropout_rates: implied_dropout_rates(
                        &theta,
                        layers,
                        d.clip,
                        d.calibration.paper_sigma,
                    )?,
                })
            }
            _ => None,
        };
        Ok(RunResult {
            noise_multiplier: plan.noise_multiplier,
            dpd,
            predictive_metric: observer.predictive.accuracy(test).map(|a| 100.0 * a),
            key: self.key.to_string(),
            label: self.run.label.clone(),
            seed: self.seed,
            commit: crate::provenance::git_commit(),
            sigma: self.run.sigma,
            train_examples: observer.n,
            test_examples: test.len(),
            stopped_by_mu: observer.stopped_by_mu,
            nonfinite_gradients: engine.nonfinite_gradients(),
            wall_s: observer.previous_wall + observer.started.elapsed().as_secs_f64(),
            epochs: observer.records,
        })
    }
}
