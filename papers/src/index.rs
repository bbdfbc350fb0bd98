//! A paper's index page (`<out>/<paper>/README.md`): every table of its config with
//! what the output directory holds for it.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;

use crate::config::Published;
use crate::table::TableConfig;

/// The paper's index: every table of its config, with what `out` holds for it (tables
/// written by earlier `--only` invocations included).
pub(crate) fn write_index(out: &Path, published: &Published, tables: &[TableConfig]) -> Result<()> {
    let mut text = format!("# {}\n\n{}\n\n", published.title, published.citation);
    text.push_str(
        "| table | title | profile, seeds | comparison | training wall (s) |\n|---|---|---|---|---|\n",
    );
    for table in tables {
        let report: Option<serde_json::Value> =
            std::fs::read_to_string(out.join(format!("{}.json", table.heading.id)))
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok());
        let Some(r) = report else {
            text.push_str(&format!(
                "| {} | {} | not run yet | — | — |\n",
                table.heading.number, table.heading.title
            ));
            continue;
        };
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for c in r["comparisons"].as_array().into_iter().flatten() {
            let status = c["status"].as_str().unwrap_or("?").replace('-', " ");
            *counts.entry(status).or_default() += 1;
        }
        let counts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
        let header = &r["header"];
        let wall = header["runs_wall_s"]
            .as_f64()
            .or_else(|| header["wall_s"].as_f64())
            .unwrap_or(f64::NAN);
        text.push_str(&format!(
            "| [{}]({}.md) | {} | {}, {} seed(s) | {} | {:.0} |\n",
            table.heading.number,
            table.heading.id,
            table.heading.title,
            header["profile"].as_str().unwrap_or("?"),
            header["seeds"].as_array().map_or(0, Vec::len),
            if counts.is_empty() {
                "nothing compared".to_string()
            } else {
                counts.join(", ")
            },
            wall
        ));
    }
    crate::atomic_file::write_atomically(&out.join("README.md"), text.as_bytes())
}
