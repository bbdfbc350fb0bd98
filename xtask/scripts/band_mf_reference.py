"""BandMF's strategy by jax_privacy 2.0 (float64): optimised banded Toeplitz coefficients,
their prefix-sum loss and min-separated sensitivity, for 12 settings.

Prints one JSON line per (n, bands): {"n", "bands", "coefs", "loss", "sensitivity":
[[min_sep, max_participations, sensitivity_squared], ...]}. Needs jax-privacy (pip
install jax-privacy, which brings jax; about a minute on 2 cores);
crates/dp-mechanisms/tests/band_mf.rs holds this script's output and checks our loss and
sensitivity of the same coefficients, and that our optimiser gets within 0.1% of
jax_privacy's L-BFGS.
"""
import json

import jax

jax.config.update("jax_enable_x64", True)

from jax_privacy.matrix_factorization import toeplitz  # noqa: E402

SETTINGS = [(50, 1), (50, 4), (128, 2), (128, 8), (128, 16), (500, 4), (500, 16),
            (1000, 8), (1000, 32), (2000, 1), (2000, 16), (2000, 64)]


def main():
    for n, bands in SETTINGS:
        coefs = toeplitz.optimize_banded_toeplitz(n, bands, max_optimizer_steps=250)
        sens = []
        for min_sep, k in [(bands, n // bands), (bands, 3), (max(1, bands // 2), 4), (1, 2)]:
            try:
                s2 = toeplitz.minsep_sensitivity_squared(coefs, min_sep, k, n=n)
            except ValueError:  # coefficients not non-negative non-increasing
                continue
            sens.append([min_sep, k, float(s2)])
        print(json.dumps({
            "n": n, "bands": bands, "coefs": [float(c) for c in coefs],
            "loss": float(toeplitz.loss(coefs, n)), "sensitivity": sens,
        }), flush=True)


if __name__ == "__main__":
    main()
