//! The private transformer language model's tables as a kind of table (`"kind": "lm"`):
//! its runs are the longest of all, so each is one scheduling unit, scheduled first (a
//! sweep's candidates before its runs) — but for the runs from the pretrained weights
//! after the first, which would only wait for the pretraining that the first one does
//! (`pretrain.rs`), and so are scheduled last; its closing line is each run's test
//! perplexity and audited ε lower bound.

use std::collections::BTreeSet;
use std::time::Instant;

use anyhow::Result;

use super::{lm_report, LmRun, LmTable, Start};
use crate::args::ReproduceArgs;
use crate::report::{RunHeader, TableReport};
use crate::table_kind::{RunUnit, TableContext, TableKind};

impl TableKind for LmTable {
    fn run_labels(&self) -> Vec<&str> {
        self.labels().collect()
    }

    fn units(&self, args: &ReproduceArgs, _: &mut BTreeSet<String>) -> Result<Vec<RunUnit>> {
        let mut pretrains = true;
        let mut waits =
            |run: &LmRun| run.start == Start::Pretrained && !std::mem::take(&mut pretrains);
        let candidates = self
            .sweep
            .iter()
            .flat_map(|s| &s.runs)
            .map(|run| (run, false));
        let runs = self.runs.iter().map(|run| (run, waits(run)));
        Ok(candidates
            .chain(runs)
            .filter(|(run, _)| args.may_train(&run.label))
            .map(|(run, waits)| RunUnit {
                label: run.label.clone(),
                estimate: if waits { 0 } else { u64::MAX },
            })
            .collect())
    }

    fn report(
        &self,
        cx: &TableContext<'_>,
        header: &dyn Fn(f64) -> RunHeader,
        _: Instant,
    ) -> Result<TableReport> {
        lm_report(cx, self, header)
    }

    fn shows(&self, report: &TableReport) -> Option<String> {
        lm_perplexities(&report.table, &report.columns, &report.rows)
    }
}

/// The language model: each run's test perplexity and audited ε lower bound.
fn lm_perplexities(table: &str, columns: &[String], rows: &[Vec<String>]) -> Option<String> {
    let at = |name: &str| columns.iter().position(|c| c.starts_with(name));
    let (ppl, audit) = (at("test perplexity")?, at("audited ε lower bound")?);
    let runs: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            Some(format!(
                "{} {} (audit ≥ {})",
                r.first()?,
                r.get(ppl)?,
                r.get(audit)?
            ))
        })
        .collect();
    Some(format!("{table}: test perplexity {}", runs.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{test_args, Profile};

    /// The fine-tuning table: its sweep's candidates and the runs that do not wait for the
    /// pretraining first, its first run from the weights among them (it pretrains), the
    /// other runs from the weights last.
    #[test]
    fn runs_waiting_for_the_pretraining_are_scheduled_last() -> Result<()> {
        let (tables, _) = crate::table::load_paper("lm")?;
        let config = tables
            .iter()
            .find(|t| t.heading.id == "transformer-lm-finetune")
            .expect("the fine-tuning table");
        let table: &LmTable = config.kind().expect("an LM table");
        let args = test_args("lm", Profile::Full, 2, std::env::temp_dir());
        let units = table.units(&args, &mut BTreeSet::new())?;
        let from_weights: Vec<&str> = (table.runs.iter())
            .filter(|r| r.start == Start::Pretrained)
            .map(|r| r.label.as_str())
            .collect();
        assert!(from_weights.len() >= 2);
        assert_eq!(units.len(), table.labels().count());
        for unit in &units {
            let waits = from_weights[1..].contains(&unit.label.as_str());
            assert_eq!(
                unit.estimate,
                if waits { 0 } else { u64::MAX },
                "{}",
                unit.label
            );
        }
        Ok(())
    }

    #[test]
    fn lm_test_perplexities_and_audits() {
        let columns: Vec<String> = ["run", "σ", "test perplexity", "audited ε lower bound (95%)"]
            .map(String::from)
            .to_vec();
        let row = |r: &str, p: &str, a: &str| vec![r.to_string(), "1".into(), p.into(), a.into()];
        let rows = vec![
            row("non-private", "70.1", "1.480"),
            row("ε = 8", "205.4", "0.000"),
        ];
        assert_eq!(
            lm_perplexities("transformer-lm", &columns, &rows).as_deref(),
            Some("transformer-lm: test perplexity non-private 70.1 (audit ≥ 1.480), ε = 8 205.4 (audit ≥ 0.000)")
        );
        assert!(lm_perplexities("t", &columns[..2], &rows).is_none());
    }
}
