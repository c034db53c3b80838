"""DefiniteBoost's iteration rate as a fit proceeds, at d = 500 ... 2000 objects.

The issue (19): at 2000 objects a fit slowed from 44 to 1.7 iterations / s.
Two costs make an iteration:

* the greedy choice: evaluating every pair constraint, ``O(m d)`` (``m``
  constraints), the same at every iteration;
* the projection: a rank-one eigen-update, ``O(d k^2)`` for the ``k``
  eigenvalues that do not deflate. From the identity prior almost all
  deflate; once the similar pairs' graph connects the objects (after about
  ``d`` projections) almost none do, and an update costs a d x d x d product.

"before": the greedy choice scans every constraint at every iteration (the
paper's choice exactly, ``scan_every=1``); "after": the default, a scan
every ``ceil(m / d)`` iterations with a working set in between (see
``megkernel._solvers.definiteboost_projections._scan_interval``). Both run the same
pairs in the same process, one thread. Printed: iterations / s in windows of
the run, and the ratio after / before.

Data: family-structured sequences (``_family_data.py``), 10^5 observed pairs
(all of them below 448 objects), the closest 10 % as similar pairs, the
identity prior, ``gamma`` 0.1 of its mean squared distance.

Usage::

    python benchmarks/bench_definiteboost_scale.py [--sizes 500 1000 2000] [--iterations 1500]
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _family_data import family_sequences, observed_pairs  # noqa: E402

from megkernel._numerics.state import ExponentState  # noqa: E402
from megkernel._solvers import definiteboost_projections as solver  # noqa: E402
from megkernel._solvers.definiteboost_rules import pair_thresholds  # noqa: E402

N_OBSERVED = 100_000


def problem(d, seed=1):
    ids, _, distances = family_sequences(d, seed=seed)
    n_all = d * (d - 1) // 2
    table = observed_pairs(ids, distances, min(1.0, N_OBSERVED / n_all), seed=seed)
    close = table.nsmallest(max(1, len(table) // 10), "distance")
    position = {name: k for k, name in enumerate(ids)}
    return np.column_stack([close["a"].map(position), close["b"].map(position)])


def rates(d, pairs, n_iter, window, scan_every):
    """Iterations / s in consecutive windows of one run from ``I / d``."""
    state = ExponentState.identity(d)
    signs = np.ones(len(pairs))
    thresholds, gamma, _ = pair_thresholds(state, signs)
    constraints = solver.PairConstraints(pairs[:, 0], pairs[:, 1], signs, thresholds,
                                         state)
    stamps = []

    def callback(t, record):
        if t % window == 0:
            stamps.append(time.perf_counter())

    settings = solver._Settings(max_iter=n_iter, tol=0.005 * gamma, keep="last",
                                scan_every=scan_every)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        log = solver.run_definiteboost(constraints, state, settings, method="auto",
                                       callback=callback)
    times = np.diff([start, *stamps])
    return window / times, log["n_iter"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000])
    parser.add_argument("--iterations", type=int, default=1500)
    parser.add_argument("--window", type=int, default=250)
    args = parser.parse_args()
    print(f"{'d':>5} {'pairs':>6} {'scan every':>10} {'mode':>7}  iterations / s by window of "
          f"{args.window}")
    for d in args.sizes:
        pairs = problem(d)
        interval = solver._scan_interval(len(pairs), d)
        results = {}
        for mode, scan_every in (("before", 1), ("after", None)):
            results[mode], n_iter = rates(d, pairs, args.iterations, args.window,
                                          scan_every)
            shown = " ".join(f"{r:7.1f}" for r in results[mode])
            print(f"{d:5d} {len(pairs):6d} {1 if scan_every else interval:10d} {mode:>7}  "
                  f"{shown}   ({n_iter} iterations)", flush=True)
        n = min(len(results["before"]), len(results["after"]))
        ratio = " ".join(f"{r:7.2f}" for r in results["after"][:n] / results["before"][:n])
        print(f"{'':5} {'':6} {'':10} {'ratio':>7}  {ratio}", flush=True)


if __name__ == "__main__":
    main()
