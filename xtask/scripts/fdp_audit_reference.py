"""Reference values for dp-accounting's f-DP one-run audit (crates/dp-accounting/src/fdp_audit.rs).

An independent implementation, Python standard library only, of the test of Mahloujifar,
Melis & Chaudhuri 2024 ("Auditing f-Differential Privacy in One Run", arXiv 2410.22235),
in the form of Meta's PrivacyGuard (`rh_with_cap` / `audit_rh_with_cap`, Apache-2.0) with
jax_privacy's clamp of r at 1. Prints, for each (m, c', c) at 95% confidence: the largest
refused mu of mu-GDP (bisection, 100 steps), its epsilon at delta = 1e-5, and the largest
refused epsilon of (epsilon, 1e-5)-DP with the (epsilon, delta) trade-off curve.

    python3 xtask/scripts/fdp_audit_reference.py
"""
import math
from statistics import NormalDist

NORMAL = NormalDist()


def cdf(x):
    if x == math.inf:
        return 1.0
    if x == -math.inf:
        return 0.0
    return NORMAL.cdf(x)


def gaussian_g(mu):
    def g(y):
        if y <= 0.0:
            return 0.0
        if y >= 1.0:
            return 1.0
        return cdf(NORMAL.inv_cdf(y) - mu)
    return g


def approximate_g(eps, delta):
    def g(y):
        if y <= 0.0:
            return 0.0
        if y >= 1.0:
            return 1.0
        return max(0.0, (y - delta) * math.exp(-eps), 1.0 - delta - math.exp(eps) * (1.0 - y))
    return g


def refuses(g, m, guesses, correct, tau=0.05):
    r = tau * correct / m
    h = tau * (guesses - correct) / m
    for i in range(correct - 1, -1, -1):
        h_next = max(h, g(r))
        r = min(1.0, r + i / (guesses - i) * (h_next - h))
        h = h_next
    return correct > 0 and r + h > guesses / m


def largest_refused(refused):
    if not refused(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    while refused(hi):
        lo, hi = hi, 2.0 * hi
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if refused(mid):
            lo = mid
        else:
            hi = mid
    return lo


def gdp_delta(eps, mu):
    return cdf(-eps / mu + mu / 2) - math.exp(eps) * cdf(-eps / mu - mu / 2)


def gdp_epsilon(delta, mu):
    if mu <= 0.0 or gdp_delta(0.0, mu) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while gdp_delta(hi, mu) > delta:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if gdp_delta(mid, mu) > delta:
            lo = mid
        else:
            hi = mid
    return hi


CASES = [
    (100, 80, 70), (1000, 10, 10), (1000, 50, 50), (1000, 100, 100), (1000, 200, 190),
    (1000, 500, 400), (1000, 1000, 600), (1000, 1000, 750), (1000, 800, 500),
    (2000, 1500, 1000), (2000, 252, 249), (10000, 1000, 1000), (10000, 10000, 6000),
]

if __name__ == "__main__":
    for m, guesses, correct in CASES:
        mu = largest_refused(lambda x: refuses(gaussian_g(x), m, guesses, correct))
        eps = largest_refused(lambda e: refuses(approximate_g(e, 1e-5), m, guesses, correct))
        print(f"({m}, {guesses}, {correct}, {mu:.6f}, {gdp_epsilon(1e-5, mu):.4f}, {eps:.4f}),")
