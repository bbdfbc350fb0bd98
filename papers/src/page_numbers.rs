//! Checks that the hand-written paper pages (`docs/reproduction/<paper>.md`) quote only
//! numbers that the committed results hold, so a rerun that changes a result cannot leave
//! a stale figure in the prose.
//!
//! A quoted number is a decimal with at least two decimals in a Markdown table row, or
//! followed by `%` in prose (code spans and fenced blocks are skipped). It is backed when
//! some value of the paper's committed table reports (without their per-epoch `details`;
//! of each run only its final epoch) or of its configs and published values rounds to it
//! at the number's own precision. Differences, ratios and other derived figures in prose
//! are not checked. A page lists the numbers it quotes from elsewhere (a per-epoch record,
//! the spec) in a comment line `<!-- numbers not in the results: 0.25 94.04 -->`.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

/// A number quoted on a page.
#[derive(Debug, Clone, PartialEq)]
pub struct Quoted {
    /// 1-based line number.
    pub line: usize,
    /// The number as written.
    pub text: String,
}

impl Quoted {
    fn value(&self) -> f64 {
        self.text.parse().unwrap_or(f64::NAN)
    }

    fn decimals(&self) -> i32 {
        self.text
            .split_once('.')
            .map_or(0, |(_, frac)| frac.len() as i32)
    }
}

const ALLOW_MARKER: &str = "<!-- numbers not in the results:";

/// The numbers `page` quotes (see the module documentation), and the ones it declares as
/// quoted from elsewhere.
pub fn quoted_numbers(page: &str) -> (Vec<Quoted>, Vec<String>) {
    let (mut quoted, mut allowed) = (Vec::new(), Vec::new());
    let mut fenced = false;
    for (index, raw) in page.lines().enumerate() {
        if raw.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        if let Some(rest) = raw.trim().strip_prefix(ALLOW_MARKER) {
            allowed.extend(
                rest.trim_end_matches("-->")
                    .split_whitespace()
                    .map(str::to_string),
            );
            continue;
        }
        let line = without_code_spans(raw).replace(',', "");
        let in_table = line.trim_start().starts_with('|');
        for (text, followed_by_percent) in decimals_in(&line) {
            if in_table || followed_by_percent {
                quoted.push(Quoted {
                    line: index + 1,
                    text,
                });
            }
        }
    }
    (quoted, allowed)
}

fn without_code_spans(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// Decimal numbers with at least two decimals, each with whether `%` follows it.
fn decimals_in(line: &str) -> Vec<(String, bool)> {
    number_tokens(line)
        .into_iter()
        .filter(|(text, _)| text.split_once('.').is_some_and(|(_, f)| f.len() >= 2))
        .map(|(text, next)| (text.to_string(), next == Some('%')))
        .collect()
}

/// The runs of digits and dots in `text` that read as one number (outer dots trimmed, at
/// most one dot inside; `1.2.3` is not a number), each with the character after the run.
fn number_tokens(text: &str) -> Vec<(&str, Option<char>)> {
    let mut tokens = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if !(c.is_ascii_digit() || c == '.') {
            continue;
        }
        let mut end = start + c.len_utf8();
        while let Some(&(i, c)) = chars.peek() {
            if !(c.is_ascii_digit() || c == '.') {
                break;
            }
            end = i + c.len_utf8();
            chars.next();
        }
        let token = text[start..end].trim_matches('.');
        if !token.is_empty() && token.matches('.').count() <= 1 {
            tokens.push((token, text[end..].chars().next()));
        }
    }
    tokens
}

/// Every number the results of one paper hold, sorted: its table reports under
/// `results` (without `details`; of a run's `epochs` only the last), a study's summary
/// under `results/study` where there is one, and its configs and published values under
/// `configs`.
pub fn reference_values(results: &Path, configs: &Path) -> Result<Vec<f64>> {
    let mut values = Vec::new();
    let study = results.join("study");
    let study = study.is_dir().then_some(study.as_path());
    for dir in [Some(results), study, Some(configs)].into_iter().flatten() {
        let entries =
            std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
        for entry in entries {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "json") {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let json: Value = serde_json::from_str(&text)
                    .with_context(|| format!("parsing {}", path.display()))?;
                collect_numbers(&json, None, &mut values);
            }
        }
    }
    values.sort_by(f64::total_cmp);
    Ok(values)
}

