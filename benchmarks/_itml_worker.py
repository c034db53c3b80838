"""ITML side of ``bench_itml.py``; runs in the benchmark's own environment.

Usage: ``python _itml_worker.py [--labels] RESULTS.json CONSTRAINTS.npz [...]``.
Fits metric-learn's ``ITML`` (defaults) on the saved constraints of each file
(with ``--labels`` also metric-learn's ``LMNN`` and ``NCA`` from the training
labels, at their defaults) and writes the held-out k-NN accuracies and fit
times as JSON, one entry per method. Imports nothing from megkernel: this
interpreter has scikit-learn 1.5 and metric-learn 0.7.
"""

import json
import sys
import time

import numpy as np
from metric_learn import ITML, LMNN, NCA
from sklearn.neighbors import KNeighborsClassifier


def _fit(learner, fit_args, data):
    start = time.perf_counter()
    learner.fit(*fit_args)
    seconds = time.perf_counter() - start
    Z_train, Z_test = learner.transform(data["X_train"]), learner.transform(data["X_test"])
    accuracy = {
        str(k): KNeighborsClassifier(n_neighbors=k).fit(Z_train, data["y_train"])
        .score(Z_test, data["y_test"])
        for k in (1, 3)
    }
    return {"fit_seconds": seconds, "accuracy": accuracy}


def evaluate(path, labels=False):
    data = np.load(path)
    X_train = data["X_train"]
    fits = [("ITML", ITML(random_state=0), (X_train[data["pairs"]], data["pair_labels"]))]
    if labels:
        fits += [(name, learner, (X_train, data["y_train"]))
                 for name, learner in (("LMNN (metric-learn)", LMNN(random_state=0)),
                                       ("NCA (metric-learn)", NCA(random_state=0)))]
    results = {}
    for name, learner, fit_args in fits:
        try:
            results[name] = _fit(learner, fit_args, data)
        # e.g. LMNN: a class smaller than k + 1; ITML: a metric that is no
        # longer symmetric after its updates overflowed
        except ValueError as error:
            print(f"{name} on {path}: {error}", file=sys.stderr)
            results[name] = {"fit_seconds": float("nan"),
                             "accuracy": {"1": float("nan"), "3": float("nan")}}
    return results


def main(*args):
    labels = args[0] == "--labels"
    out, *paths = args[1:] if labels else args
    results = {path: evaluate(path, labels) for path in paths}
    with open(out, "w") as handle:
        json.dump(results, handle)


if __name__ == "__main__":
    main(*sys.argv[1:])
