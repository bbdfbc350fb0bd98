//! What a table's runs show at a glance, for the reproduction's closing summary: the best
//! final metric of the private and of the non-private runs (a smoke run that learned is
//! told apart from a broken install at once), or for Wide the final train and test losses.

use serde_json::Value;

use crate::report::TableReport;

/// One line on what `report`'s runs reached, if it trained anything.
pub fn what_it_shows(report: &TableReport) -> Option<String> {
    summarise(&report.table, &report.columns, &report.rows, &report.data)
}

/// [`what_it_shows`] from a table's id, main columns and rows, and raw data.
fn summarise(
    table: &str,
    columns: &[String],
    rows: &[Vec<String>],
    data: &Value,
) -> Option<String> {
    if let Some(line) = wide_losses(table, columns, rows) {
        return Some(line);
    }
    if let Some(line) = lm_perplexities(table, columns, rows) {
        return Some(line);
    }
    let runs = data.as_array()?;
    let metric = columns
        .iter()
        .find(|c| c.starts_with("test "))?
        .trim_start_matches("test ");
    let lower_is_better = metric.contains("RMSE") || metric.contains("loss");
    let (mut private, mut plain): (Option<f64>, Option<f64>) = (None, None);
    for run in runs {
        let Some(last) = run["epochs"].as_array().and_then(|e| e.last()) else {
            continue;
        };
        let Some(value) = last["metric"].as_f64() else {
            continue;
        };
        // DPD's runs carry their noise as `noise_multiplier` only.
        let slot = if run["sigma"].is_null() && run["noise_multiplier"].is_null() {
            &mut plain
        } else {
            &mut private
        };
        *slot = Some(match *slot {
            Some(best) if lower_is_better => best.min(value),
            Some(best) => best.max(value),
            None => value,
        });
    }
    let part = |what: &str, v: Option<f64>| v.map(|v| format!("{what} {v:.2}"));
    let parts: Vec<String> = [part("best private", private), part("non-private", plain)]
        .into_iter()
        .flatten()
        .collect();
    (!parts.is_empty()).then(|| format!("{table}: {metric} {}", parts.join(", ")))
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

    fn shows(columns: &[&str], data: Value) -> Option<String> {
        let columns: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
        summarise("t", &columns, &[], &data)
    }

    #[test]
    fn best_private_and_non_private_final_metrics() {
        let run = |sigma: Value, metrics: &[f64]| {
            serde_json::json!({"sigma": sigma,
                "epochs": metrics.iter().map(|m| serde_json::json!({"metric": m})).collect::<Vec<_>>()})
        };
        let data = Value::Array(vec![
            run(Value::from(1.1), &[50.0, 91.5]),
            run(Value::from(0.7), &[60.0, 88.0]),
            serde_json::json!({"sigma": null, "noise_multiplier": 47.5,
                "epochs": [{"metric": 92.0}]}),
            run(Value::Null, &[90.0, 97.25]),
        ]);
        let line = shows(&["run", "test accuracy (%)"], data);
        assert_eq!(
            line.as_deref(),
            Some("t: accuracy (%) best private 92.00, non-private 97.25")
        );
        assert_eq!(shows(&["run"], Value::Array(vec![])), None);
    }

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
