"""New objects after the fit: held-out objects placed from their distances to known ones.

20 % of the objects are held out of the fit entirely: the kernel is learned
(``MEGKernelRegressor`` at its defaults, through ``KernelDistances``) from the
observed pairs among the other 80 % only. Each held-out object then comes
with its distances to ``m`` known objects (m in {5, 20, all its observed
ones}) and is classified by 1-NN among the known objects
(``KNeighborsClassifier(metric="precomputed")`` after ``KernelDistances``):

* (a) the observed distances alone (``learner=None``: its ``m`` given
  distances; the other known objects missing, never a neighbour);
* new: the learned kernel's out-of-sample extension (``new_pairs=``), at
  ``KernelDistances``' defaults (``keep_given="auto"``: the given distances
  kept beside the kernel when the fit's labels say that ranks neighbours
  better), and the kernel only (``keep_given="never"``);
* (b) transductive: the same objects and their same ``m`` distances in the
  fit (the kernel learned with them), 1-NN under the learned kernel.

Goal at m = all: new >= (a) + 0.005 and new >= 0.98 (b). Also timed: placing
one new object among 2000 known ones (goal <= 1 ms), against the baseline
transform of a known object, in the same process.

Data: family sequences (``benchmarks/_family_data.py``: ``1000 (1 -
cosine)`` of 4-mer counts, 20 % of the pairs observed) and a graph task
(a planted partition, distances the hop counts, 20 % of the pairs
observed). Results averaged over seeds.

Usage::

    python benchmarks/bench_new_objects.py [--quick]
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
import pandas as pd  # noqa: E402
from scipy.sparse.csgraph import shortest_path  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _family_data import family_sequences  # noqa: E402

from megkernel import KernelDistances, MEGKernelRegressor  # noqa: E402

M_VALUES = (5, 20, None)  # None: all given


def planted_partition(n_objects=300, n_blocks=4, p_in=0.08, p_out=0.01, seed=0):
    """Hop counts of a planted-partition graph (disconnected pairs: the largest + 1)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, n_blocks, n_objects)
    p = np.where(labels[:, None] == labels[None, :], p_in, p_out)
    upper = np.triu(rng.random((n_objects, n_objects)) < p, 1)
    hops = shortest_path(upper | upper.T, unweighted=True, directed=False)
    finite = np.isfinite(hops)
    hops[~finite] = hops[finite].max() + 1
    ids = np.array([f"node{k:04d}" for k in range(n_objects)])
    return ids, labels, hops


