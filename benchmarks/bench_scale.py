"""Low-rank MEG at scale: d = 10^4 and 10^5 objects, rank r = 20, 50, 100.

For each (d, r): a random prior factor ``F`` (d x r, Gaussian features), a
hidden target kernel in its range, random pairs with the target's squared
distances. Reported, on one thread (BLAS and numba):

* setup: factorising the prior (thin SVD of ``F``, ``O(d r^2)``);
* MEG trials per second of ``MEGKernelRegressor.partial_fit`` in low-rank
  mode (``learning_rate="auto"``, default engine), after a first call that
  sets the model up and compiles / loads the engine;
* peak memory of setup + trials + ``predict`` (tracemalloc), against the
  size of the factor ``8 d r`` bytes (a d x d kernel would be ``8 d^2``).

Usage::

    python benchmarks/bench_scale.py [--trials 20000]
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402

import numpy as np  # noqa: E402

from megkernel import MEGKernelRegressor  # noqa: E402
from megkernel._numerics.state import ExponentState  # noqa: E402

SIZES = (10_000, 100_000)
RANKS = (20, 50, 100)
#: Targets of the issue at d = 10^5 (trials / s) and for the setup at r = 50.
TRIAL_TARGETS = {20: 10_000, 50: 3_000, 100: 800}
SETUP_TARGET = 2.0


def problem(d, r, n_trials, seed=0):
    """Prior factor, pairs and squared distances of a hidden kernel in range."""
    rng = np.random.default_rng(seed)
    factor = rng.normal(size=(d, r))
    basis = np.linalg.qr(factor)[0]
    spectrum = rng.exponential(size=r)
    hidden = basis * np.sqrt(spectrum / spectrum.sum())  # K* = hidden hidden^T, trace 1
    pairs = rng.integers(0, d, size=(n_trials, 2))
    diff = hidden[pairs[:, 0]] - hidden[pairs[:, 1]]
    return factor, pairs, np.einsum("ij,ij->i", diff, diff)


def measure(d, r, n_trials):
    factor, pairs, y = problem(d, r, n_trials + 100)
    start = time.perf_counter()
    ExponentState.from_factor(factor)
    setup = time.perf_counter() - start

    tracemalloc.start()
    model = MEGKernelRegressor(solver="online", init_factor=factor)
    model.partial_fit(pairs[:100], y[:100])  # set-up and engine compilation
    start = time.perf_counter()
    model.partial_fit(pairs[100:], y[100:])
    trials_per_second = n_trials / (time.perf_counter() - start)
    model.predict(pairs[:1000])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    first, last = model.losses_[:1000].mean(), model.losses_[-1000:].mean()
    return {"setup": setup, "trials_per_second": trials_per_second,
            "peak_mb": peak / 2**20, "peak_over_factor": peak / (8 * d * r),
            "loss_drop": first / last, "rate": model.learning_rate_}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20_000,
                        help="timed trials per (d, r) (default 20000)")
    args = parser.parse_args(argv)
    rows = {}
    print("| d | r | setup s | MEG trials/s | peak MB | peak / (8 d r) "
          "| mean loss first/last 1000 |")
    print("|---|---|---|---|---|---|---|")
    for d in SIZES:
        for r in RANKS:
            row = rows[d, r] = measure(d, r, args.trials)
            print(f"| {d:,} | {r} | {row['setup']:.3f} | {row['trials_per_second']:,.0f} "
                  f"| {row['peak_mb']:.0f} | {row['peak_over_factor']:.1f} "
                  f"| {row['loss_drop']:.1f} |", flush=True)
    d = max(SIZES)
    print()
    for r, target in TRIAL_TARGETS.items():
        got = rows[d, r]["trials_per_second"]
        print(f"- d = {d:,}, r = {r}: {got:,.0f} trials/s (target >= {target:,}: "
              f"{'met' if got >= target else 'MISSED'})")
    setup = rows[d, 50]["setup"]
    print(f"- d = {d:,}, r = 50: setup {setup:.2f} s (target <= {SETUP_TARGET} s: "
          f"{'met' if setup <= SETUP_TARGET else 'MISSED'})")


if __name__ == "__main__":
    main()
