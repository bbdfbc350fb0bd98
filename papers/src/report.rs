//! Results of a table: the run header, our numbers, the comparison with the paper, and
//! their JSON and Markdown forms.

use std::fmt::Write as _;

use serde::Serialize;

use crate::config::Published;

/// How our value relates to the paper's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Equal to the published precision (half a unit of its last digit).
    Matches,
    /// Within the tolerance stated in `published.json`.
    WithinTolerance,
    /// Further off than the tolerance.
    Differs,
    /// The paper gives no number for this cell.
    NotPublished,
    /// The dataset is not on this machine.
    DataNotPresent,
}

impl Status {
    /// The word used in tables.
    pub fn text(self) -> &'static str {
        match self {
            Status::Matches => "matches",
            Status::WithinTolerance => "within tolerance",
            Status::Differs => "differs",
            Status::NotPublished => "not published",
            Status::DataNotPresent => "data not present",
        }
    }
}

/// Where, when and how a table was produced.
#[derive(Clone, Debug, Serialize)]
pub struct RunHeader {
    /// The command line.
    pub command: String,
    /// `git rev-parse --short HEAD` (+`-dirty`).
    pub commit: String,
    /// smoke or full.
    pub profile: String,
    /// Seeds of the training runs.
    pub seeds: Vec<u64>,
    /// Threads available to the run.
    pub threads: usize,
    /// Wall seconds for this table (runs reused from the cache count 0).
    pub wall_s: f64,
    /// UTC start time.
    pub started: String,
    /// Training tables: the runs' own wall times summed (cached runs included), and the
    /// commits that trained them.
    pub runs_wall_s: Option<f64>,
    /// Distinct commits of the runs in the table.
    pub run_commits: Vec<String>,
}

/// One comparison cell.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// Row label.
    pub row: String,
    /// Column key.
    pub column: String,
    /// The paper's value.
    pub paper: Option<f64>,
    /// Where the paper's value comes from.
    pub source: Option<String>,
    /// Our mean over seeds.
    pub ours: Option<f64>,
    /// Our standard deviation over seeds (`None` for one seed or deterministic values).
    pub ours_sd: Option<f64>,
    /// ours − paper.
    pub difference: Option<f64>,
    /// The verdict.
    pub status: Status,
}

/// The verdict for `ours` against a published value.
pub fn status(ours: f64, paper: f64, tolerance: f64) -> Status {
    let diff = (ours - paper).abs();
    if diff <= half_unit_of_last_digit(paper) + 1e-12 {
        Status::Matches
    } else if diff <= tolerance + 1e-12 {
        Status::WithinTolerance
    } else {
        Status::Differs
    }
}

/// Half a unit in the last printed digit of `value` (0.005 for 1.34).
fn half_unit_of_last_digit(value: f64) -> f64 {
    let text = format!("{value}");
    let decimals = text.split('.').nth(1).map_or(0, str::len);
    0.5 * 10f64.powi(-(decimals as i32))
}

/// A finished table.
#[derive(Clone, Debug, Serialize)]
pub struct TableReport {
    /// Paper id.
    pub paper: String,
    /// Table id.
    pub table: String,
    /// Table number.
    pub number: u32,
    /// Heading.
    pub title: String,
    /// Caption.
    pub caption: String,
    /// How it was produced.
    pub header: RunHeader,
    /// Column headings of the main table.
    pub columns: Vec<String>,
    /// The main table's rows (formatted).
    pub rows: Vec<Vec<String>>,
    /// Paper versus ours.
    pub comparisons: Vec<Comparison>,
    /// Plain-language findings (claims checked, caveats).
    pub findings: Vec<String>,
    /// SVG files written next to the table.
    pub plots: Vec<String>,
    /// Detailed per-epoch tables: (heading, columns, rows).
    pub details: Vec<(String, Vec<String>, Vec<Vec<String>>)>,
    /// The raw results (runs, readings) for programs.
    pub data: serde_json::Value,
}

/// `mean ± sd` (or the mean alone).
pub fn mean_sd(values: &[f64]) -> (f64, Option<f64>) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if values.len() < 2 {
        return (mean, None);
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, Some(var.sqrt()))
}

/// Formats a number with `digits` decimals, `—` for NaN / missing.
pub fn fmt(value: Option<f64>, digits: usize) -> String {
    match value {
        Some(v) if v.is_finite() => format!("{v:.digits$}"),
        Some(v) if v.is_infinite() => "∞".into(),
        _ => "—".into(),
    }
}

