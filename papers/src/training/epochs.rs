//! A table run's epochs through dp-optim's `Trainer`: the algorithm the run names, and the
//! observer that records each epoch (metric, ε readings, the algorithm's own readings),
//! writes the resumable partial file, and applies the run's stop rules.

use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use dp_accounting::gdp::epsilon_for_mu;
use dp_accounting::GdpConfig;
use dp_accounting::{Accountant, AccountantKind, Ledger, NeighbouringRelation};
use dp_models::data::Dataset;
use dp_models::Classifier;
use dp_optim::dpd::PredictiveAverage;
use dp_optim::gdp::{authors_orders, MuStopRule, NoisyTraining};
use dp_optim::{
    accuracy, expected_class_rmse, Control, EpochSummary, Observer, PrivacyEngine, Sampler,
    StepReport,
};
use indicatif::ProgressBar;

use super::super::config::{Metric, TrainingTable};
use super::table_algorithm::{EpochContext, TableAlgorithm};
use super::{EpochRecord, Partial};
use crate::atomic_file::write_atomically;

/// When a run ends: its epochs, a step budget (from the table's target ε), and the
/// algorithm's iteration cap (for an algorithm that counts its own updates, such as
/// SA-DPSGD's accepted steps).
#[derive(Clone, Copy, Debug)]
pub struct StopRules {
    /// Epochs in the run.
    pub epochs: u32,
    /// Updates allowed.
    pub budget: u64,
    /// Iterations allowed ([`TableAlgorithm::max_iterations`] of the budget).
    pub max_iterations: u64,
    /// The GDP paper's μ_CLT stop.
    pub mu: Option<MuStopRule>,
}

impl StopRules {
    /// Whether the run is over after `epoch` epochs.
    pub fn finished<M: Classifier>(
        &self,
        engine: &PrivacyEngine<M>,
        algorithm: &dyn TableAlgorithm<M>,
        epoch: u32,
    ) -> bool {
        match algorithm.finished(self.budget) {
            Some(done) => done || engine.steps() >= self.max_iterations,
            None => epoch >= self.epochs || engine.steps() >= self.budget,
        }
    }
}

/// Records each epoch of a table run and writes its partial file.
pub struct EpochObserver<'a> {
    /// The table.
    pub table: &'a TrainingTable,
    /// The test set.
    pub test: &'a Dataset,
    /// The run's sampler and training-set size.
    pub sampler: Sampler,
    /// Training-set size.
    pub n: usize,
    /// The run's NoisySGD settings (the CLT and PLD readings).
    pub training: NoisyTraining,
    /// Whether the run is private.
    pub private: bool,
    /// The stop rules.
    pub stop: StopRules,
    /// The partial file.
    pub partial: &'a Path,
    /// The progress bar.
    pub bar: ProgressBar,
    /// Epochs recorded (including those before a resume).
    pub records: Vec<EpochRecord>,
    /// Wall seconds before this process.
    pub previous_wall: f64,
    /// When this process started training.
    pub started: Instant,
    /// The SGLD posterior predictive (DPD tables).
    pub predictive: PredictiveAverage,
    /// Whether the μ rule stopped the run.
    pub stopped_by_mu: bool,
    /// An error of the observer itself (reported after the trainer returns).
    pub failure: Option<anyhow::Error>,
}

impl<M: Classifier> Observer<M, dyn TableAlgorithm<M>> for EpochObserver<'_> {
    fn step_done(
        &mut self,
        engine: &PrivacyEngine<M>,
        algorithm: &dyn TableAlgorithm<M>,
        _: &StepReport,
    ) -> dp_optim::Result<Control> {
        if let Some(k) = self.table.predictive_iterates {
            if algorithm.iterations_are_updates() && engine.steps() + k as u64 > self.stop.budget {
                self.predictive.add(engine.model(), self.test)?;
            }
        }
        self.bar.inc(1);
        // An algorithm that counts its own updates (SA-DPSGD's accepted steps) ends here.
        match algorithm.finished(self.stop.budget) {
            Some(true) => Ok(Control::Stop),
            _ => Ok(Control::Continue),
        }
    }

    fn epoch_done(
        &mut self,
        engine: &PrivacyEngine<M>,
        algorithm: &dyn TableAlgorithm<M>,
        epoch: &EpochSummary,
    ) -> dp_optim::Result<Control> {
        match self.record(engine, algorithm, epoch) {
            Ok(true) => Ok(Control::Stop),
            Ok(false) => Ok(Control::Continue),
            Err(e) => {
                self.failure = Some(e);
                Ok(Control::Stop)
            }
        }
    }
}

