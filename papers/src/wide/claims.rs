//! The Wide paper's claims, checked on the final epoch of each method.

use std::collections::BTreeMap;

use super::{WideEpoch, WideResult, WideRun};
use crate::args::Profile;

/// The paper's claims, checked on the final epoch.
pub(super) fn claims(
    runs: &[WideRun],
    results: &[Option<WideResult>],
    profile: Profile,
) -> Vec<String> {
    let by_label: BTreeMap<&str, &WideResult> = runs
        .iter()
        .zip(results)
        .filter_map(|(run, r)| r.as_ref().map(|r| (run.label.as_str(), r)))
        .collect();
    let last = |label: &str| by_label.get(label).and_then(|r| r.epochs.last());
    let mut out = Vec::new();
    if profile == Profile::Smoke {
        out.push(
            "Smoke profile: a small corpus and few epochs; the claims below are not evidence."
                .into(),
        );
    }
    let mut check = |statement: &str, held: Option<bool>, detail: String| {
        out.push(match held {
            Some(h) => format!(
                "Claim \"{statement}\": {} ({detail}).",
                if h { "held" } else { "did not hold" }
            ),
            None => format!("Claim \"{statement}\": not checked, its runs have not all run."),
        });
    };
    let (np, dp32, dp50, em, svt) = (
        last("non-private"),
        last("DP-SGD σ=0.32"),
        last("DP-SGD σ=0.5"),
        last("sparse DP-SGD, EM selection"),
        last("sparse DP-SGD, SVT selection"),
    );
    if let (Some(em), Some(svt), Some(dp)) = (em, svt, dp32) {
        check(
            "sparse methods beat DP-SGD (σ = 0.32) in train and test loss",
            Some(
                em.train_loss < dp.train_loss
                    && em.test_loss < dp.test_loss
                    && svt.train_loss < dp.train_loss
                    && svt.test_loss < dp.test_loss,
            ),
            format!(
                "test loss EM {:.4}, SVT {:.4}, DP-SGD {:.4}",
                em.test_loss, svt.test_loss, dp.test_loss
            ),
        );
        em_beats_svt(&mut check, "", em, svt);
    } else {
        check("sparse methods beat DP-SGD", None, String::new());
    }
    let (em_tuned, svt_tuned) = (
        last("sparse DP-SGD, EM selection, tuned"),
        last("sparse DP-SGD, SVT selection, tuned"),
    );
    if let (Some(em), Some(svt), Some(dp)) = (em_tuned, svt_tuned, dp32) {
        check(
            "sparse methods beat DP-SGD (σ = 0.32), tuned on the validation split",
            Some(em.test_loss < dp.test_loss && svt.test_loss < dp.test_loss),
            format!(
                "test loss EM {:.4}, SVT {:.4}, DP-SGD {:.4}",
                em.test_loss, svt.test_loss, dp.test_loss
            ),
        );
        em_beats_svt(&mut check, ", tuned on the validation split", em, svt);
    }
    if let (Some(np), Some(dp)) = (np, dp50) {
        let gap = |e: &WideEpoch| e.test_loss - e.train_loss;
        check(
            "the non-private model memorises (its train/test gap is the largest)",
            Some(gap(np) > gap(dp) && em.is_none_or(|e| gap(np) > gap(e))),
            format!(
                "gap non-private {:.4}, DP-SGD σ=0.5 {:.4}",
                gap(np),
                gap(dp)
            ),
        );
    }
    out
}

/// The claim "EM selection is slightly better than SVT" on one pair of runs.
fn em_beats_svt(
    check: &mut impl FnMut(&str, Option<bool>, String),
    setting: &str,
    em: &WideEpoch,
    svt: &WideEpoch,
) {
    check(
        &format!("EM selection is slightly better than SVT{setting}"),
        Some(em.test_loss < svt.test_loss),
        format!(
            "test loss EM {:.4} vs SVT {:.4}",
            em.test_loss, svt.test_loss
        ),
    );
}
