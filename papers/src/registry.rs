//! The kinds of table, by the `kind` tag of a table's config: the harness's own two
//! (accounting, training), then each paper's, from the `TABLE_KINDS` of its directory's
//! `mod.rs` (gathered by build.rs: no shared file lists the papers).

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::table_kind::TableKind;
use crate::{accounting, config};

/// Parses a kind's configuration: the `experiment` object of a table's config, its
/// `kind` removed.
pub type ParseKind = fn(Value) -> serde_json::Result<Box<dyn TableKind>>;

/// [`ParseKind`] of the kind whose configuration type is `T`.
pub fn parse<T: TableKind + DeserializeOwned + 'static>(
    value: Value,
) -> serde_json::Result<Box<dyn TableKind>> {
    Ok(Box::new(serde_json::from_value::<T>(value)?))
}

// `paper_table_kinds()`, written by build.rs.
include!(concat!(env!("OUT_DIR"), "/paper_table_kinds.rs"));

/// Every kind of table, as (`kind` tag, parser).
pub fn table_kinds() -> Vec<(&'static str, ParseKind)> {
    let mut kinds: Vec<(&'static str, ParseKind)> = vec![
        ("accounting", parse::<accounting::AccountingTable>),
        ("training", parse::<config::TrainingTable>),
    ];
    for paper in paper_table_kinds() {
        kinds.extend_from_slice(paper);
    }
    kinds
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::TableConfig;

    fn table(experiment: &str) -> serde_json::Result<TableConfig> {
        serde_json::from_str(&format!(
            r#"{{"number": 1, "id": "t", "title": "T", "caption": "C", "experiment": {experiment}}}"#
        ))
    }

    #[test]
    fn every_kind_has_one_tag() {
        let mut tags: Vec<&str> = table_kinds().iter().map(|(tag, _)| *tag).collect();
        tags.sort_unstable();
        let all = tags.len();
        tags.dedup();
        assert_eq!(tags.len(), all, "{tags:?}");
    }

    #[test]
    fn a_table_takes_its_kind_from_the_tag() -> anyhow::Result<()> {
        let t = table(r#"{"kind": "accounting", "rows": []}"#)?;
        assert!(t.kind::<accounting::AccountingTable>().is_some());
        assert!(t.kind::<config::TrainingTable>().is_none());
        assert!(t.experiment.run_labels().is_empty());
        Ok(())
    }

    /// Why `experiment` is refused ("" if it is not).
    fn refusal(experiment: &str) -> String {
        table(experiment)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn an_unknown_or_missing_kind_is_refused() {
        let unknown = refusal(r#"{"kind": "nope"}"#);
        assert!(
            unknown.contains(r#"unknown table kind "nope", expected one of accounting, training"#),
            "{unknown}"
        );
        let missing = refusal(r#"{"rows": []}"#);
        assert!(missing.contains("experiment.kind"), "{missing}");
        let bad = refusal(r#"{"kind": "accounting", "rows": 3}"#);
        assert!(bad.contains(r#"experiment of kind "accounting""#), "{bad}");
    }
}
