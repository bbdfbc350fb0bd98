//! The table's findings: the smoke caveat, the paper's claims checked, the ε at which
//! each run reaches the accuracy targets, μ stops and non-finite gradients.

use anyhow::{bail, Result};

use super::epoch_means::epoch_means;
use super::rows::{finals, Detail};
use super::runs::ByRun;
use super::TrainingContext;
use crate::args::Profile;
use crate::config::{self, ClaimConfig, TrainingTable};
use crate::report::{fmt, mean_sd};

/// The findings; the accuracy-target table goes first among `details`.
pub fn findings(
    cx: &TrainingContext<'_>,
    by_label: &ByRun,
    details: &mut Vec<Detail>,
) -> Result<Vec<String>> {
    let t = cx.training;
    let smoke = cx.args.profile == Profile::Smoke;
    let mut findings = vec![];
    if smoke {
        findings.push(
            "Smoke profile: subsets and few epochs, so accuracies and ε are not the paper's settings and nothing is compared with it."
                .into(),
        );
    }
    for claim in &t.claims {
        findings.push(claim_finding(t, claim, by_label, smoke)?);
    }
    if !t.accuracy_targets.is_empty() {
        details.insert(0, accuracy_targets(t, by_label));
    }
    let stopped: Vec<&str> = t
        .runs
        .iter()
        .enumerate()
        .filter(|(i, _)| by_label[i].iter().any(|r| r.stopped_by_mu))
        .map(|(_, r)| r.label.as_str())
        .collect();
    if !stopped.is_empty() {
        findings.push(format!(
            "Stopped by the authors' μ_CLT > {} rule: {}.",
            t.stop_max_mu.unwrap_or(f64::NAN),
            stopped.join(", ")
        ));
    }
    let nonfinite: u64 = by_label
        .values()
        .flatten()
        .map(|r| r.nonfinite_gradients)
        .sum();
    if nonfinite > 0 {
        findings.push(format!(
            "{nonfinite} non-finite per-example gradients were zeroed (counted, not clipped; a count of the private data, not covered by ε)."
        ));
    }
    Ok(findings)
}

/// Whether the claim held (better run's final metric beats the worse one's), with the
/// seed noise.
fn claim_finding(
    t: &TrainingTable,
    claim: &ClaimConfig,
    by_label: &ByRun,
    smoke: bool,
) -> Result<String> {
    let label_index = |label: &str| t.runs.iter().position(|r| r.label == label);
    let (Some(b), Some(w)) = (label_index(&claim.better), label_index(&claim.worse)) else {
        bail!("claim {:?} names an unknown run", claim.statement);
    };
    if by_label[&b].is_empty() || by_label[&w].is_empty() {
        return Ok(format!(
            "Claim \"{}\": not checked, its runs have not all run.",
            claim.statement
        ));
    }
    let (mb, sb) = mean_sd(&finals(&by_label[&b], &|e| Some(e.metric)));
    let (mw, sw) = mean_sd(&finals(&by_label[&w], &|e| Some(e.metric)));
    let higher_is_better = t.metric == config::Metric::Accuracy;
    let held = if higher_is_better { mb > mw } else { mb < mw };
    let spread = sb.unwrap_or(0.0).max(sw.unwrap_or(0.0));
    let noise_note = if spread > 0.0 && (mb - mw).abs() <= spread {
        " — the difference is within one seed standard deviation"
    } else if spread == 0.0 {
        " — one seed, so seed noise is not measured"
    } else {
        ""
    };
    Ok(format!(
        "Claim \"{}\": {} ({}: {mb:.2}, {}: {mw:.2}{}){noise_note}.",
        claim.statement,
        if held { "held" } else { "did not hold" },
        claim.better,
        claim.worse,
        if smoke {
            "; smoke profile, not evidence"
        } else {
            ""
        }
    ))
}

/// The paper's Table 3: the smallest ε at which each private run's mean accuracy first
/// reaches each target.
fn accuracy_targets(t: &TrainingTable, by_label: &ByRun) -> Detail {
    let mut target_rows = Vec::new();
    for (i, run) in t.runs.iter().enumerate() {
        if !run.is_private() || by_label[&i].is_empty() {
            continue;
        }
        let metric = epoch_means(&by_label[&i], |e| Some(e.metric));
        let eps = epoch_means(&by_label[&i], |e| e.eps_ma);
        let paper = epoch_means(&by_label[&i], |e| e.eps_paper);
        let mut row = vec![run.label.clone()];
        for &target in &t.accuracy_targets {
            let first = metric.iter().find(|p| p.1 >= target).map(|p| p.0);
            let at = |series: &[(f64, f64)]| {
                first.and_then(|x| series.iter().find(|p| p.0 == x).map(|p| p.1))
            };
            row.push(match (first, at(&eps), at(&paper)) {
                (None, _, _) => "not reached".into(),
                (Some(_), Some(e), Some(p)) => format!("{e:.2} (paper's {p:.2})"),
                (Some(_), e, _) => fmt(e, 2),
            });
        }
        target_rows.push(row);
    }
    let mut heading = vec!["run".to_string()];
    heading.extend(
        t.accuracy_targets
            .iter()
            .map(|a| format!("ε to reach {a}%")),
    );
    (
        "Minimum ε (all steps; for SA-DPSGD also the paper's accepted-step ε) at which \
         each run's mean test accuracy first reaches the target"
            .into(),
        heading,
        target_rows,
    )
}