def split(ids, distances, fraction, seed):
    """Observed pairs; held-out objects; the fit table and each held-out object's pairs."""
    rng = np.random.default_rng(seed)
    n = len(ids)
    held = np.zeros(n, dtype=bool)
    held[rng.choice(n, n // 5, replace=False)] = True
    rows, cols = np.triu_indices(n, 1)
    pick = rng.random(rows.size) < fraction
    rows, cols = rows[pick], cols[pick]
    inside = ~held[rows] & ~held[cols]
    fit_table = pd.DataFrame({"a": ids[rows[inside]], "b": ids[cols[inside]],
                              "d": distances[rows[inside], cols[inside]]})
    given = {}  # held-out row -> known rows it has observed distances to
    for r, c in zip(rows[held[rows] ^ held[cols]], cols[held[rows] ^ held[cols]]):
        new, old = (r, c) if held[r] else (c, r)
        given.setdefault(new, []).append(old)
    return held, fit_table, given


def evaluate(ids, labels, distances, *, fraction=0.2, seed=0):
    held, fit_table, given = split(ids, distances, fraction, seed)
    known_ids, known_labels = ids[~held], labels[~held]
    rng = np.random.default_rng(seed + 1)
    out = {}
    for m in M_VALUES:
        chosen = {new: (list(olds) if m is None or len(olds) <= m
                        else list(rng.choice(olds, m, replace=False)))
                  for new, olds in given.items()}
        new_rows = np.array(sorted(chosen))
        pairs = [(ids[new], ids[old]) for new in new_rows for old in chosen[new]]
        new_d = np.array([distances[new, old] for new in new_rows for old in chosen[new]])
        new_pairs = pd.DataFrame(pairs, columns=["new", "known"])
        test_ids, test_labels = ids[new_rows], labels[new_rows]
        scores = {}
        meg = MEGKernelRegressor(random_state=0, squared=False)
        for name, learner, keep in (("observed (a)", None, "auto"), ("new", meg, "auto"),
                                    ("new, kernel only", meg, "never")):
            step = KernelDistances(learner=learner, pairs=fit_table[["a", "b"]],
                                   targets=fit_table["d"], new_pairs=new_pairs,
                                   new_distances=new_d, keep_given=keep)
            pipe = make_pipeline(step, KNeighborsClassifier(1, metric="precomputed"))
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pipe.fit(known_ids, known_labels)
                scores[name] = float(pipe.score(test_ids, test_labels))
            if name == "new":
                scores["new kept"] = float(pipe[0].keeps_given_ != "never")
            scores[name + " s"] = time.perf_counter() - start
        transductive = pd.concat([fit_table, pd.DataFrame(
            {"a": new_pairs["new"], "b": new_pairs["known"], "d": new_d})])
        step = KernelDistances(learner=MEGKernelRegressor(random_state=0, squared=False),
                               pairs=transductive[["a", "b"]], targets=transductive["d"])
        pipe = make_pipeline(step, KNeighborsClassifier(1, metric="precomputed"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pipe.fit(known_ids, known_labels)
            scores["transductive (b)"] = float(pipe.score(test_ids, test_labels))
            scores["keeps given"] = float(pipe[0].keeps_given_ != "never")
        out["all" if m is None else m] = scores
    return out


def timing(n_known=2000, m=200, n_new=200, seed=0):
    """Seconds per placed object at ``n_known`` objects, and per known object's row."""
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(n_known + n_new, 20))
    kernel = points[:n_known] @ points[:n_known].T
    sq = np.sum((points[:, None, :] - points[None, :n_known, :]) ** 2, axis=2)
    ids = np.arange(n_known + n_new)
    new_pairs, new_d = [], []
    for new in range(n_known, n_known + n_new):
        for old in rng.choice(n_known, m, replace=False):
            new_pairs.append((new, old))
            new_d.append(np.sqrt(sq[new, old]))
    start = time.perf_counter()
    KernelDistances(kernel=kernel).fit(ids[:n_known])
    plain_fit = time.perf_counter() - start
    start = time.perf_counter()
    step = KernelDistances(kernel=kernel, new_pairs=np.array(new_pairs),
                           new_distances=np.array(new_d)).fit(ids[:n_known])
    basis_seconds = time.perf_counter() - start - plain_fit  # the eigendecomposition
    start = time.perf_counter()
    step.transform(ids[:n_new])
    known_seconds = (time.perf_counter() - start) / n_new
    start = time.perf_counter()
    step.transform(ids[n_known:])
    new_seconds = (time.perf_counter() - start) / n_new
    return basis_seconds, known_seconds, new_seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed per task")
    args = parser.parse_args()
    seeds = (0,) if args.quick else (0, 1, 2)
    tasks = {
        "family": lambda s: family_sequences(n_objects=400, n_families=4, length=300,
                                             seed=s),
        "graph": lambda s: planted_partition(n_objects=400, seed=s),
    }
    for task, make in tasks.items():
        rows = {}
        for seed in seeds:
            ids, labels, distances = make(seed)
            for m, scores in evaluate(ids, labels, distances, seed=seed).items():
                for key, value in scores.items():
                    rows.setdefault((m, key), []).append(value)
        print(f"\n{task} ({len(seeds)} seeds): 1-NN accuracy of held-out objects")
        print(f"{'m':>5} {'observed (a)':>13} {'new':>8} {'kernel only':>12} "
              f"{'transductive (b)':>17} {'new-(a)':>8} {'new/(b)':>8}  kept given (new, b)"
              "  fit+place s (a / new)")
        for m in (5, 20, "all"):
            a = np.mean(rows[(m, "observed (a)")])
            new = np.mean(rows[(m, "new")])
            only = np.mean(rows[(m, "new, kernel only")])
            b = np.mean(rows[(m, "transductive (b)")])
            print(f"{m!s:>5} {a:13.3f} {new:8.3f} {only:12.3f} {b:17.3f} {new - a:+8.3f} "
                  f"{new / b:8.3f}  {np.mean(rows[(m, 'new kept')]):.2f}, "
                  f"{np.mean(rows[(m, 'keeps given')]):.2f}"
                  f"  {np.mean(rows[(m, 'observed (a) s')]):.2f} / "
                  f"{np.mean(rows[(m, 'new s')]):.2f}")
    basis, known, new = timing()
    print(f"\nplacing at 2000 known objects (200 given distances each): "
          f"{1e3 * new:.3f} ms per new object, {1e3 * known:.3f} ms per known object's "
          f"row (ratio {new / known:.1f}); the eigendecomposition once: {basis:.2f} s")


if __name__ == "__main__":
    main()
