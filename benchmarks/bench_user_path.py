"""The kernel learners at their defaults on users' tables, alone and in the Pipeline default.

For each table (ids, planted classes, a pair table ``a, b, distance`` of plain
distances) and each learner (:class:`~megkernel.MEGKernelRegressor`,
:class:`~megkernel.DefiniteBoostKernel`) at its defaults, as a user calls it,
one BLAS thread, all in one process:

* ``raw``: held-out 1-NN on the given distances alone (a pair nobody measured
  is never a neighbour), the baseline;
* ``kernel``: the learner fitted alone on the table (MEG on the squared
  distances, DefiniteBoost with ``y_kind="distances"``), wall and CPU seconds
  of its ``fit`` (``time.process_time``), held-out 1-NN under its kernel's
  distances;
* ``pipeline``: ``Pipeline([KernelDistances(learner=..., pairs=..., targets=...,
  given_squared=False), KNeighborsClassifier(1, metric="precomputed")])`` at
  ``keep_given="auto"``, scored by ``cross_validate`` on the same splits
  (the learner learns once, its kernel reused by the splits; wall and CPU
  seconds of the whole cross-validation), and the modes ``"auto"`` chose.

Held-out 1-NN: ``ShuffleSplit(10, test_size=0.5, random_state=0)`` over the
objects (``_family_data._split_accuracy``), the same splits for all three.

Tables: the survey (944 respondents, Gower distance, 17 % of pairs) and the
word list (600 words, edit distance, 20 %) of ``_user_tables.py``; family
sequences at 2000 objects given as the 50-NN graph of their distances topped
up with random pairs to 10^5 (``bench_definiteboost_scale.knn_table``), at
seed 0 (the issue's table) and seeds 1 and 2 (held-out checks); ``survey1``
and ``words1`` are the user tables at seed 1.

Usage::

    python benchmarks/bench_user_path.py [--tables survey words families0 ...]
        [--learners MEG DB] [--no-pipeline]
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
from collections import Counter  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _family_data import knn_accuracy, raw_knn_accuracy  # noqa: E402
from _user_tables import survey_table, word_table  # noqa: E402
from bench_definiteboost_scale import knn_table  # noqa: E402

TABLES = {
    "survey": lambda: survey_table(),
    "survey1": lambda: survey_table(seed=1),
    "words": lambda: word_table(),
    "words1": lambda: word_table(seed=1),
    "families0": lambda: knn_table(2000, seed=0)[:3],
    "families1": lambda: knn_table(2000, seed=1)[:3],
    "families2": lambda: knn_table(2000, seed=2)[:3],
}


def make_learner(name, ids):
    from megkernel import DefiniteBoostKernel, MEGKernelRegressor

    if name == "MEG":
        return MEGKernelRegressor(objects=ids, random_state=0)
    return DefiniteBoostKernel(objects=ids, random_state=0)


def fit_alone(name, ids, table):
    """The learner fitted alone as a user would; wall, CPU seconds, warnings, model."""
    model = make_learner(name, ids)
    if name == "DB":
        model.set_params(y_kind="distances")
        y = table["distance"].to_numpy()
    else:
        y = table["distance"].to_numpy() ** 2
    wall, cpu = time.perf_counter(), time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(table[["a", "b"]], y)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return model, wall, cpu, [f"{w.category.__name__}: {w.message}" for w in caught]


def pipeline_default(name, ids, labels, table):
    """cross_validate of the Pipeline default; mean 1-NN, wall, CPU, chosen modes, warnings."""
    from sklearn.model_selection import ShuffleSplit, cross_validate
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.pipeline import Pipeline

    from megkernel import KernelDistances

    pipe = Pipeline([
        ("kernel", KernelDistances(learner=make_learner(name, ids), pairs=table[["a", "b"]],
                                   targets=table["distance"], given_squared=False)),
        ("knn", KNeighborsClassifier(n_neighbors=1, metric="precomputed")),
    ])
    wall, cpu = time.perf_counter(), time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = cross_validate(pipe, ids, labels,
                                cv=ShuffleSplit(10, test_size=0.5, random_state=0),
                                return_estimator=True)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    modes = Counter(est.named_steps["kernel"].keeps_given_ for est in result["estimator"])
    notes = Counter(f"{w.category.__name__}: {str(w.message)[:110]}" for w in caught)
    return float(np.mean(result["test_score"])), wall, cpu, modes, notes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="*", default=["survey", "words", "families0"],
                        choices=sorted(TABLES))
    parser.add_argument("--learners", nargs="*", default=["MEG", "DB"], choices=["MEG", "DB"])
    parser.add_argument("--no-pipeline", action="store_true")
    args = parser.parse_args()
    print("| table | objects | pairs | learner | raw 1-NN | kernel 1-NN | kernel CPU s | "
          "kernel wall s | pipeline 1-NN | pipeline CPU s | pipeline wall s | modes | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for table_name in args.tables:
        ids, labels, table = TABLES[table_name]()
        raw = raw_knn_accuracy(ids, labels, table)
        for name in args.learners:
            model, wall, cpu, notes = fit_alone(name, ids, table)
            kernel = knn_accuracy(model, ids, labels)
            extra = ""
            if name == "DB":
                extra = f" n_iter {model.n_iter_} converged {model.converged_}"
            print(f"# {table_name} {name} alone:{extra} warnings: {notes}", flush=True)
            if args.no_pipeline:
                pipe = ("", float("nan"), float("nan"), {}, {})
            else:
                pipe = pipeline_default(name, ids, labels, table)
                print(f"# {table_name} {name} pipeline warnings: {dict(pipe[4])}", flush=True)
            modes = " ".join(f"{k} {v}" for k, v in sorted(pipe[3].items()))
            print(f"| {table_name} | {len(ids)} | {len(table)} | {name} | {raw:.3f} | "
                  f"{kernel:.3f} | {cpu:.1f} | {wall:.1f} | "
                  f"{pipe[0] if pipe[0] == '' else format(pipe[0], '.3f')} | {pipe[2]:.1f} | "
                  f"{pipe[1]:.1f} | {modes} | {os.getloadavg()[0]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
