//! What a table's runs show at a glance, for the reproduction's closing summary: the best
//! final metric of the private and of the non-private runs (a smoke run that learned is
//! told apart from a broken install at once): the line of a table whose kind has none of
//! its own ([`crate::table_kind::TableKind::shows`]).

use serde_json::Value;

use crate::report::TableReport;

/// The best final metric of `report`'s private and of its non-private runs, from its
/// raw data.
pub fn best_metrics(report: &TableReport) -> Option<String> {
    summarise(&report.table, &report.columns, &report.data)
}

/// [`best_metrics`] from a table's id, main columns and raw data.
fn summarise(table: &str, columns: &[String], data: &Value) -> Option<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn shows(columns: &[&str], data: Value) -> Option<String> {
        let columns: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
        summarise("t", &columns, &data)
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
}
