//! The command line of `cargo xtask reproduce`: its options, the profile and where the
//! runs train (`--jobs`).

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Serialize;

/// Options of `cargo xtask reproduce`.
#[derive(Debug, Args)]
pub struct ReproduceArgs {
    /// The paper (its directory's name under papers/src; `--list` names them), or all.
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
    #[arg(long, value_parser = parse_jobs)]
    pub jobs: Option<Jobs>,
    /// Run nothing: write the one-page summary of the tables in `--out` to this file
    /// (links relative to it) and exit.
    #[arg(long)]
    pub page: Option<PathBuf>,
}

/// Options for a test: `paper` on `profile` into `out`, one seed, every run, `jobs`
/// workers, nothing else set.
#[cfg(test)]
pub fn test_args(paper: &str, profile: Profile, jobs: usize, out: PathBuf) -> ReproduceArgs {
    ReproduceArgs {
        paper: paper.into(),
        profile,
        seeds: 1,
        out,
        only: None,
        list: false,
        cached_only: false,
        runs: Vec::new(),
        jobs: Some(Jobs::Workers(jobs)),
        page: None,
    }
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

/// Where the runs of a reproduction train.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jobs {
    /// This many worker processes on this machine.
    Workers(usize),
    /// The ranks of the MPI job this process is one of.
    Mpi,
}

impl std::fmt::Display for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Jobs::Workers(n) => write!(f, "{n} workers"),
            Jobs::Mpi => write!(f, "the MPI job's ranks"),
        }
    }
}

/// `--jobs`: a number of workers (at least 1) or `mpi`.
pub fn parse_jobs(value: &str) -> std::result::Result<Jobs, String> {
    match value {
        "mpi" => Ok(Jobs::Mpi),
        n => match n.parse::<usize>() {
            Ok(0) => Err("must be at least 1".into()),
            Ok(n) => Ok(Jobs::Workers(n)),
            Err(_) => Err("must be a number of workers or `mpi`".into()),
        },
    }
}

/// The options of `reproduce` followed by `words`, as clap parses them (for tests).
#[cfg(test)]
pub(crate) fn parse_args(words: &[&str]) -> std::result::Result<ReproduceArgs, clap::Error> {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: ReproduceArgs,
    }
    use clap::Parser;
    Cli::try_parse_from(std::iter::once("reproduce").chain(words.iter().copied()))
        .map(|cli| cli.args)
}

#[cfg(test)]
mod tests {
    use anyhow::Result;

    use super::*;

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
}
