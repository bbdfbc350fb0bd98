//! A paper's tables as checked in (`papers/src/<paper>/<table>.json`): each table's
//! heading and the experiment it computes, one variant per kind of table. The kinds that
//! only one paper has (DPD's accounting, Wide's word2vec, the language model) keep their configuration types
//! in that paper's directory; this is the one place that names them.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::config::{AccountingRow, Published, TableHeading, TrainingTable};

/// One table of a paper.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TableConfig {
    /// Number, id, title, caption.
    #[serde(flatten)]
    pub heading: TableHeading,
    /// What is computed.
    pub experiment: Experiment,
}

/// What a table computes.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Experiment {
    /// Privacy accounting only (no training).
    Accounting {
        /// One block of rows per dataset setting.
        rows: Vec<AccountingRow>,
    },
    /// Training runs.
    Training(Box<TrainingTable>),
    /// DPD's per-iteration budgets under each reading, and modern ε of the same noise.
    DpdAccounting(Box<crate::dpd::DpdAccountingConfig>),
    /// The Wide paper's word2vec methods and canaries.
    Wide(Box<crate::wide::WideTable>),
    /// The private transformer language model (beyond the papers).
    Lm(Box<crate::lm::LmTable>),
}

impl Experiment {
    /// The labels of the runs this table trains (none for the accounting tables).
    pub fn run_labels(&self) -> Vec<&str> {
        match self {
            Experiment::Training(t) => t.runs.iter().map(|r| r.label.as_str()).collect(),
            Experiment::Wide(w) => w.runs.iter().map(|r| r.label.as_str()).collect(),
            Experiment::Lm(t) => t.labels().collect(),
            Experiment::Accounting { .. } | Experiment::DpdAccounting(_) => vec![],
        }
    }
}

/// The directory of a paper (`gdp`, `sa-dpsgd`, …): its code, table configs and
/// published values, `papers/src/<id with _ for ->/`.
pub fn paper_dir(paper: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(paper.replace('-', "_"))
}

/// The papers: every directory of `papers/src/` with a `published.json`, as
/// (id, heading), in their `order`. A new paper is a new directory.
pub fn papers() -> Result<Vec<(String, String)>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&root).with_context(|| format!("listing {}", root.display()))? {
        let path = entry?.path().join("published.json");
        if !path.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let published: Published =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        if paper_dir(&published.paper) != path.parent().unwrap_or(&root) {
            bail!(
                "{}: paper id {:?} does not name its directory",
                path.display(),
                published.paper
            );
        }
        found.push((published.order, published.paper, published.heading));
    }
    found.sort();
    Ok(found
        .into_iter()
        .map(|(_, id, heading)| (id, heading))
        .collect())
}

/// A paper's tables (in file-name order) and published values.
pub fn load_paper(paper: &str) -> Result<(Vec<TableConfig>, Published)> {
    let dir = paper_dir(paper);
    let read = |path: &Path| -> Result<String> {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    };
    let published: Published = serde_json::from_str(&read(&dir.join("published.json"))?)
        .with_context(|| format!("parsing {}/published.json", dir.display()))?;
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|e| e == "json")
                && p.file_name().is_some_and(|n| n != "published.json")
        })
        .collect();
    let mut tables = Vec::new();
    for path in files {
        let table: TableConfig = serde_json::from_str(&read(&path)?)
            .with_context(|| format!("parsing {}", path.display()))?;
        if path.file_stem().and_then(|s| s.to_str()) != Some(table.heading.id.as_str()) {
            bail!(
                "{}: id {:?} differs from the file name",
                path.display(),
                table.heading.id
            );
        }
        tables.push(table);
    }
    tables.sort_by_key(|t| t.heading.number);
    Ok((tables, published))
}

/// The snapshot listing of a paper's cache keys, for the tests that pin them: one line
/// per run of every table of one kind (`kind` picks it out), `<table> <label>: <smoke
/// key> <full key>`, with `key` the kind's own cache key of a run in a profile.
#[cfg(test)]
pub(crate) fn key_listing<T, R>(
    paper: &str,
    kind: impl Fn(&Experiment) -> Option<&T>,
    runs: impl Fn(&T) -> &[R],
    label: impl Fn(&R) -> &str,
    key: impl Fn(&T, &R, crate::args::Profile) -> Result<String>,
) -> Result<String> {
    use crate::args::Profile;
    use std::fmt::Write;
    let mut listing = String::new();
    for table in load_paper(paper)?.0 {
        let Some(t) = kind(&table.experiment) else {
            continue;
        };
        for run in runs(t) {
            let (smoke, full) = (key(t, run, Profile::Smoke)?, key(t, run, Profile::Full)?);
            writeln!(
                listing,
                "{} {}: {smoke} {full}",
                table.heading.id,
                label(run)
            )?;
        }
    }
    Ok(listing)
}
