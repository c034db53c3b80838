"""On-line metric learning: MEGMetric.partial_fit on a stream of pairs.

metric-learn's learners have no ``partial_fit``: a stream means refitting
from scratch. Here pairs of points arrive in chunks; after each chunk the
learned metric's 1-NN / 3-NN accuracy on a held-out half is printed against
the number of pairs seen, beside the Euclidean metric, a batch
``MEGMetric.fit_pairs`` refitted on all pairs seen so far (the refit a user
without ``partial_fit`` would run), and the relative loss bound of the
on-line run (``online_bound``: normalised cumulative loss against
``2 L_U + Delta(U, M_1)`` with the final metric as comparator ``U``).

Protocol, per data set: one stratified 50/50 split, standardised features,
a stream of ``--stream`` similar and as many dissimilar pairs of training
points (``draw_pairs``, then shuffled), chunks of ``--chunk`` pairs. The
first ``partial_fit`` sets the coordinates from the first chunk's points.
One thread (BLAS pinned).

Usage::

    python benchmarks/bench_online.py [--stream 2000] [--chunk 100]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn import datasets
from sklearn.model_selection import train_test_split
from sklearn.neighbors import KNeighborsClassifier
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from megkernel import MEGMetric, draw_pairs


def _flip():
    return datasets.make_classification(
        n_samples=400, n_features=10, n_informative=2, n_redundant=0, n_classes=3,
        n_clusters_per_class=1, flip_y=0.05, random_state=12)


DATASETS = {
    "wine": lambda: datasets.load_wine(return_X_y=True),
    "digits": lambda: datasets.load_digits(return_X_y=True),
    "classification_flip": _flip,
}
CHECKPOINTS = (100, 200, 500, 1000, 2000, 4000)


def knn(Z_train, y_train, Z_test, y_test, k):
    return KNeighborsClassifier(n_neighbors=k).fit(Z_train, y_train).score(Z_test, y_test)


def stream(name, loader, n_stream, chunk, seed=0):
    X, y = loader()
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.5, stratify=y, random_state=seed)
    scaler = StandardScaler().fit(X_train)
    X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
    with warnings.catch_warnings():  # small sets have fewer distinct pairs: fine
        warnings.filterwarnings("ignore", message="Only")
        pairs, labels = draw_pairs(y_train, n_stream, random_state=seed)
    order = np.random.default_rng(seed).permutation(len(pairs))
    order = order[:len(order) - len(order) % chunk]  # whole chunks
    pairs, labels = pairs[order], labels[order]
    points = X_train[pairs]
    print(f"\n### {name} ({len(X_train)} training points, {X.shape[1]} features, "
          f"chunks of {chunk} pairs)\n")
    print("| pairs seen | on-line 1-NN | on-line 3-NN | batch refit 1-NN | "
          "Euclidean 1-NN | partial_fit ms / chunk | batch refit s |")
    print("|---|---|---|---|---|---|---|")
    euclid = knn(X_train, y_train, X_test, y_test, 1)
    online = MEGMetric(random_state=seed)
    seen, spent = 0, 0.0
    for stop in range(chunk, len(pairs) + 1, chunk):
        start = time.perf_counter()
        online.partial_fit(points[seen:stop], labels[seen:stop])
        spent += time.perf_counter() - start
        seen = stop
        if seen in CHECKPOINTS or seen == len(pairs):
            start = time.perf_counter()
            batch = MEGMetric(random_state=seed).fit_pairs(X_train, pairs[:seen],
                                                           labels[:seen])
            refit = time.perf_counter() - start
            Z_train, Z_test = online.transform(X_train), online.transform(X_test)
            refit_1nn = knn(batch.transform(X_train), y_train, batch.transform(X_test),
                            y_test, 1)
            print(f"| {seen} | {knn(Z_train, y_train, Z_test, y_test, 1):.3f} | "
                  f"{knn(Z_train, y_train, Z_test, y_test, 3):.3f} | {refit_1nn:.3f} | "
                  f"{euclid:.3f} | {1e3 * spent / (seen / chunk):.1f} | {refit:.2f} |")
    bound = online.online_bound(points, labels)
    print(f"\nnormalised on-line loss {bound['loss']:.4g} <= bound {bound['bound']:.4g} "
          f"(comparator: the final metric, its loss {bound['comparator_loss']:.4g}, "
          f"divergence {bound['divergence']:.4g})")
    return bound


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stream", type=int, default=2000,
                        help="similar pairs (and as many dissimilar) in the stream")
    parser.add_argument("--chunk", type=int, default=100)
    args = parser.parse_args(argv)
    with threadpool_limits(1):
        for name, loader in DATASETS.items():
            stream(name, loader, args.stream, args.chunk)


if __name__ == "__main__":
    main()
