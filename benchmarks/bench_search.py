"""Cross-validation and grid search of a KernelDistances pipeline: n_jobs and memory.

Issue 21 measured ``cross_val_score`` of a ``KernelDistances`` pipeline 5x
slower with ``n_jobs=2`` than with ``n_jobs=1``: the learned-kernel cache is
per process, so every loky worker learned the same kernel. Here, on a MEG
problem of ``--objects`` objects in 4 families (8-d points, distances in the
user's units, a random 20 % of the pairs observed), one BLAS thread per
process:

* ``cross_val_score`` (1 kernel, ``ShuffleSplit(10, 0.5)``, 1-NN) and
  ``GridSearchCV`` (3 learning rates x ``n_neighbors`` 1, 3: 3 kernels,
  ``ShuffleSplit(5, 0.5)``);
* ``n_jobs`` 1 and 2 (loky), without ``memory`` and with ``memory`` (a new
  folder per run);
* wall time (best of ``--repeats``), its ratio to ``n_jobs=1`` without
  memory (the baseline, same process), and the kernels learned in all
  processes (a learner that logs its fits to a file).

The configurations run round-robin (each repeat runs all four), so that
each meets the same load of the machine. Every timed run has cold caches:
a new ``random_state`` of the learner (which keys the kernel but does not
change it) and a new memory folder. The loky workers are started (and
megkernel imported and compiled in them) before the timings; that one-off
start is reported apart.

Usage::

    python benchmarks/bench_search.py [--objects 200] [--repeats 5]
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "NUMBA_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import itertools  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
from sklearn.model_selection import GridSearchCV, ShuffleSplit, cross_val_score  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402

from megkernel import KernelDistances, MEGKernelRegressor  # noqa: E402
from megkernel.objects import clear_cache  # noqa: E402


class LoggedMEG(MEGKernelRegressor):
    """MEGKernelRegressor that appends a line to ``log`` at each fit."""

    def __init__(self, *, objects=None, learning_rate="auto", random_state=None, log=None):
        super().__init__(objects=objects, learning_rate=learning_rate,
                         random_state=random_state)
        self.log = log

    def fit(self, X, y):
        with open(self.log, "a") as handle:
            handle.write(f"{os.getpid()}\n")
        return super().fit(X, y)


def make_problem(n_objects, seed=0):
    """Ids, labels, and an observed pair table of squared distances."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n_objects) % 4
    points = rng.normal(size=(n_objects, 8)) + 3.0 * np.eye(8)[labels]
    ids = np.array([f"s{i:04d}" for i in range(n_objects)], dtype=object)
    i, j = np.triu_indices(n_objects, 1)
    keep = rng.random(len(i)) < 0.2
    i, j = i[keep], j[keep]
    sq = 1000.0 * ((points[i] - points[j]) ** 2).sum(1)
    return ids, labels, np.column_stack([ids[i], ids[j]]), sq


_RUN = itertools.count()


def _pipe(problem, log, memory):
    ids, _, pairs, sq = problem
    learner = LoggedMEG(objects=ids, random_state=next(_RUN), log=log)  # cold caches
    return Pipeline([
        ("distances", KernelDistances(learner=learner, pairs=pairs, targets=sq,
                                      given_squared=True, memory=memory)),
        ("knn", KNeighborsClassifier(1, metric="precomputed")),
    ])


def run(task, problem, n_jobs, memory, folder):
    """Seconds and kernels learned for one cold run."""
    log = os.path.join(folder, f"fits-{next(_RUN)}.log")
    cache = tempfile.mkdtemp(dir=folder) if memory else None
    clear_cache()
    ids, labels, _, _ = problem
    pipe = _pipe(problem, log, cache)
    start = time.perf_counter()
    if task == "cross_val_score":
        cross_val_score(pipe, ids, labels, n_jobs=n_jobs,
                        cv=ShuffleSplit(10, test_size=0.5, random_state=0))
    else:
        GridSearchCV(pipe, {"distances__learner__learning_rate": [0.25, 0.5, 1.0],
                            "knn__n_neighbors": [1, 3]}, n_jobs=n_jobs,
                     cv=ShuffleSplit(5, test_size=0.5, random_state=0)).fit(ids, labels)
    seconds = time.perf_counter() - start
    with open(log) as handle:
        learned = len(handle.read().split())
    return seconds, learned


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    problem = make_problem(args.objects)
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as folder:
        run("cross_val_score", problem, 1, False, folder)         # compile in this process
        start = time.perf_counter()
        run("cross_val_score", problem, 2, False, folder)         # start the workers
        startup = time.perf_counter() - start
        print(f"{args.objects} objects, {len(problem[3])} observed pairs; first n_jobs=2 "
              f"call (loky workers start, import, compile): {startup:.2f} s\n")
        print(f"| task | n_jobs | memory | seconds (best of {args.repeats}) "
              "| ratio to n_jobs=1, no memory | kernels learned |")
        print("|---|---|---|---|---|---|")
        configs = ((1, False), (2, False), (1, True), (2, True))
        for task in ("cross_val_score", "GridSearchCV"):
            # round-robin over the configurations, so that each meets the same
            # load of the machine; the best of the repeats
            runs = {config: [] for config in configs}
            for _ in range(args.repeats):
                for n_jobs, memory in configs:
                    runs[n_jobs, memory].append(run(task, problem, n_jobs, memory, folder))
            baseline = min(r[0] for r in runs[configs[0]])
            for n_jobs, memory in configs:
                seconds = min(r[0] for r in runs[n_jobs, memory])
                learned = sorted({r[1] for r in runs[n_jobs, memory]})
                print(f"| {task} | {n_jobs} | {'folder' if memory else 'None'} | "
                      f"{seconds:.2f} | {seconds / baseline:.2f} | "
                      f"{'/'.join(map(str, learned))} |", flush=True)


if __name__ == "__main__":
    main()
