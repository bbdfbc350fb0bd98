//! A paper's tables as checked in (`papers/src/<paper>/<table>.json`): each table's
//! heading and what it computes, a [`TableKind`] chosen by the config's `kind` tag from
//! the registered kinds (`registry`), so that a paper's own kind of table lives in its
//! directory.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

use crate::config::{Published, TableHeading};
use crate::table_kind::TableKind;

/// One table of a paper.
#[derive(Debug)]
pub struct TableConfig {
    /// Number, id, title, caption.
    pub heading: TableHeading,
    /// What is computed.
    pub experiment: Box<dyn TableKind>,
}

impl TableConfig {
    /// The table's configuration if its kind's type is `T`.
    pub fn kind<T: 'static>(&self) -> Option<&T> {
        let experiment: &dyn std::any::Any = self.experiment.as_ref();
        experiment.downcast_ref()
    }
}

impl<'de> Deserialize<'de> for TableConfig {
    /// The heading's fields, and `experiment`: an object whose `kind` names a registered
    /// kind of table and whose other fields are that kind's configuration.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(flatten)]
            heading: TableHeading,
            experiment: serde_json::Map<String, serde_json::Value>,
        }
        let Raw {
            heading,
            mut experiment,
        } = Raw::deserialize(deserializer)?;
        let kind = match experiment.remove("kind") {
            Some(serde_json::Value::String(kind)) => kind,
            _ => return Err(D::Error::missing_field("experiment.kind")),
        };
        let kinds = crate::registry::table_kinds();
        let Some((_, parse)) = kinds.iter().find(|(name, _)| *name == kind) else {
            let names: Vec<&str> = kinds.iter().map(|(name, _)| *name).collect();
            return Err(D::Error::custom(format!(
                "unknown table kind {kind:?}, expected one of {}",
                names.join(", ")
            )));
        };
        let experiment = parse(serde_json::Value::Object(experiment))
            .map_err(|e| D::Error::custom(format!("experiment of kind {kind:?}: {e}")))?;
        Ok(TableConfig {
            heading,
            experiment,
        })
    }
}

/// The directory of a paper (`gdp`, `sa-dpsgd`, …): its code, table configs and
/// published values, `papers/src/<id with _ for ->/` (under test, a fixture paper's in
/// `papers/tests/fixtures/papers/` when `src/` has none of that name).
pub fn paper_dir(paper: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("src").join(paper.replace('-', "_"));
    #[cfg(test)]
    if !dir.is_dir() {
        return root
            .join("tests/fixtures/papers")
            .join(paper.replace('-', "_"));
    }
    dir
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
/// per run of every table of one kind (its type `T`), `<table> <label>: <smoke
/// key> <full key>`, with `key` the kind's own cache key of a run in a profile.
#[cfg(test)]
pub(crate) fn key_listing<T: 'static, R>(
    paper: &str,
    runs: impl Fn(&T) -> &[R],
    label: impl Fn(&R) -> &str,
    key: impl Fn(&T, &R, crate::args::Profile) -> Result<String>,
) -> Result<String> {
    use crate::args::Profile;
    use std::fmt::Write;
    let mut listing = String::new();
    for table in load_paper(paper)?.0 {
        let Some(t) = table.kind::<T>() else {
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
