//! Every training run's cache key, as a snapshot (seed 1, both profiles): a change to the
//! harness that moved one would orphan the committed results of that run, so a moved key
//! must be a decision (a schema bump), never a side effect of a refactor.

use std::fmt::Write;

use anyhow::Result;

use super::run_key;
use crate::args::Profile;
use crate::config::TrainingTable;
use crate::table::{load_paper, papers};

#[test]
fn every_training_runs_key_is_unchanged() -> Result<()> {
    let mut listing = String::new();
    for (paper, _) in papers()? {
        let (tables, _) = load_paper(&paper)?;
        for table in &tables {
            let Some(t) = table.kind::<TrainingTable>() else {
                continue;
            };
            for run in &t.runs {
                let smoke = run_key(t, run, Profile::Smoke, 1)?;
                let full = run_key(t, run, Profile::Full, 1)?;
                let id = &table.heading.id;
                writeln!(listing, "{paper}/{id} {}: {smoke} {full}", run.label)?;
            }
        }
    }
    insta::assert_snapshot!(listing);
    Ok(())
}