fn collect_numbers(value: &Value, key: Option<&str>, out: &mut Vec<f64>) {
    match value {
        Value::Number(n) => out.extend(n.as_f64()),
        Value::String(s) => out.extend(
            number_tokens(&s.replace(',', ""))
                .iter()
                .filter_map(|(t, _)| t.parse::<f64>().ok()),
        ),
        Value::Array(items) => {
            let items = match (key, items.last()) {
                (Some("epochs"), Some(last)) => std::slice::from_ref(last),
                _ => items.as_slice(),
            };
            for item in items {
                collect_numbers(item, None, out);
            }
        }
        Value::Object(map) => {
            for (k, v) in map.iter().filter(|(k, _)| k.as_str() != "details") {
                collect_numbers(v, Some(k), out);
            }
        }
        Value::Null | Value::Bool(_) => {}
    }
}

/// The quoted numbers that no reference value rounds to and the page does not declare.
pub fn unbacked(quoted: &[Quoted], allowed: &[String], references: &[f64]) -> Vec<Quoted> {
    quoted
        .iter()
        .filter(|q| !allowed.contains(&q.text))
        .filter(|q| {
            let half_unit = 0.5 * 10f64.powi(-q.decimals()) * (1.0 + 1e-9);
            let (low, high) = (q.value() - half_unit, q.value() + half_unit);
            let first = references.partition_point(|v| *v < low);
            references.get(first).is_none_or(|v| *v > high)
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::table::papers;

    #[test]
    fn quoted_numbers_are_table_cells_and_percentages() {
        let page = "Accuracy 97.54% and a gap of 0.47 points.\n\
                    | run | 2.994 | 12,345.67 |\n\
                    `98.76%` in code\n\
                    ```\n| 1.23 | in a fence |\n```\n\
                    <!-- numbers not in the results: 94.04 0.25 -->\n";
        let (quoted, allowed) = quoted_numbers(page);
        let texts: Vec<&str> = quoted.iter().map(|q| q.text.as_str()).collect();
        assert_eq!(texts, ["97.54", "2.994", "12345.67"]);
        assert_eq!(quoted[1].line, 2);
        assert_eq!(allowed, ["94.04", "0.25"]);
    }

    #[test]
    fn a_number_is_backed_only_by_a_value_that_rounds_to_it() {
        let q = |text: &str| Quoted {
            line: 1,
            text: text.into(),
        };
        let references = [5.3017, 97.54000001, 98.1];
        let quoted = [q("5.30"), q("97.54"), q("98.10"), q("5.31"), q("97.55")];
        let missing: Vec<String> = unbacked(&quoted, &[], &references)
            .into_iter()
            .map(|q| q.text)
            .collect();
        assert_eq!(missing, ["5.31", "97.55"]);
        assert!(unbacked(&[q("5.31")], &["5.31".into()], &references).is_empty());
    }

    #[test]
    fn final_epochs_and_reports_but_not_details_are_references() -> Result<()> {
        let json: Value = serde_json::from_str(
            r#"{"rows": [["a", "97.54 ± 0.12"]], "details": [{"x": 11.11}],
                "data": [{"wall_s": 3.5, "epochs": [{"metric": 90.01}, {"metric": 95.19}]}]}"#,
        )?;
        let mut values = Vec::new();
        collect_numbers(&json, None, &mut values);
        values.sort_by(f64::total_cmp);
        assert_eq!(values, [0.12, 3.5, 95.19, 97.54]);
        Ok(())
    }

    /// Every paper page quotes only numbers its committed results hold.
    #[test]
    fn paper_pages_quote_only_committed_results() -> Result<()> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let mut problems = Vec::new();
        for (paper, _) in papers()? {
            let paper = paper.as_str();
            let page_path = root.join(format!("../docs/reproduction/{paper}.md"));
            let page = std::fs::read_to_string(&page_path)
                .with_context(|| format!("reading {}", page_path.display()))?;
            let references = reference_values(
                &root.join(format!("../docs/reproduction/{paper}")),
                &crate::table::paper_dir(paper),
            )?;
            let (quoted, allowed) = quoted_numbers(&page);
            // A paper not run yet quotes no results; one with results quotes enough of
            // them that the check is not vacuous.
            let run = crate::table::load_paper(paper)?.0.iter().any(|t| {
                root.join(format!(
                    "../docs/reproduction/{paper}/{}.json",
                    t.heading.id
                ))
                .is_file()
            });
            match run {
                true => assert!(quoted.len() > 10, "{paper}: too few numbers found to check"),
                false => assert!(quoted.is_empty(), "{paper}: not run, but quotes {quoted:?}"),
            }
            for q in unbacked(&quoted, &allowed, &references) {
                let context = page.lines().nth(q.line - 1).unwrap_or_default();
                problems.push(format!("{paper}.md:{}: {} in {context:?}", q.line, q.text));
            }
        }
        assert!(
            problems.is_empty(),
            "numbers on the paper pages that no committed result holds (rerun the table, \
             correct the page, or list a number quoted from elsewhere in \
             `{ALLOW_MARKER} … -->`):\n{}",
            problems.join("\n")
        );
        Ok(())
    }
}
