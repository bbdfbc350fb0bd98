//! The table's checked findings: memorisation without privacy, exposure within what each
//! private run's (ε, δ) allows, every audit below its claim, and what one privacy unit
//! means.

use super::super::canaries::{exposure_bound, mean_exposure};
use super::super::train::LmResult;
use super::super::Start;

/// One line per finding, each saying whether it holds.
pub fn findings(results: &[&LmResult], copies: &[usize], max_per_document: usize) -> Vec<String> {
    let mut out = Vec::new();
    let (Some(&least), Some(&most)) =
        (copies.iter().filter(|&&c| c > 0).min(), copies.iter().max())
    else {
        return out;
    };
    for r in results.iter().filter(|r| r.target_epsilon.is_none()) {
        let (a, b) = (
            mean_exposure(&r.exposures, least),
            mean_exposure(&r.exposures, most),
        );
        out.push(format!(
            "{}: mean exposure grows with insertions, {a:.2} bits at n_c = {least} to {b:.2} at n_c = {most} — {}.",
            r.label,
            if b > a { "holds" } else { "does not hold" }
        ));
    }
    for r in results.iter().filter(|r| r.epsilon_pld.is_some()) {
        out.push(private_exposure(r, copies));
    }
    let audited: Vec<&&LmResult> = results.iter().filter(|r| r.epsilon_pld.is_some()).collect();
    if !audited.is_empty() {
        let above: Vec<String> = audited
            .iter()
            .filter(|r| {
                // An f-DP bound that cannot be computed counts as above the claim.
                let fdp = r.audit.fdp_lower_bound(r.delta).unwrap_or(f64::INFINITY);
                r.audit.lower_bound.max(fdp) > r.epsilon_pld.unwrap_or(f64::INFINITY)
            })
            .map(|r| r.label.clone())
            .collect();
        out.push(format!(
            "Every audited ε lower bound (Steinke et al.'s and the f-DP test's) is at most its claimed ε: {}.",
            if above.is_empty() {
                "holds".to_string()
            } else {
                format!("does not hold for {}", above.join(", "))
            }
        ));
    }
    out.extend(fine_tuning(results));
    out.push(format!(
        "The guarantee is per training sequence (one window of a document's tokens). A document cut into k windows is protected as a group of k (group privacy: (kε, k·e^((k−1)ε)·δ)); here k is at most {max_per_document}, so at the document level the stated ε says little. A canary inserted n_c times is likewise a group of n_c."
    ));
    out
}

/// A private run's mean exposure per insertion count against what its (ε, δ) allows in
/// expectation ([`exposure_bound`]), and the never-inserted controls.
fn private_exposure(r: &LmResult, copies: &[usize]) -> String {
    let epsilon = r.epsilon_pld.unwrap_or(f64::INFINITY);
    let candidates = r.exposures.first().map_or(0, |e| e.candidates);
    let mut parts = Vec::new();
    let mut exceeded = Vec::new();
    for &k in copies {
        let measured = mean_exposure(&r.exposures, k);
        if k == 0 {
            parts.push(format!("never inserted {measured:.2}"));
            continue;
        }
        let bound = exposure_bound(epsilon, r.delta, k, candidates);
        parts.push(format!("n_c = {k}: {measured:.2} (bound {bound:.2})"));
        if measured > bound + 1e-9 {
            exceeded.push(k.to_string());
        }
    }
    format!(
        "{} (ε {epsilon:.2}): mean exposure in bits against the most an (ε, δ)-DP run allows in expectation — {}; within the bound: {}.",
        r.label,
        parts.join(", "),
        if exceeded.is_empty() { "holds".to_string() } else { format!("does not hold at n_c = {}", exceeded.join(", ")) }
    )
}

/// Private fine-tuning against non-private fine-tuning from the same pretrained weights:
/// at ε = 8 the best private run's test perplexity within 1.25× of the non-private one's
/// (the target), and the ratio at every other ε.
fn fine_tuning(results: &[&LmResult]) -> Vec<String> {
    let test = |r: &LmResult| r.epochs.last().map_or(f64::NAN, |e| e.test_perplexity);
    let tuned: Vec<&&LmResult> = results
        .iter()
        .filter(|r| r.start == Start::Pretrained)
        .collect();
    let Some(reference) = tuned.iter().find(|r| r.target_epsilon.is_none()) else {
        return Vec::new();
    };
    let mut targets: Vec<f64> = tuned.iter().filter_map(|r| r.target_epsilon).collect();
    targets.sort_by(|a, b| b.total_cmp(a));
    targets.dedup();
    targets
        .iter()
        .filter_map(|&eps| {
            let best = tuned
                .iter()
                .filter(|r| r.target_epsilon == Some(eps))
                .min_by(|a, b| test(a).total_cmp(&test(b)))?;
            let ratio = test(best) / test(reference);
            let verdict = if eps == 8.0 {
                if ratio <= 1.25 { " — within 1.25×: holds" } else { " — within 1.25×: does not hold" }
            } else {
                ""
            };
            Some(format!(
                "Fine-tuned at ε = {eps}: best private test perplexity {:.1} ({}) is {ratio:.2}× the non-private fine-tuning's {:.1}{verdict}.",
                test(best),
                best.label,
                test(reference)
            ))
        })
        .collect()
}
