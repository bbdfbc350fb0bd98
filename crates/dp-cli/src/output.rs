//! Text and JSON rendering of privacy reports.

use std::fmt::Write;

use anyhow::Result;
use dp_accounting::{Guarantee, PrivacyReport};

/// One accountant's answer, or why it gave none.
pub enum Row {
    Report(PrivacyReport),
    Unsupported { accountant: String, reason: String },
}

/// A table (or JSON: one object, or an array when several accountants ran).
pub fn render_reports(header: &str, rows: &[Row], json: bool) -> Result<String> {
    if json {
        let values: Vec<serde_json::Value> = rows
            .iter()
            .map(|row| match row {
                Row::Report(r) => serde_json::to_value(r),
                Row::Unsupported { accountant, reason } => {
                    Ok(serde_json::json!({"accountant": accountant, "error": reason}))
                }
            })
            .collect::<Result<_, _>>()?;
        let value = if values.len() == 1 {
            values.into_iter().next().unwrap_or_default()
        } else {
            serde_json::Value::Array(values)
        };
        return Ok(format!("{}\n", serde_json::to_string_pretty(&value)?));
    }
    let mut out = String::new();
    writeln!(out, "{header}")?;
    writeln!(
        out,
        "{:<12} {:>12} {:>7}  guarantee",
        "accountant", "epsilon", "order"
    )?;
    let mut notes = Vec::new();
    for row in rows {
        match row {
            Row::Report(r) => {
                let order = r.order.map_or("-".to_string(), |a| format!("{a}"));
                let guarantee = match r.guarantee {
                    Guarantee::UpperBound => "upper bound",
                    Guarantee::Asymptotic => "asymptotic (CLT), may under-report",
                };
                writeln!(
                    out,
                    "{:<12} {:>12} {:>7}  {guarantee}",
                    r.accountant,
                    number(r.epsilon),
                    order
                )?;
                notes.extend(r.warnings.iter().map(|w| format!("{}: {w}", r.accountant)));
            }
            Row::Unsupported { accountant, reason } => {
                writeln!(
                    out,
                    "{accountant:<12} {:>12} {:>7}  not available",
                    "-", "-"
                )?;
                notes.push(format!("{accountant}: {reason}"));
            }
        }
    }
    for note in notes {
        writeln!(out, "note: {note}")?;
    }
    Ok(out)
}

/// Six decimals in the usual range, scientific notation outside it.
pub fn number(x: f64) -> String {
    if x == 0.0 || !x.is_finite() || (1e-4..1e6).contains(&x.abs()) {
        format!("{x:.6}")
    } else {
        format!("{x:.6e}")
    }
}
