//! Successive weighted sampling without replacement by bucketed rejection: the
//! distribution of exponential-mechanism peeling and of one-shot Gumbel top-k, with k
//! random draws (plus rejections) instead of n.
//!
//! Item i has log-weight `ℓᵢ = scale·scoreᵢ − max`. Items are grouped into buckets of
//! log-weight width [`BUCKET_WIDTH`] below a level's top; bucket j's bound `bⱼ ≥ ℓᵢ` for
//! its members. A draw proposes a bucket with probability ∝ `|j|·e^{bⱼ}`, a uniform member
//! i of it, and accepts it with probability `e^{ℓᵢ − bⱼ}`; so each attempt accepts item i
//! with probability `e^{ℓᵢ}/Σⱼ|j|e^{bⱼ}`, a constant times its weight, and the accepted
//! item has the exact conditional law `e^{ℓᵢ}/Σ_left e^{ℓ}` (rejection sampling; von
//! Neumann 1951).
//!
//! Items more than [`BUCKETS_PER_LEVEL`] widths below a level's top wait in one tail
//! bucket, whose bound is the largest log-weight among its members. The tail is a bucket
//! like the others: when proposed, a uniform member is accepted with probability
//! `e^{ℓᵢ − b_tail}` (which may be small, since the tail spans any range). After that
//! attempt, accepted or not, what is left of the tail is split into a new level below its
//! own maximum. Exactness survives any such restructuring between attempts: whatever the
//! buckets at the start of an attempt (a function of the past), the attempt accepts each
//! item left with probability proportional to its weight, so the first accepted item has
//! the exact law. (Restarting when the tail is proposed, without the acceptance test, is
//! not exact: that attempt accepts nothing from the tail but still accepts the items above
//! it, which under-samples the tail.)
//!
//! Ordinary proposals are accepted with probability ≥ e^{−1}; a tail proposal happens at
//! most once per split. Cost: O(n) passes without randomness to bucket, then O(k)
//! expected draws plus the splits.

use crate::noise::NoiseSource;

/// Width of a bucket in log-weight: every proposal is accepted with probability ≥ e^{−1}.
const BUCKET_WIDTH: f64 = 1.0;
/// Buckets per level; items below the last wait in the level's tail (relative weight
/// below e^{−48}, so a tail is proposed, and split, only when the items above it are
/// nearly used up).
const BUCKETS_PER_LEVEL: usize = 48;

struct Bucket {
    /// Upper bound of its members' log-weights.
    bound: f64,
    /// `e^{bound − reference}`: the proposal mass of one member.
    factor: f64,
    members: Vec<u32>,
    /// Items of every log-weight below the level's last bucket, not yet split; its bound
    /// is their largest log-weight.
    tail: bool,
}

/// k indices drawn one at a time without replacement, each with probability
/// ∝ `exp(scale·score)` among those left, in draw order. Scores must be finite and
/// `k ≤ scores.len() ≤ u32::MAX` (checked by the callers).
pub(crate) fn successive_draws(
    scores: &[f64],
    scale: f64,
    k: usize,
    noise: &mut NoiseSource,
) -> Vec<usize> {
    let top = scores
        .iter()
        .fold(f64::NEG_INFINITY, |m, &s| m.max(scale * s));
    let log_weight = |i: u32| scale * scores[i as usize] - top;
    let mut buckets = first_level(scores, scale, top);
    let mut reference = f64::NAN;
    let mut chosen = Vec::with_capacity(k);
    while chosen.len() < k {
        let first = buckets
            .iter()
            .position(|b| !b.members.is_empty())
            .expect("k <= n leaves an item to draw");
        if buckets[first].bound != reference {
            reference = buckets[first].bound;
            for bucket in &mut buckets[first..] {
                bucket.factor = (bucket.bound - reference).exp();
            }
        }
        let total: f64 = buckets[first..]
            .iter()
            .map(|b| b.members.len() as f64 * b.factor)
            .sum();
        let mut target = noise.uniform() * total;
        let mut pick = first;
        for (j, bucket) in buckets.iter().enumerate().skip(first) {
            if bucket.members.is_empty() {
                continue;
            }
            pick = j;
            target -= bucket.members.len() as f64 * bucket.factor;
            if target < 0.0 {
                break;
            }
        }
        let bucket = &mut buckets[pick];
        let slot = noise.index_below(bucket.members.len());
        let item = bucket.members[slot];
        if noise.uniform() < (log_weight(item) - bucket.bound).exp() {
            bucket.members.swap_remove(slot);
            chosen.push(item as usize);
        }
        // The attempt is complete; now (and only now) the tail may be restructured.
        if bucket.tail {
            let tail = buckets.pop().expect("the tail is the last bucket");
            if !tail.members.is_empty() {
                let level_top = tail
                    .members
                    .iter()
                    .fold(f64::NEG_INFINITY, |m, &i| m.max(log_weight(i)));
                buckets.extend(level(&tail.members, level_top, log_weight));
            }
            reference = f64::NAN;
        }
    }
    chosen
}

