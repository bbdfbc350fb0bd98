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
                Row::Report(r) => serde_json::to_value(r).map(|mut v| {
                    v["epsilon"] = epsilon_json(Some(r.epsilon));
                    v
                }),
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
                    _ if r.epsilon == f64::INFINITY
                        && r.accountant == "pld"
                        && !r.warnings.is_empty() =>
                    {
                        "unbounded by this accountant's discretisation (see note)"
                    }
                    _ if r.epsilon == f64::INFINITY => "unbounded: no finite epsilon at this delta",
                    Guarantee::UpperBound => "upper bound",
                    Guarantee::Asymptotic => "asymptotic (CLT), may under-report",
                };
                writeln!(
                    out,
                    "{:<12} {:>12} {:>7}  {guarantee}",
                    r.accountant,
                    epsilon_text(Some(r.epsilon)),
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

/// A number in a message: at most six significant digits (a δ typed with 300 digits is
/// not echoed back in full).
pub fn short(x: f64) -> String {
    fn trim(mantissa: &str) -> &str {
        if mantissa.contains('.') {
            mantissa.trim_end_matches('0').trim_end_matches('.')
        } else {
            mantissa
        }
    }
    if x == 0.0 || !x.is_finite() || (1e-3..1e6).contains(&x.abs()) {
        trim(&format!("{x:.6}")).to_string()
    } else {
        let text = format!("{x:.5e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        format!("{}e{exponent}", trim(mantissa))
    }
}

/// ε for text: "unbounded" for ∞ and for a run without DP (no finite ε covers it).
pub fn epsilon_text(epsilon: Option<f64>) -> String {
    match epsilon {
        None => "unbounded (no DP)".into(),
        Some(e) if e == f64::INFINITY => "unbounded".into(),
        Some(e) => number(e),
    }
}

/// ε for JSON: a number, or the string "unbounded" (JSON has no ∞; `null` would hide it).
pub fn epsilon_json(epsilon: Option<f64>) -> serde_json::Value {
    match epsilon {
        Some(e) if e.is_finite() => serde_json::json!(e),
        _ => serde_json::json!("unbounded"),
    }
}

/// A line on stderr; a closed or full stderr is ignored (the result goes to stdout).
pub fn diag(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{line}");
}
