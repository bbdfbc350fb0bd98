//! The papers this workspace reproduces, written as clients of its public API, and the
//! harness behind `cargo xtask reproduce`: it runs the papers' tables from checked-in
//! configs, caches each run by the hash of its config, and writes JSON, Markdown and SVG
//! next to a comparison with the published numbers.
//!
//! One directory per paper holds everything that is only about that paper: its table
//! configs and published values (`*.json`), and its code — [`gdp`] (the NCF
//! recommender), `sa_dpsgd` (configs only: its algorithm is
//! [`dp_optim::annealing::SaDpsgd`]), `dpd` (the accounting and stand-in tables) and
//! [`wide`] (word2vec on the Brown corpus, canaries, the table driver). The shared
//! harness — configs, the training-run driver (`training`), runs × seeds → table
//! (`training_table`), reports, plots, the summary page — is the rest of `src/`.
//! docs/reproduction/README.md says why this is a crate and what a new paper touches.

mod accounting;
mod claim_box;
mod config;
mod dpd;
pub mod gdp;
mod jobs;
pub mod lm;
#[cfg(test)]
mod page_numbers;
mod plot;
mod progress;
mod report;
mod shows;
mod summary;
mod table;
mod training;
mod training_table;
pub mod wide;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;

use config::Published;
use report::{fmt, mean_sd, status, Comparison, RunHeader, TableReport};
use table::{load_paper, papers, Experiment, TableConfig};
use training::RunResult;

/// Options of `cargo xtask reproduce`.
#[derive(Debug, Args)]
pub struct ReproduceArgs {
    /// The paper: gdp, sa-dpsgd, dpd, wide, lm, or all.
    #[arg(default_value = "all")]
    pub paper: String,
    /// smoke: every table's pipeline on subsets and few epochs (minutes); full: the
    /// papers' settings.
    #[arg(long, value_enum, default_value_t = Profile::Smoke)]
    pub profile: Profile,
    /// Seeds per training run (1..=N); tables report mean ± sd.
    #[arg(long, default_value_t = 1)]
    pub seeds: u64,
    /// Output directory (`<out>/<paper>/<table>.{json,md,svg}`, runs cached in
    /// `<out>/<paper>/runs/`).
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Only this table (its id, e.g. `adult`).
    #[arg(long)]
    pub only: Option<String>,
    /// List the papers and their tables, then exit.
    #[arg(long)]
    pub list: bool,
    /// Train nothing: report the runs already finished in `--out` and mark the others
    /// "not run" (for a reproduction stopped part-way).
    #[arg(long)]
    pub cached_only: bool,
    /// Train only the runs with this label (repeatable; needs `--only`): the table's other
    /// runs are reported from the cache or marked "not run", so that two processes can
    /// share one table's runs between cores. Rerun without `--run` (or with
    /// `--cached-only`) once all have finished, for the complete table.
    #[arg(long = "run", value_name = "LABEL", requires = "only")]
    pub runs: Vec<String>,
    /// Worker processes training runs in parallel, one training thread each (default: the
    /// number of cores); the tables are then assembled from the run cache, identical to
    /// `--jobs 1`. With 1, runs train in this process, table by table, on all cores. With
    /// `mpi` (a build with the `mpi` feature, under `mpirun -np K` or `srun`): the runs
    /// are spread over the job's K ranks, on any hosts, each training one at a time on
    /// its cores; `--out` must be one directory all ranks share; rank 0 then writes the
    /// tables.
    #[arg(long, value_parser = jobs::parse)]
    pub jobs: Option<jobs::Jobs>,
    /// Run nothing: write the one-page summary of the tables in `--out` to this file
    /// (links relative to it) and exit.
    #[arg(long)]
    pub page: Option<PathBuf>,
}

impl ReproduceArgs {
    /// Whether this invocation may train the run labelled `label`: not `--cached-only`,
    /// and named by `--run` when any `--run` is given.
    pub fn may_train(&self, label: &str) -> bool {
        !self.cached_only && (self.runs.is_empty() || self.runs.iter().any(|r| r == label))
    }

    /// Why a run that [`Self::may_train`] refuses was not trained.
    pub fn not_trained_reason(&self) -> &'static str {
        if self.cached_only {
            "--cached-only"
        } else {
            "not named by --run"
        }
    }
}

