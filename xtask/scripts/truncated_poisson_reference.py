"""Truncated Poisson sampling: dp_accounting 0.6 beside an independent build of ours.

For 24 seeded random settings (N records, rate q, cap B, noise multiplier sigma, steps
T, delta) prints one JSON line with:
  p_trunc      P[Binomial(N - 1, q) >= B] (scipy), the truncated branch's weight;
  eps_ours     our bound (crates/dp-accounting/src/truncated.rs) built from
               dp_accounting's primitives: the Poisson Gaussian PLD (sigma, q) mixed
               with the add/remove Poisson Gaussian PLD (sigma / 2, q_bar), weight
               p_trunc, self-composed T times, q_bar = P[Bin(N, q) > B] B / (p_trunc N);
  eps_dp_acc   dp_accounting 0.6's TruncatedSubsampledGaussianDpEvent (arXiv
               2508.15089: a replace-one pair at sigma / 2 with the conditional rate);
  eps_poisson  the untruncated Poisson Gaussian (no cap), for scale.
All at dp_accounting's default discretisation (1e-4). Needs dp-accounting >= 0.6 and
scipy (pip install "dp-accounting>=0.6"); the Rust test
crates/dp-accounting/tests/truncated.rs holds this script's output.
"""
import json
import random

import dp_accounting
from dp_accounting import pld
from dp_accounting.pld import privacy_loss_distribution as pldlib
from scipy import stats


def ours(n, q, b, sigma, steps):
    p = float(stats.binom.sf(b - 1, n - 1, q))
    full = pldlib.from_gaussian_mechanism(sigma, sampling_prob=q)
    if p == 0.0:
        return p, full.self_compose(steps)
    q_bar = float(stats.binom.sf(b, n, q)) * b / (p * n)
    cut = pldlib.from_gaussian_mechanism(sigma / 2, sampling_prob=q_bar)
    return p, cut.compute_mixture(full, p).self_compose(steps)


def theirs(n, q, b, sigma, steps):
    acc = pld.PLDAccountant()
    acc.compose(
        dp_accounting.TruncatedSubsampledGaussianDpEvent(n, q, b, sigma), steps)
    return acc


def poisson(q, sigma, steps):
    acc = pld.PLDAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(
        q, dp_accounting.GaussianDpEvent(sigma)), steps)
    return acc


def main():
    rng = random.Random(2508)
    for _ in range(24):
        n = int(10 ** rng.uniform(3, 6))
        expected = rng.choice([16, 32, 64, 128, 256, 512])
        expected = min(expected, n // 4)
        q = expected / n
        b = max(1, int(expected * rng.uniform(0.9, 1.4)))
        sigma = round(rng.uniform(0.7, 2.0), 3)
        steps = rng.choice([1, 10, 100, 1000])
        delta = rng.choice([1e-5, 1e-6])
        p, ours_pld = ours(n, q, b, sigma, steps)
        print(json.dumps({
            "dataset_size": n, "sampling_rate": q, "max_batch_size": b,
            "noise_multiplier": sigma, "steps": steps, "delta": delta,
            "p_trunc": p,
            "eps_ours": ours_pld.get_epsilon_for_delta(delta),
            "eps_dp_acc": theirs(n, q, b, sigma, steps).get_epsilon(delta),
            "eps_poisson": poisson(q, sigma, steps).get_epsilon(delta),
        }), flush=True)


if __name__ == "__main__":
    main()
