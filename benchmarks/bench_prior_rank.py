"""The batch fit's spectral prior rank: the prior's own choice against the race.

``MEGKernelRegressor``'s batch fit (``init="auto"``) starts from the spectral
prior at the rank whose prior predicts the held-out pairs best; among the
ranks whose priors predict them as well within noise it then keeps the one
whose *fitted* kernel predicts them best (beyond noise). This benchmark fits
each table both ways in one process -- ``fit_batch(ranks=(r,))`` at the
prior's own choice ``r`` (what the fit did before the race; the same run
bit for bit) and the default -- and prints the rank, the held-out ``R^2``,
the kernel's 1-NN accuracy (ten random halves of the objects) and the CPU
seconds of each (the prior's choice with the scan that made it). One BLAS
thread.

Tables (``--tables``): ``knn:<objects>:<seed>`` (the family data's k-NN
graph topped up with random pairs, ~50 pairs per object, as
``bench_definiteboost_scale.knn_table``), ``family:<objects>:<fraction>:<seed>``
and ``graph:<objects>:<fraction>:<seed>`` (``bench_own_data``'s sparse tasks),
``survey`` and ``word`` (``_user_tables``).

    python benchmarks/bench_prior_rank.py --tables knn:2000:0 graph:500:0.2:3 survey
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _family_data import _split_accuracy, observed_pairs  # noqa: E402

from megkernel._numerics.state import ExponentState  # noqa: E402
from megkernel._solvers.holdout import canonical_order, holdout_pairs  # noqa: E402
from megkernel._solvers.meg_batch import fit_batch, spectral_prior  # noqa: E402


def load(name):
    """Return ``ids, labels, table`` (columns ``a, b, distance``) of a named table."""
    if name in ("survey", "word"):
        from _user_tables import survey_table, word_table

        return (survey_table if name == "survey" else word_table)()
    kind, *rest = name.split(":")
    if kind == "knn":
        from bench_definiteboost_scale import knn_table

        ids, labels, table, _ = knn_table(int(rest[0]), seed=int(rest[1]))
        return ids, labels, table
    from bench_own_data import _sparse_task

    n_objects, fraction, seed = int(rest[0]), float(rest[1]), int(rest[2])
    ids, labels, distances = _sparse_task(kind, n_objects, seed)
    return ids, labels, observed_pairs(ids, distances, fraction, seed=seed)


def prior_choice(pairs, y, n_objects, random_state=0, fraction=0.1):
    """The rank the spectral prior alone chooses on the batch fit's own split."""
    order = canonical_order(pairs, y)
    pairs, y = np.sort(pairs, axis=1)[order], y[order]
    train, held, _ = holdout_pairs(len(y), fraction, random_state)
    unit = float(np.mean(y[train][pairs[train, 0] != pairs[train, 1]]))
    a, b = pairs[train].T
    a_val, b_val = pairs[held].T
    return spectral_prior(n_objects, a, b, y[train] / unit, a_val, b_val, y[held] / unit).rank


def run(name):
    ids, labels, table = load(name)
    index = {key: k for k, key in enumerate(ids)}
    pairs = np.column_stack([table["a"].map(index), table["b"].map(index)])
    y = table["distance"].to_numpy() ** 2
    d = len(ids)
    scan = time.process_time()
    own = prior_choice(pairs, y, d)
    scan = time.process_time() - scan
    line = f"| {name} | {len(y)} |"
    for ranks in ((own,), None):
        cpu = time.process_time() - (scan if ranks else 0.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = fit_batch(
                pairs,
                y,
                prior=ExponentState.identity(d),
                spectral=True,
                random_state=0,
                **({} if ranks is None else {"ranks": ranks}),
            )
        cpu = time.process_time() - cpu
        K = fit.trace * fit.state.matrix()
        diag = np.diag(K)
        knn = _split_accuracy(np.maximum(diag[:, None] + diag[None, :] - 2 * K, 0.0), labels)
        line += f" {fit.prior_rank} | {fit.validation_score:.4f} | {knn:.3f} | {cpu:.1f} |"
    print(line, flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="+", default=["knn:2000:0", "graph:500:0.2:3"])
    args = parser.parse_args(argv)
    print("| table | pairs | prior's rank | R2 | 1-NN | CPU s | raced rank | R2 | 1-NN | CPU s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.tables:
        run(name)


if __name__ == "__main__":
    main()
