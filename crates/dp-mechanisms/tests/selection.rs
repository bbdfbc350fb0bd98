//! Selection mechanisms: distributions and the sparse vector technique's guarantees.

use dp_mechanisms::{
    BudgetSplit, ExponentialMechanism, NoiseSource, NoisyMaxNoise, ReportNoisyMax, SparseVariant,
    SparseVector, TopK, TopKMethod,
};

use crate::stats::chi_square;

const SCORES: [f64; 5] = [0.0, 1.0, 2.0, 3.0, 3.5];

fn normalised(weights: &[f64]) -> Vec<f64> {
    let total: f64 = weights.iter().sum();
    weights.iter().map(|w| w / total).collect()
}

#[test]
fn exponential_mechanism_frequencies() -> dp_mechanisms::Result<()> {
    let mut noise = NoiseSource::seeded(10);
    for (monotone, factor) in [(false, 2.0), (true, 1.0)] {
        let em = ExponentialMechanism::new(1.0, 1.2, monotone)?;
        let mut counts = [0u64; SCORES.len()];
        for _ in 0..300_000 {
            counts[em.select(&SCORES, &mut noise)?] += 1;
        }
        let weights: Vec<f64> = SCORES.iter().map(|u| (1.2 * u / factor).exp()).collect();
        let (stat, critical) = chi_square(&counts, &normalised(&weights));
        assert!(
            stat < critical,
            "monotone={monotone}: chi-square {stat} >= {critical}"
        );
        // Power: the wrong factor (monotone vs not) is rejected.
        let wrong: Vec<f64> = SCORES
            .iter()
            .map(|u| (1.2 * u / (3.0 - factor)).exp())
            .collect();
        assert!(chi_square(&counts, &normalised(&wrong)).0 > critical);
    }
    // Report-noisy-max with Gumbel noise is the exponential mechanism.
    let rnm = ReportNoisyMax::new(1.0, 1.2, false, NoisyMaxNoise::Gumbel)?;
    let mut counts = [0u64; SCORES.len()];
    for _ in 0..300_000 {
        counts[rnm.select(&SCORES, &mut noise)?] += 1;
    }
    let weights: Vec<f64> = SCORES.iter().map(|u| (0.6 * u).exp()).collect();
    let (stat, critical) = chi_square(&counts, &normalised(&weights));
    assert!(stat < critical);
    Ok(())
}

/// Exact probability of each ordered pair under peeling (Plackett–Luce).
fn ordered_pair_probs(weights: &[f64]) -> Vec<f64> {
    let total: f64 = weights.iter().sum();
    let n = weights.len();
    let mut probs = Vec::new();
    for i in 0..n {
        for j in 0..n {
            probs.push(if i == j {
                0.0
            } else {
                weights[i] / total * weights[j] / (total - weights[i])
            });
        }
    }
    probs
}

#[test]
fn gumbel_top_k_and_peeling_agree() -> dp_mechanisms::Result<()> {
    let scores: [f64; 4] = [0.0, 1.0, 2.5, 3.0];
    let epsilon: f64 = 2.0;
    let weights: Vec<f64> = scores
        .iter()
        .map(|u| (epsilon / 2.0 / 2.0 * u).exp())
        .collect();
    let exact = ordered_pair_probs(&weights);
    let mut noise = NoiseSource::seeded(11);
    for method in [
        TopKMethod::Peeling,
        TopKMethod::OneShotGumbel,
        TopKMethod::WeightedDraws,
    ] {
        let top = TopK::new(1.0, epsilon, 2, false, method, BudgetSplit::Basic)?;
        let mut counts = vec![0u64; 16];
        for _ in 0..300_000 {
            let chosen = top.select(&scores, &mut noise)?;
            counts[chosen[0] * 4 + chosen[1]] += 1;
        }
        let (stat, critical) = chi_square(&counts, &exact);
        assert!(
            stat < critical,
            "{method:?}: chi-square {stat} >= {critical}"
        );
    }
    Ok(())
}

/// Weighted draws across levels: two items on top, three ~60 log-weight units below (in
/// the first level's tail, so the third and fourth draws split it). The draws from the tail
/// follow the exponential mechanism over what is left, exactly.
#[test]
fn weighted_draws_reach_into_the_tail_exactly() -> dp_mechanisms::Result<()> {
    // Score scale ε₀/(2Δ) = 1 with ε = 8, k = 4, Δ = 1.
    let scores: [f64; 5] = [0.0, -0.4, -60.0, -60.7, -61.5];
    let top = TopK::new(
        1.0,
        8.0,
        4,
        false,
        TopKMethod::WeightedDraws,
        BudgetSplit::Basic,
    )?;
    let tail_weights: Vec<f64> = scores[2..].iter().map(|u| u.exp()).collect();
    let first_two = ordered_pair_probs(&[1.0, (-0.4f64).exp()]);
    let last_two = ordered_pair_probs(&tail_weights);
    let mut noise = NoiseSource::seeded(12);
    let (mut head, mut tail) = (vec![0u64; 4], vec![0u64; 9]);
    for _ in 0..200_000 {
        let chosen = top.select(&scores, &mut noise)?;
        assert!(chosen[0] < 2 && chosen[1] < 2, "{chosen:?}");
        head[chosen[0] * 2 + chosen[1]] += 1;
        tail[(chosen[2] - 2) * 3 + chosen[3] - 2] += 1;
    }
    for (counts, exact) in [(&head, &first_two), (&tail, &last_two)] {
        let (stat, critical) = chi_square(counts, exact);
        assert!(stat < critical, "chi-square {stat} >= {critical}");
    }
    Ok(())
}