/// How much of each table runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// Subsets and few epochs.
    Smoke,
    /// The papers' settings.
    Full,
}

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
        training::write_atomically(page, text.as_bytes())?;
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
        jobs::Jobs::Workers(
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
        )
    });
    let parallel_wall = match jobs {
        _ if args.cached_only => None,
        jobs::Jobs::Workers(1) => None,
        jobs::Jobs::Workers(n) => {
            jobs::train_in_parallel(&selected, &args, n)?;
            Some(started.elapsed().as_secs_f64())
        }
        jobs::Jobs::Mpi => {
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
    training::write_atomically(&path, text.as_bytes())?;
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

/// The commit the binary was built from (`-dirty` when tracked files differed from it).
fn git_commit() -> String {
    env!("XTASK_BUILD_COMMIT").to_string()
}

fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Runs a paper's tables; returns its comparison counts by status.
fn run_paper(paper: &str, args: &ReproduceArgs) -> Result<PaperOutcome> {
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
        let heading = &table.heading;
        let report = match &table.experiment {
            Experiment::Accounting { rows } => {
                accounting::accounting_report(paper, heading, rows, &published, &out, header)?
            }
            Experiment::DpdAccounting(c) => dpd::accounting_report(paper, heading, c, header)?,
            Experiment::Wide(w) => wide::wide_report(paper, heading, w, &out, args, header)?,
            Experiment::Lm(t) => lm::lm_report(paper, heading, t, &out, args, header)?,
            Experiment::Training(t) => {
                let cx = training_table::TableContext {
                    paper,
                    table: heading,
                    training: t,
                    published: &published,
                    out: &out,
                    args,
                };
                training_table::training_report(&cx, header, started)?
            }
        };
        let stem = out.join(&report.table);
        training::write_atomically(
            &stem.with_extension("json"),
            &serde_json::to_vec_pretty(&report)?,
        )?;
        training::write_atomically(&stem.with_extension("md"), report.markdown().as_bytes())?;
        print_comparison(&report);
        shows.extend(shows::what_it_shows(&report));
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
struct PaperOutcome {
    /// Comparison counts by status.
    counts: Vec<(&'static str, usize)>,
    /// One line per training table on what its runs reached.
    shows: Vec<String>,
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

/// The paper's index: every table of its config, with what `out` holds for it (tables
/// written by earlier `--only` invocations included).
fn write_index(out: &Path, published: &Published, tables: &[TableConfig]) -> Result<()> {
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
    training::write_atomically(&out.join("README.md"), text.as_bytes())
}

fn compare(
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

/// Per-epoch means over seeds of one run label.
fn epoch_means(
    results: &[RunResult],
    field: impl Fn(&training::EpochRecord) -> Option<f64>,
) -> Vec<(f64, f64)> {
    let max_epochs = results.iter().map(|r| r.epochs.len()).max().unwrap_or(0);
    (0..max_epochs)
        .filter_map(|i| {
            let values: Vec<f64> = results
                .iter()
                .filter_map(|r| r.epochs.get(i).and_then(&field))
                .collect();
            (!values.is_empty()).then(|| ((i + 1) as f64, mean_sd(&values).0))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use config::TrainingTable;
    use report::Status;
    use training::run_key;

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
                if let Experiment::Training(t) = &table.experiment {
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
        let Experiment::Accounting { rows } = &tables[0].experiment else {
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
        let Experiment::Training(t) = &table.experiment else {
            panic!("adult trains");
        };
        let run = &t.runs[0];
        let key = run_key;
        let base = key(t, run, Profile::Full, 1)?;
        assert_eq!(base, key(t, run, Profile::Full, 1)?);
        assert_ne!(base, key(t, run, Profile::Full, 2)?);
        assert_ne!(base, key(t, run, Profile::Smoke, 1)?);
        let mut other = (**t).clone();
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
            match &tables
                .iter()
                .find(|t| t.heading.id == id)
                .expect(id)
                .experiment
            {
                Experiment::Training(t) => t,
                _ => panic!("{id} trains"),
            }
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

    fn parse_args(words: &[&str]) -> std::result::Result<ReproduceArgs, clap::Error> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: ReproduceArgs,
        }
        use clap::Parser;
        Cli::try_parse_from(std::iter::once("reproduce").chain(words.iter().copied()))
            .map(|cli| cli.args)
    }

    /// `--run` selects runs by label within one `--only` table; `--cached-only` trains none.
    #[test]
    fn run_filter_selects_runs_by_label() -> Result<()> {
        let all = parse_args(&["sa-dpsgd"])?;
        assert!(all.may_train("B=128"));
        let some = parse_args(&[
            "sa-dpsgd",
            "--only",
            "ablation-batch",
            "--run",
            "B=128",
            "--run",
            "B=2048",
        ])?;
        assert!(some.may_train("B=128") && some.may_train("B=2048"));
        assert!(!some.may_train("B=256"));
        assert_eq!(some.not_trained_reason(), "not named by --run");
        let cached = parse_args(&["sa-dpsgd", "--only", "ablation-batch", "--cached-only"])?;
        assert!(!cached.may_train("B=128"));
        assert_eq!(cached.not_trained_reason(), "--cached-only");
        // Without a table, a label could match runs of several tables: refused.
        assert!(parse_args(&["sa-dpsgd", "--run", "B=128"]).is_err());
        Ok(())
    }

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

    #[test]
    fn utc_dates_are_civil_dates() {
        let now = utc_now();
        assert_eq!(now.len(), "2026-11-30 18:00:00 UTC".len());
        assert!(now.starts_with("20"));
    }
}
