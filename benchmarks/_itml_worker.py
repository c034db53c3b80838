"""ITML side of ``bench_itml.py``; runs in the benchmark's own environment.

Usage: ``python _itml_worker.py RESULTS.json CONSTRAINTS.npz [...]``. Fits
metric-learn's ``ITML`` (defaults) on the saved constraints of each file and
writes the held-out k-NN accuracies and fit times as JSON. Imports nothing
from megkernel: this interpreter has scikit-learn 1.5 and metric-learn 0.7.
"""

import json
import sys
import time

import numpy as np
from metric_learn import ITML
from sklearn.neighbors import KNeighborsClassifier


def evaluate(path):
    data = np.load(path)
    X_train, X_test = data["X_train"], data["X_test"]
    pairs = X_train[data["pairs"]]
    start = time.perf_counter()
    itml = ITML(random_state=0).fit(pairs, data["pair_labels"])
    seconds = time.perf_counter() - start
    Z_train, Z_test = itml.transform(X_train), itml.transform(X_test)
    accuracy = {
        str(k): KNeighborsClassifier(n_neighbors=k).fit(Z_train, data["y_train"])
        .score(Z_test, data["y_test"])
        for k in (1, 3)
    }
    return {"fit_seconds": seconds, "accuracy": accuracy, "n_iter": int(itml.n_iter_)}


def main(out, *paths):
    results = {path: evaluate(path) for path in paths}
    with open(out, "w") as handle:
        json.dump(results, handle)


if __name__ == "__main__":
    main(*sys.argv[1:])
