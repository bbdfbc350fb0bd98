//! The table's checked findings: memorisation without privacy, none with it, every audit
//! below its claim, and what one privacy unit means.

use super::super::canaries::mean_exposure;
use super::super::train::LmResult;

/// ε at or below which private exposure is expected to stay near the never-seen level.
const LOW_EPSILON: f64 = 3.0;
/// "Near the never-seen level": within this many bits of the controls' mean.
const NEAR_BITS: f64 = 2.0;

/// One line per finding, each saying whether it holds.
pub fn findings(results: &[&LmResult], copies: &[usize], max_per_document: usize) -> Vec<String> {
    let mut out = Vec::new();
    let (Some(&least), Some(&most)) =
        (copies.iter().filter(|&&c| c > 0).min(), copies.iter().max())
    else {
        return out;
    };
    let control = copies.contains(&0);
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
    for r in results
        .iter()
        .filter(|r| r.epsilon_pld.is_some_and(|e| e <= LOW_EPSILON + 1e-9))
    {
        let base = if control {
            mean_exposure(&r.exposures, 0)
        } else {
            std::f64::consts::LOG2_E
        };
        let top = mean_exposure(&r.exposures, most);
        out.push(format!(
            "{} (ε {:.2}): exposure at n_c = {most} is {top:.2} bits against {base:.2} for canaries never inserted — near the never-seen level (within {NEAR_BITS} bits): {}.",
            r.label,
            r.epsilon_pld.unwrap_or(f64::NAN),
            if top - base <= NEAR_BITS { "holds" } else { "does not hold" }
        ));
    }
    let audited: Vec<&&LmResult> = results.iter().filter(|r| r.epsilon_pld.is_some()).collect();
    if !audited.is_empty() {
        let above: Vec<String> = audited
            .iter()
            .filter(|r| r.audit.lower_bound > r.epsilon_pld.unwrap_or(f64::INFINITY))
            .map(|r| r.label.clone())
            .collect();
        out.push(format!(
            "Every audited ε lower bound is at most its claimed ε: {}.",
            if above.is_empty() {
                "holds".to_string()
            } else {
                format!("does not hold for {}", above.join(", "))
            }
        ));
    }
    out.push(format!(
        "The guarantee is per training sequence (one window of the document's tokens). A document cut into k windows is protected as a group of k (group privacy: (kε, k·e^((k−1)ε)·δ)); here k is at most {max_per_document}, so at the document level the stated ε says little. A canary inserted n_c times is likewise a group of n_c."
    ));
    out
}
