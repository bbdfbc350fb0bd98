"""Times Google's dp_accounting on the accounting benchmark's settings (optional).

`cargo xtask bench accounting --compare-python` runs this when `python3 -c "import
dp_accounting"` works (`pip install dp-accounting`). Prints one JSON line per case:
{"case", "epsilon", "median_s"}.
"""
import json
import statistics
import sys
import time

import dp_accounting
from dp_accounting import pld, rdp

Q, SIGMA, STEPS, DELTA = 256 / 60000, 1.1, 14062, 1e-5
REPEATS = int(sys.argv[1]) if len(sys.argv) > 1 else 5


def event():
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(Q, dp_accounting.GaussianDpEvent(SIGMA)), STEPS)


def rdp_epsilon():
    acc = rdp.RdpAccountant()  # dp_accounting's 156 default orders
    acc.compose(event())
    return acc.get_epsilon(DELTA)


def pld_epsilon():
    acc = pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(event())
    return acc.get_epsilon(DELTA)


for name, fn in [("rdp", rdp_epsilon), ("pld", pld_epsilon)]:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        eps = fn()
        times.append(time.perf_counter() - start)
    print(json.dumps({"case": name, "epsilon": eps, "median_s": statistics.median(times)}))