fn markdown_table(out: &mut String, columns: &[String], rows: &[Vec<String>]) {
    let _ = writeln!(out, "| {} |", columns.join(" | "));
    let _ = writeln!(
        out,
        "|{}|",
        columns.iter().map(|_| "---").collect::<Vec<_>>().join("|")
    );
    for row in rows {
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
}

impl TableReport {
    /// A report of `table` with its rows and nothing else yet.
    pub fn for_table(
        paper: &str,
        table: &super::config::TableHeading,
        header: RunHeader,
        columns: Vec<String>,
        rows: Vec<Vec<String>>,
    ) -> Self {
        TableReport {
            paper: paper.into(),
            table: table.id.clone(),
            number: table.number,
            title: table.title.clone(),
            caption: table.caption.clone(),
            header,
            columns,
            rows,
            comparisons: vec![],
            findings: vec![],
            plots: vec![],
            details: vec![],
            data: serde_json::Value::Null,
        }
    }

    /// The Markdown page of the table.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let h = &self.header;
        let _ = writeln!(out, "# Table {}: {}\n", self.number, self.title);
        let _ = writeln!(out, "{}\n", self.caption);
        // With a run cache this invocation may only have assembled the table; the
        // training time is the runs' own.
        let wall = match h.runs_wall_s {
            Some(_) => format!("{:.0} s of table assembly", h.wall_s),
            None => format!("{:.0} s wall", h.wall_s),
        };
        let _ = writeln!(
            out,
            "_Produced by `{}` at commit `{}` ({} profile, seeds {:?}, {} threads, {wall}, started {})._\n",
            h.command, h.commit, h.profile, h.seeds, h.threads, h.started
        );
        if let Some(total) = h.runs_wall_s {
            let _ = writeln!(
                out,
                "_The training runs took {total:.0} s in all (runs reused from the cache keep \
                 their own times), trained at commit {}._\n",
                h.run_commits.join(", ")
            );
        }
        if std::iter::once(&h.commit)
            .chain(&h.run_commits)
            .any(|c| c.ends_with("-dirty"))
        {
            let _ = writeln!(
                out,
                "_A commit marked `-dirty` had uncommitted changes when it ran: its code is \
                 that commit plus edits this page cannot show._\n"
            );
        }
        let _ = writeln!(out, "## Our results\n");
        markdown_table(&mut out, &self.columns, &self.rows);
        let _ = writeln!(out, "\n## Paper versus ours\n");
        let _ = writeln!(
            out,
            "`paper` is the published (or, where marked, reference) value and its source; \
             `ours` is our mean ± sd over seeds; `status` is *matches* (equal to the paper's \
             printed precision), *within tolerance*, *differs*, *not published* or *data not present*.\n"
        );
        let columns: Vec<String> = [
            "row",
            "column",
            "paper",
            "ours",
            "difference",
            "status",
            "source",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let rows: Vec<Vec<String>> = self
            .comparisons
            .iter()
            .map(|c| {
                let ours = match (c.ours, c.ours_sd) {
                    (Some(m), Some(sd)) => format!("{m:.4} ± {sd:.4}"),
                    (m, None) => fmt(m, 4),
                    (None, Some(_)) => "—".into(),
                };
                vec![
                    c.row.clone(),
                    c.column.clone(),
                    c.paper.map_or("—".into(), |v| format!("{v}")),
                    ours,
                    fmt(c.difference, 4),
                    c.status.text().into(),
                    c.source.clone().unwrap_or_default(),
                ]
            })
            .collect();
        if rows.is_empty() {
            let _ = writeln!(out, "_Nothing compared (see the findings)._");
        } else {
            markdown_table(&mut out, &columns, &rows);
        }
        if !self.findings.is_empty() {
            let _ = writeln!(out, "\n## Findings\n");
            for f in &self.findings {
                let _ = writeln!(out, "- {f}");
            }
        }
        if !self.plots.is_empty() {
            let _ = writeln!(out, "\n## Plots\n");
            for p in &self.plots {
                let _ = writeln!(out, "![{p}]({p})\n");
            }
        }
        for (heading, columns, rows) in &self.details {
            let _ = writeln!(out, "\n<details><summary>{heading}</summary>\n");
            markdown_table(&mut out, columns, rows);
            let _ = writeln!(out, "\n</details>");
        }
        out
    }

    /// Counts of each status, for the summary line.
    pub fn status_counts(&self) -> Vec<(&'static str, usize)> {
        let all = [
            Status::Matches,
            Status::WithinTolerance,
            Status::Differs,
            Status::NotPublished,
            Status::DataNotPresent,
        ];
        all.iter()
            .map(|s| {
                (
                    s.text(),
                    self.comparisons.iter().filter(|c| c.status == *s).count(),
                )
            })
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

/// Our values of one published cell (`table`, `row`, `column`) against the paper's, or
/// `None` where the paper publishes none.
pub(crate) fn compare(
    published: &Published,
    table: &str,
    row: &str,
    column: &str,
    values: &[f64],
) -> Option<Comparison> {
    let p = published.find(table, row, column)?;
    let (ours, sd) = mean_sd(values);
    Some(Comparison {
        row: row.into(),
        column: column.into(),
        paper: Some(p.value),
        source: Some(p.source.clone()),
        ours: Some(ours),
        ours_sd: sd,
        difference: Some(ours - p.value),
        status: status(ours, p.value, p.tolerance),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_the_printed_precision_then_the_tolerance() {
        assert_eq!(status(1.3449, 1.34, 0.01), Status::Matches);
        assert_eq!(status(1.3498, 1.34, 0.01), Status::WithinTolerance);
        assert_eq!(status(1.36, 1.34, 0.01), Status::Differs);
        assert_eq!(status(0.83452, 0.8345, 0.0), Status::Matches);
        assert_eq!(status(0.8347, 0.8345, 0.0), Status::Differs);
        assert_eq!(mean_sd(&[1.0, 3.0]), (2.0, Some(2f64.sqrt())));
        assert_eq!(fmt(Some(f64::NAN), 2), "—");
    }
}
