//! `cargo xtask reproduce`: the selected papers' runs trained (in worker processes, on
//! MPI ranks or in this process), then each paper's tables assembled, compared with the
//! published values and written, with the one-page summary.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Result};

use crate::args::{Jobs, Profile, ReproduceArgs};
use crate::index::write_index;
use crate::provenance::{git_commit, utc_now};
use crate::report::{fmt, RunHeader, TableReport};
use crate::table::{load_paper, papers};
use crate::table_kind::TableContext;
use crate::{claim_box, jobs, summary};

/// Entry point.
pub fn run(args: ReproduceArgs) -> Result<()> {
    if args.seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    if args.list {
        return list();
    }
    if let Some(page) = &args.page {
        let base = page.parent().unwrap_or(Path::new(""));
        let link_base = args
            .out
            .strip_prefix(base)
            .unwrap_or(&args.out)
            .display()
            .to_string();
        let text = summary::reproduction_page(&args.out, &link_base, "reproduction")?;
        crate::atomic_file::write_atomically(page, text.as_bytes())?;
        println!("Wrote {}", page.display());
        return claim_box::write_claim_boxes(&args.out, &base.join("reproduction"));
    }
    let all = papers()?;
    let selected: Vec<&str> = match args.paper.as_str() {
        "all" => all.iter().map(|(id, _)| id.as_str()).collect(),
        id if all.iter().any(|(p, _)| p == id) => vec![id],
        id => {
            let ids: Vec<&str> = all.iter().map(|(p, _)| p.as_str()).collect();
            bail!(
                "unknown paper {id:?}; expected one of {}, all",
                ids.join(", ")
            )
        }
    };
    let started = Instant::now();
    let jobs = args.jobs.unwrap_or_else(|| {
        Jobs::Workers(std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get))
    });
    let parallel_wall = match jobs {
        _ if args.cached_only => None,
        Jobs::Workers(1) => None,
        Jobs::Workers(n) => {
            jobs::train_in_parallel(&selected, &args, n)?;
            Some(started.elapsed().as_secs_f64())
        }
        Jobs::Mpi => {
            if !jobs::train_on_ranks(&selected, &args)? {
                return Ok(()); // not rank 0: rank 0 writes the tables
            }
            Some(started.elapsed().as_secs_f64())
        }
    };
    let mut summary = Vec::new();
    for &id in &selected {
        let paper_started = Instant::now();
        let outcome = run_paper(id, &args)?;
        summary.push((id, outcome, paper_started.elapsed().as_secs_f64()));
    }
    println!(
        "\nSummary ({:?} profile, {} seed(s)):",
        args.profile, args.seeds
    );
    if let Some(wall) = parallel_wall {
        println!("  training on {jobs} — {wall:.0} s (the papers' walls below are assembly)");
    }
    for (id, outcome, wall) in &summary {
        let text: Vec<String> = outcome
            .counts
            .iter()
            .map(|(s, n)| format!("{n} {s}"))
            .collect();
        println!(
            "  {id:<9} {} — {wall:.0} s",
            if text.is_empty() {
                "nothing compared".to_string()
            } else {
                text.join(", ")
            }
        );
        for line in &outcome.shows {
            println!("            {line}");
        }
    }
    if args.profile == Profile::Smoke {
        println!(
            "  (smoke: subsets and few epochs, a check of the pipeline, not the papers' numbers; \
             the full-profile results are in docs/REPRODUCTION.md)"
        );
    }
    println!("  total wall {:.0} s", started.elapsed().as_secs_f64());
    write_summary(&args.out)
}

/// `<out>/REPRODUCTION.md`: the one-page summary of what `out` holds, linking the paper
/// pages under docs/ (relative, when `out` is), as docs/REPRODUCTION.md does.
fn write_summary(out: &Path) -> Result<()> {
    if out.ends_with("docs/reproduction") {
        return Ok(()); // docs/REPRODUCTION.md is written with --page
    }
    let pages = if out.is_relative() {
        let up = "../".repeat(out.components().count());
        format!("{up}docs/reproduction")
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../docs/reproduction")
            .display()
            .to_string()
    };
    let text = summary::reproduction_page(out, ".", &pages)?;
    let path = out.join("REPRODUCTION.md");
    crate::atomic_file::write_atomically(&path, text.as_bytes())?;
    println!("  summary: {}", path.display());
    Ok(())
}

fn list() -> Result<()> {
    let papers = papers()?;
    let mut tables = Vec::new();
    for (id, _) in &papers {
        tables.push(load_paper(id)?.0);
    }
    let width = tables
        .iter()
        .flatten()
        .map(|t| t.heading.id.chars().count())
        .max()
        .unwrap_or(0);
    for ((id, heading), tables) in papers.iter().zip(&tables) {
        println!("{id}: {heading}");
        for table in tables {
            println!(
                "    {:<width$}  table {}: {}",
                table.heading.id, table.heading.number, table.heading.title
            );
        }
    }
    Ok(())
}