/// The bucket of log-weight `w` in a level whose top is `level_top`, never one whose
/// bound is below `w` (the division may round either way).
fn bucket_of(w: f64, level_top: f64) -> usize {
    let gap = (level_top - w) / BUCKET_WIDTH;
    if gap >= BUCKETS_PER_LEVEL as f64 {
        return BUCKETS_PER_LEVEL;
    }
    let mut j = gap as usize;
    while j > 0 && w > bound_of(level_top, j) {
        j -= 1;
    }
    j
}

fn bound_of(level_top: f64, j: usize) -> f64 {
    level_top - j as f64 * BUCKET_WIDTH
}

/// Empty buckets sized by `counts`; the tail's bound is `tail_top`, the largest
/// log-weight of its members (−∞ when it has none).
fn empty_level(level_top: f64, counts: &[usize], tail_top: f64) -> Vec<Bucket> {
    counts
        .iter()
        .enumerate()
        .map(|(j, &count)| Bucket {
            bound: if j == BUCKETS_PER_LEVEL {
                tail_top
            } else {
                bound_of(level_top, j)
            },
            factor: 0.0,
            members: Vec::with_capacity(count),
            tail: j == BUCKETS_PER_LEVEL,
        })
        .collect()
}

/// The first level over all items (top log-weight 0): bucket ids and counts in one
/// pass, then a scatter into buffers sized exactly.
fn first_level(scores: &[f64], scale: f64, top: f64) -> Vec<Bucket> {
    let mut counts = [0usize; BUCKETS_PER_LEVEL + 1];
    let mut tail_top = f64::NEG_INFINITY;
    let ids: Vec<u8> = scores
        .iter()
        .map(|&s| {
            let w = scale * s - top;
            let id = bucket_of(w, 0.0);
            counts[id] += 1;
            if id == BUCKETS_PER_LEVEL {
                tail_top = tail_top.max(w);
            }
            id as u8
        })
        .collect();
    let mut buckets = empty_level(0.0, &counts, tail_top);
    for (i, &id) in ids.iter().enumerate() {
        buckets[id as usize].members.push(i as u32);
    }
    buckets
}

/// A level over `members` below `level_top`, their largest log-weight.
fn level(members: &[u32], level_top: f64, log_weight: impl Fn(u32) -> f64) -> Vec<Bucket> {
    let mut counts = [0usize; BUCKETS_PER_LEVEL + 1];
    let mut tail_top = f64::NEG_INFINITY;
    for &i in members {
        let w = log_weight(i);
        let id = bucket_of(w, level_top);
        counts[id] += 1;
        if id == BUCKETS_PER_LEVEL {
            tail_top = tail_top.max(w);
        }
    }
    let mut buckets = empty_level(level_top, &counts, tail_top);
    for &i in members {
        buckets[bucket_of(log_weight(i), level_top)].members.push(i);
    }
    buckets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_bound_their_members() {
        for (w, top) in [
            (-0.0, 0.0),
            (-1.0, 0.0),
            (-2.999_999, 0.0),
            (-47.5, 0.0),
            (-1e9, 0.0),
        ] {
            let j = bucket_of(w, top);
            if j < BUCKETS_PER_LEVEL {
                assert!(w <= bound_of(top, j) && w > bound_of(top, j) - BUCKET_WIDTH - 1e-12);
            } else {
                assert!(w < bound_of(top, BUCKETS_PER_LEVEL - 1) - BUCKET_WIDTH + 1e-12);
            }
        }
    }

    #[test]
    fn draws_every_item_once_even_across_levels() {
        // Three clusters hundreds of widths apart: the tail is split twice.
        let scores: Vec<f64> = (0..300)
            .map(|i| -((i % 3) as f64) * 200.0 - (i / 3) as f64 * 0.01)
            .collect();
        let mut noise = NoiseSource::seeded(3);
        let mut drawn = successive_draws(&scores, 1.0, 300, &mut noise);
        // The clusters come out in order: no item of a lower cluster before a higher one
        // (relative weight e^{-200}).
        let cluster: Vec<usize> = drawn.iter().map(|&i| i % 3).collect();
        assert!(cluster.windows(2).all(|w| w[0] <= w[1]));
        drawn.sort_unstable();
        assert_eq!(drawn, (0..300).collect::<Vec<_>>());
    }
}