/// Weighted draws once a tail bucket is split, where the tail matters: after the top item,
/// one item at −47.5 (the first level's last bucket) competes with five items just below
/// −48 (the first level's tail), which hold most of the remaining weight. The second and
/// third draws must follow peeling's law over those six. (A sampler that restarts an
/// attempt whenever it proposes the tail, accepting nothing from it, over-draws the
/// −47.5 item: about 0.51 instead of 0.35 as the second draw.)
#[test]
fn weighted_draws_are_exact_when_the_split_tail_matters() -> dp_mechanisms::Result<()> {
    // Score scale ε₀/(2Δ) = 1 with ε = 6, k = 3, Δ = 1.
    let scores: [f64; 7] = [0.0, -47.5, -48.1, -48.3, -48.6, -49.0, -49.5];
    let top = TopK::new(
        1.0,
        6.0,
        3,
        false,
        TopKMethod::WeightedDraws,
        BudgetSplit::Basic,
    )?;
    let rest: Vec<f64> = scores[1..].iter().map(|u| (u + 47.5).exp()).collect();
    let exact = ordered_pair_probs(&rest);
    let mut noise = NoiseSource::seeded(14);
    let mut counts = vec![0u64; 36];
    for _ in 0..200_000 {
        let chosen = top.select(&scores, &mut noise)?;
        assert_eq!(chosen[0], 0, "{chosen:?}");
        counts[(chosen[1] - 1) * 6 + chosen[2] - 1] += 1;
    }
    let (stat, critical) = chi_square(&counts, &exact);
    assert!(stat < critical, "chi-square {stat} >= {critical}");
    Ok(())
}

#[test]
fn top_k_budget_splits() -> dp_mechanisms::Result<()> {
    let basic = TopK::new(
        1.0,
        1.0,
        10,
        false,
        TopKMethod::OneShotGumbel,
        BudgetSplit::Basic,
    )?;
    assert!((basic.per_round_epsilon() - 0.1).abs() < 1e-15);
    let advanced = TopK::new(
        1.0,
        1.0,
        1000,
        false,
        TopKMethod::OneShotGumbel,
        BudgetSplit::Advanced { delta_prime: 1e-6 },
    )?;
    let e0 = advanced.per_round_epsilon();
    let (total, _) = dp_accounting::advanced_composition(e0, 0.0, 1000, 1e-6)?;
    assert!(total <= 1.0 && total > 0.999, "{total}");
    assert!(
        e0 > 1.0 / 1000.0,
        "advanced composition allows more per round for large k"
    );
    // Selections are distinct and in range.
    let mut noise = NoiseSource::seeded(12);
    let scores: Vec<f64> = (0..1000).map(f64::from).collect();
    let chosen = basic.select(&scores, &mut noise)?;
    let mut sorted = chosen.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 10);
    Ok(())
}

#[test]
fn sparse_vector_stops_after_cutoff() -> dp_mechanisms::Result<()> {
    let mut noise = NoiseSource::seeded(13);
    for variant in [SparseVariant::Sparse, SparseVariant::Numeric] {
        for delta in [0.0, 1e-6] {
            let svt = SparseVector::new(variant, 1.0, 0.0, 3, 1.0, delta)?;
            let queries = vec![1e6; 50];
            let outcome = svt.release(&queries, &mut noise)?;
            assert_eq!(outcome.answers.len(), 3);
            assert!(outcome.halted);
            assert_eq!(outcome.examined, 3);
            assert_eq!(
                outcome.answers.iter().all(|a| a.value.is_some()),
                variant == SparseVariant::Numeric
            );
        }
    }
    let above = SparseVector::above_threshold(1.0, 10.0, 1.0)?;
    let outcome = above.release(&[-1e6, -1e6, 1e6, 1e6], &mut noise)?;
    assert_eq!(
        outcome.answers.iter().map(|a| a.index).collect::<Vec<_>>(),
        vec![2]
    );
    Ok(())
}

/// Dwork & Roth Thm 3.28: with probability ≥ 1 − β, NumericSparse (δ = 0) answers only
/// queries with f ≥ T − α, each within α, and leaves none with f > T + α unanswered,
/// α = 9c(ln k + ln(4c/β))·Δ/ε. Checked on planted data over many runs.
#[test]
fn numeric_sparse_accuracy_lemma_holds() -> dp_mechanisms::Result<()> {
    let (k, c, beta, epsilon, threshold) = (200usize, 4usize, 0.05, 2.0, 100.0);
    let alpha = 9.0 * c as f64 * ((k as f64).ln() + (4.0 * c as f64 / beta).ln()) / epsilon;
    let svt = SparseVector::new(SparseVariant::Numeric, 1.0, threshold, c, epsilon, 0.0)?;
    let mut noise = NoiseSource::seeded(14);
    let runs = 2000;
    let mut failures = 0;
    for run in 0..runs {
        // c planted queries well above T + α, the rest well below T − α.
        let mut queries = vec![threshold - 1.5 * alpha; k];
        for j in 0..c {
            queries[(run * 7 + j * 37) % k] = threshold + 1.5 * alpha;
        }
        let outcome = svt.release(&queries, &mut noise)?;
        let answered: Vec<usize> = outcome.answers.iter().map(|a| a.index).collect();
        let bad_answer = outcome.answers.iter().any(|a| {
            let f = queries[a.index];
            f < threshold - alpha || a.value.is_some_and(|v| (v - f).abs() > alpha)
        });
        let missed =
            (0..outcome.examined).any(|i| queries[i] > threshold + alpha && !answered.contains(&i));
        failures += usize::from(bad_answer || missed);
    }
    // β·runs = 100 allowed; the bound is loose, so in practice there are none.
    assert!(
        failures as f64 <= beta * runs as f64,
        "{failures} failures in {runs} runs"
    );
    Ok(())
}
