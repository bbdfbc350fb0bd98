//! The Wide paper's word2vec table as a kind of table (`"kind": "wide"`): its runs share a
//! corpus load and are few, so each is one scheduling unit, scheduled first; its closing
//! line is each method's final train and test loss.

use std::time::Instant;

use anyhow::Result;

use super::{wide_report, WideTable};
use crate::report::{RunHeader, TableReport};
use crate::table_kind::{TableContext, TableKind};

impl TableKind for WideTable {
    fn run_labels(&self) -> Vec<&str> {
        self.runs.iter().map(|r| r.label.as_str()).collect()
    }

    fn report(
        &self,
        cx: &TableContext<'_>,
        header: &dyn Fn(f64) -> RunHeader,
        _: Instant,
    ) -> Result<TableReport> {
        wide_report(cx, self, header)
    }

    fn shows(&self, report: &TableReport) -> Option<String> {
        wide_losses(&report.table, &report.columns, &report.rows)
    }
}

/// Wide: each method's final train and test loss, from the main table (the train loss,
/// labelled as outside ε like its column, shows the model moving from its initialisation;
/// the gap, memorisation).
fn wide_losses(table: &str, columns: &[String], rows: &[Vec<String>]) -> Option<String> {
    let test = columns.iter().position(|c| c == "final test loss")?;
    let train = columns
        .iter()
        .position(|c| c.starts_with("final train loss"))?;
    let losses: Vec<String> = rows
        .iter()
        .filter_map(|row| {
            Some(format!(
                "{} {}/{}",
                row.first()?,
                row.get(train)?,
                row.get(test)?
            ))
        })
        .collect();
    (!losses.is_empty()).then(|| {
        format!(
            "{table}: final train (not covered by ε)/test loss {}",
            losses.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_train_and_test_losses() {
        let columns: Vec<String> = [
            "method",
            "final train loss (not covered by ε)",
            "final test loss",
        ]
        .iter()
        .map(|c| c.to_string())
        .collect();
        let rows = vec![vec![
            "non-private".to_string(),
            "6.0988".into(),
            "6.2460".into(),
        ]];
        assert_eq!(
            wide_losses("figure1", &columns, &rows).as_deref(),
            Some("figure1: final train (not covered by ε)/test loss non-private 6.0988/6.2460")
        );
    }
}