/// Runs a paper's tables; returns its comparison counts by status.
pub(crate) fn run_paper(paper: &str, args: &ReproduceArgs) -> Result<PaperOutcome> {
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut shows = Vec::new();
    let (tables, published) = load_paper(paper)?;
    if let Some(only) = &args.only {
        let Some(table) = tables.iter().find(|t| &t.heading.id == only) else {
            bail!(
                "{paper} has no table {only:?}; its tables: {}",
                tables
                    .iter()
                    .map(|t| t.heading.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        };
        let labels = table.experiment.run_labels();
        if let Some(unknown) = args.runs.iter().find(|r| !labels.contains(&r.as_str())) {
            bail!(
                "table {only} has no run {unknown:?}; its runs: {}",
                if labels.is_empty() {
                    "none (it trains nothing)".to_string()
                } else {
                    labels.join(", ")
                }
            );
        }
    }
    let out = args.out.join(paper);
    std::fs::create_dir_all(&out)?;
    println!("{}", published.title);
    let command = format!(
        "cargo xtask reproduce {paper} --profile {} --seeds {} --out {}{}",
        match args.profile {
            Profile::Smoke => "smoke",
            Profile::Full => "full",
        },
        args.seeds,
        args.out.display(),
        args.only
            .as_ref()
            .map_or(String::new(), |o| format!(" --only {o}"))
    );
    for table in tables
        .iter()
        .filter(|t| args.only.as_ref().is_none_or(|o| &t.heading.id == o))
    {
        let started = Instant::now();
        let started_at = utc_now();
        let header = |wall_s: f64| RunHeader {
            command: command.clone(),
            commit: git_commit(),
            profile: format!("{:?}", args.profile).to_lowercase(),
            seeds: (1..=args.seeds).collect(),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            wall_s,
            started: started_at.clone(),
            runs_wall_s: None,
            run_commits: vec![],
        };
        println!("\nTable {}: {}", table.heading.number, table.heading.title);
        let cx = TableContext {
            paper,
            heading: &table.heading,
            published: &published,
            out: &out,
            args,
        };
        let report = table.experiment.report(&cx, &header, started)?;
        let stem = out.join(&report.table);
        crate::atomic_file::write_atomically(
            &stem.with_extension("json"),
            &serde_json::to_vec_pretty(&report)?,
        )?;
        crate::atomic_file::write_atomically(
            &stem.with_extension("md"),
            report.markdown().as_bytes(),
        )?;
        print_comparison(&report);
        let line = table.experiment.shows(&report);
        shows.extend(line.or_else(|| crate::shows::best_metrics(&report)));
        for (status, n) in report.status_counts() {
            *counts.entry(status).or_default() += n;
        }
    }
    write_index(&out, &published, &tables)?;
    println!("\nWrote {}", out.display());
    Ok(PaperOutcome {
        counts: counts.into_iter().collect(),
        shows,
    })
}

/// What one paper's reproduction compared and what its runs reached.
#[derive(Debug)]
pub(crate) struct PaperOutcome {
    /// Comparison counts by status.
    pub counts: Vec<(&'static str, usize)>,
    /// One line per table that says what its runs reached.
    pub shows: Vec<String>,
}

fn print_comparison(report: &TableReport) {
    for c in &report.comparisons {
        let ours = match (c.ours, c.ours_sd) {
            (Some(m), Some(sd)) => format!("{m:.4} ± {sd:.4}"),
            (m, _) => fmt(m, 4),
        };
        println!(
            "  {:<34} {:<16} paper {:>9}  ours {:>17}  {}",
            c.row,
            c.column,
            c.paper.map_or("—".into(), |v| format!("{v}")),
            ours,
            c.status.text()
        );
    }
    for f in &report.findings {
        println!("  * {f}");
    }
    let counts: Vec<String> = report
        .status_counts()
        .iter()
        .map(|(s, n)| format!("{n} {s}"))
        .collect();
    if counts.is_empty() {
        println!("  => nothing compared (no published values for this table)");
    } else {
        println!("  => {}", counts.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use anyhow::Result;

    use super::*;
    use crate::args::parse_args;

    /// A label the table does not have is an error before anything runs, not a silent no-op.
    #[test]
    fn unknown_run_label_is_refused() -> Result<()> {
        let out = std::env::temp_dir().join(format!("dp-xtask-run-filter-{}", std::process::id()));
        let out_text = out.display().to_string();
        let args = parse_args(&[
            "sa-dpsgd",
            "--only",
            "ablation-batch",
            "--run",
            "B=999",
            "--out",
            &out_text,
        ])?;
        let err = run_paper("sa-dpsgd", &args).expect_err("unknown label");
        let message = format!("{err:#}");
        assert!(message.contains("no run \"B=999\""), "{message}");
        assert!(
            message.contains("B=128, B=256, B=512, B=1024, B=2048"),
            "{message}"
        );
        assert!(!out.exists(), "nothing is written before the check");
        Ok(())
    }
}
