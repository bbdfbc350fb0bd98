//! Checks of the checked-in configs: they parse and agree with each other, the published
//! accounting cells are matched, and run keys change exactly with what changes a run.

use anyhow::Result;

use crate::accounting;
use crate::accounting::AccountingTable;
use crate::args::Profile;
use crate::config::{self, TrainingTable};
use crate::report::{status, Status};
use crate::table::{load_paper, papers};
use crate::training::run_key;

/// Every checked-in config parses, ids are unique, plots and claims name real runs.
#[test]
fn checked_in_configs_are_consistent() -> Result<()> {
    for (paper, _) in papers()? {
        let paper = paper.as_str();
        let (tables, published) = load_paper(paper)?;
        assert!(!tables.is_empty());
        let mut ids: Vec<&str> = tables.iter().map(|t| t.heading.id.as_str()).collect();
        ids.dedup();
        assert_eq!(ids.len(), tables.len());
        for v in &published.values {
            assert!(ids.contains(&v.table.as_str()), "{v:?}");
            assert!(!v.source.is_empty() && v.tolerance >= 0.0);
        }
        for table in &tables {
            if let Some(t) = table.kind::<TrainingTable>() {
                let labels: Vec<&str> = t.runs.iter().map(|r| r.label.as_str()).collect();
                for p in &t.plots {
                    assert!(p.runs.iter().all(|r| labels.contains(&r.as_str())));
                }
                for r in &t.runs {
                    // σ has exactly one source (or none: non-private).
                    let sources = [
                        r.sigma.is_some(),
                        r.dpd.is_some(),
                        r.calibrate_epsilon.is_some(),
                    ];
                    assert!(sources.iter().filter(|&&s| s).count() <= 1, "{}", r.label);
                    if r.algorithm.unwrap_or(t.algorithm) == config::Algorithm::Dpd {
                        assert!(r.dpd.is_some() && t.dpd.is_some() && t.lr_decay.is_some());
                    }
                }
                for c in &t.claims {
                    assert!(labels.contains(&c.better.as_str()));
                    assert!(labels.contains(&c.worse.as_str()));
                }
                for v in published
                    .values
                    .iter()
                    .filter(|v| v.table == table.heading.id)
                {
                    assert!(labels.contains(&v.row.as_str()), "{v:?}");
                }
            }
        }
    }
    Ok(())
}

/// Table 1's published cells (README 1.1912 / 0.8345 / 1.0685, the Figure 4 caption's
/// 1.34, 8.68, σ̃ 1.06 and 0.638) and the reference cells all match within their
/// stated tolerance, computed from the checked-in config.
#[test]
fn accounting_table_matches_every_published_cell() -> Result<()> {
    let (tables, published) = load_paper("gdp")?;
    let Some(AccountingTable { rows }) = tables[0].kind::<AccountingTable>() else {
        panic!("table 1 is the accounting table");
    };
    let mut checked = 0;
    for row in rows {
        for (epochs, r) in accounting::row_readings(row)? {
            let label = accounting::row_label(row, epochs);
            for (key, _) in accounting::COLUMNS {
                if let Some(p) = published.find("accounting", &label, key) {
                    let ours = r.get(key).unwrap_or(f64::NAN);
                    let s = status(ours, p.value, p.tolerance);
                    assert!(
                        matches!(s, Status::Matches | Status::WithinTolerance),
                        "{label} {key}: ours {ours}, paper {}",
                        p.value
                    );
                    checked += 1;
                }
            }
            // The CLT is asymptotic: here it under-reports the tight ε everywhere.
            assert!(r.eps_clt < r.eps_pld, "{label}");
            assert!(r.eps_pld < r.eps_ma, "{label}: PLD is tighter than RDP");
        }
    }
    assert_eq!(
        checked,
        published
            .values
            .iter()
            .filter(|v| v.table == "accounting")
            .count()
    );
    Ok(())
}

#[test]
fn run_keys_change_with_anything_that_changes_the_run() -> Result<()> {
    let (tables, _) = load_paper("gdp")?;
    let table = tables
        .iter()
        .find(|t| t.heading.id == "adult")
        .expect("adult");
    let Some(t) = table.kind::<TrainingTable>() else {
        panic!("adult trains");
    };
    let run = &t.runs[0];
    let key = run_key;
    let base = key(t, run, Profile::Full, 1)?;
    assert_eq!(base, key(t, run, Profile::Full, 1)?);
    assert_ne!(base, key(t, run, Profile::Full, 2)?);
    assert_ne!(base, key(t, run, Profile::Smoke, 1)?);
    let mut other = t.clone();
    other.lr *= 2.0;
    assert_ne!(base, key(&other, run, Profile::Full, 1)?);
    let mut longer = run.clone();
    longer.epochs += 1;
    assert_ne!(base, key(t, &longer, Profile::Full, 1)?);
    let mut relabelled = run.clone();
    relabelled.label = "another table's name for it".into();
    assert_eq!(base, key(t, &relabelled, Profile::Full, 1)?);
    Ok(())
}

/// Table 1's SA-DPSGD run and the default point of each Figure 4 ablation are one
/// training (overrides resolved), so they share one key and train once.
#[test]
fn the_same_training_in_two_tables_has_one_key() -> Result<()> {
    let (tables, _) = load_paper("sa-dpsgd")?;
    let training = |id: &str| -> &TrainingTable {
        let table = tables.iter().find(|t| t.heading.id == id).expect(id);
        table.kind().unwrap_or_else(|| panic!("{id} trains"))
    };
    let key_of = |id: &str, label: &str| -> Result<String> {
        let t = training(id);
        let run = t.runs.iter().find(|r| r.label == label).expect(label);
        run_key(t, run, Profile::Full, 1)
    };
    let table1 = key_of("table1-mnist", "SA-DPSGD (tanh)")?;
    assert_eq!(table1, key_of("ablation-lr", "η=0.5")?);
    // The batch ablation stops each run at the paper's ε = 3: another training.
    assert_ne!(table1, key_of("ablation-batch", "B=512")?);
    assert_eq!(table1, key_of("ablation-q0", "Q₀=10.0")?);
    assert_eq!(table1, key_of("ablation-mu0", "μ₀=10")?);
    assert_ne!(table1, key_of("ablation-lr", "η=1.0")?);
    Ok(())
}