impl EpochObserver<'_> {
    /// Records the epoch, writes the partial file; whether the run is over.
    fn record<M: Classifier>(
        &mut self,
        engine: &PrivacyEngine<M>,
        algorithm: &dyn TableAlgorithm<M>,
        summary: &EpochSummary,
    ) -> Result<bool> {
        let epoch = self.records.len() as u32 + 1;
        let metric = match self.table.metric {
            Metric::Accuracy => 100.0 * accuracy(engine.model(), self.test)?,
            Metric::Rmse => expected_class_rmse(engine.model(), self.test)?,
        };
        let steps = engine.steps();
        let (eps_ma, mu_clt, eps_clt, eps_pld) = self.readings(engine)?;
        let extra = algorithm.readings(&EpochContext {
            sampler: &self.sampler,
            n: self.n,
            training: &self.training,
        })?;
        let wall_s = self.previous_wall + self.started.elapsed().as_secs_f64();
        self.records.push(EpochRecord {
            epoch,
            steps,
            train_loss: summary.loss_sum_not_covered_by_epsilon / summary.loss_steps.max(1) as f64,
            metric,
            eps_ma,
            mu_clt,
            eps_clt,
            eps_pld,
            eps_paper: extra.eps_paper,
            accepted: extra.accepted,
            wall_s,
        });
        self.stopped_by_mu = self
            .stop
            .mu
            .is_some_and(|r| r.should_stop(&self.training, steps));
        let partial = Partial {
            records: self.records.clone(),
            checkpoint: engine.checkpoint()?,
            wall_s,
            algorithm_state: algorithm.state()?,
        };
        write_atomically(self.partial, &serde_json::to_vec(&partial)?)?;
        Ok(self.stopped_by_mu || self.stop.finished(engine, algorithm, epoch))
    }

    /// ε of the ledger, and for (cyclic) Poisson sampling μ_CLT, its ε and the PLD ε: each the
    /// composition of the run's whole ledger (every step and every other charge, such as
    /// SA-DPSGD's privatised acceptance tests), not of the steps alone.
    #[allow(clippy::type_complexity)]
    fn readings<M: Classifier>(
        &self,
        engine: &PrivacyEngine<M>,
    ) -> Result<(Option<f64>, Option<f64>, Option<f64>, Option<f64>)> {
        let poisson = matches!(
            self.sampler,
            Sampler::Poisson { .. } | Sampler::CyclicPoisson { .. }
        );
        let ledger = engine.ledger().filter(|_| self.private);
        Ok(match ledger {
            None => (None, None, None, None),
            // The CLT and PLD readings here are for Poisson sampling; the ledger holds
            // the sampler's own (replace-one) analysis.
            Some(_) if !poisson => (engine.epsilon()?, None, None, None),
            Some(ledger) => {
                let delta = self.training.delta;
                let (mu, eps_pld) = ledger_readings(ledger, delta)?;
                (
                    engine.epsilon()?,
                    Some(mu),
                    Some(epsilon_for_mu(delta, mu)),
                    Some(eps_pld),
                )
            }
        })
    }
}

/// μ of the GDP CLT and the PLD ε at `delta` of a whole ledger (add/remove neighbours).
pub(crate) fn ledger_readings(ledger: &Ledger, delta: f64) -> Result<(f64, f64)> {
    let mut gdp = GdpConfig::default().build()?;
    ledger.replay_tallied(&mut gdp)?;
    let mut pld =
        AccountantKind::Pld.build(NeighbouringRelation::AddOrRemoveOne, &authors_orders())?;
    ledger.replay_tallied(pld.as_mut())?;
    Ok((gdp.mu(), pld.epsilon(delta)?))
}
