"""Kernel learners on a user's own distance data (issue 19's acceptance table).

Each data set is what a practitioner brings: objects with ids, their
squared distances in their own units for a part of the pairs only (a pandas
table), and class labels of the objects. For every data set and method the
same protocol: ``Pipeline([KernelDistances(...), KNeighborsClassifier(1,
metric="precomputed")])`` scored by ``cross_val_score`` over
``ShuffleSplit(10, test_size=0.5, random_state=0)`` of the objects. The
labels reach the k-NN only; the kernel is learned once per method from the
pairs (``KernelDistances``' cache) and reused by the ten splits.

Methods (columns):

* **raw**: the observed distances only (``KernelDistances`` without a
  learner; a missing pair is never a neighbour).
* **MEG**: ``MEGKernelRegressor(objects=ids, random_state=0)``, the
  defaults, fed every observed pair with its squared distance.
* **MEG tuned**: ``GridSearchCV`` of ``MEGKernelRegressor`` on the
  observed pairs themselves (one ``ShuffleSplit`` holding out 25 % of the
  pairs, the learner's own ``R^2`` score, no labels), grid ``MEG_GRID``
  (batch from the spectral or the identity prior; on-line at learning rates
  0.1, 0.5, 2 for 1 or 3 shuffled epochs), refit on every pair.
* **DB**: ``DefiniteBoostKernel(objects=ids, random_state=0)``, the
  defaults, fed every observed pair with its squared distance, as MEG is
  (``y_kind="auto"`` reads them as squared distances: the prior is
  ``MEGKernelRegressor``'s fit of them, the constraints the closest and
  farthest tenth of the pairs at their boundaries).
* **DB tuned**: ``GridSearchCV`` of ``DefiniteBoostKernel`` over ``gamma``
  on labelled pairs only (the closest 10 % of the observed pairs as similar,
  +1, the farthest 10 % as dissimilar, -1, identity prior; one
  ``StratifiedShuffleSplit`` holding out 25 % of them, ROC AUC of
  ``decision_function``, no labels of the objects;
  ``validation_fraction=None`` inside), grid ``DB_GAMMAS`` times the
  identity prior's squared distance ``2 / d``, refit on every pair.
* **DB labels**: ``DefiniteBoostKernel(objects=ids, random_state=0)`` at the
  defaults on those labelled pairs (what the **DB** column was before the
  fit from distances: the identity prior knows nothing of the other 80 %).

One held-out split rather than k folds keeps the whole table near 8 CPU
minutes (wall time on a loaded machine is longer: the fit columns give
both).

Fit times are the first (cache-filling) ``KernelDistances.fit`` of each
default learner, wall clock; "x raw" is the learned accuracy over the raw
one.

``--scale``: 2,000 objects (8 planted families), about 10^5 observed pairs:
``MEGKernelRegressor`` and ``DefiniteBoostKernel`` defaults, fit time, peak memory above the process
(``resource.getrusage`` ``ru_maxrss`` growth during the fit, and its
tracemalloc peak: the timed fit runs traced) and 1-NN accuracy against the
raw baseline. Target: fit <= 60 s, accuracy >= raw.

``--grid``: 52 tables of 204 objects in 4 planted families, sparse (5-20 %
of the pairs) and noisy (mutation 0.25-0.45), raw, MEG and DB at their
defaults, the same protocol; a summary counts the tables where each learner
reaches the observed distances.

``--sparse``: where users are, many objects and a few percent of the pairs
given: objects in {500, 2000, 5000} x pairs given in {2, 5, 20 %}, on family
sequences and on planted-partition graph hop counts; the observed
distances, the full matrix, each learner's kernel alone, the blend that
``KernelDistances`` keeps without labels and the default step
(``keep_given="auto"``), fit time and warnings.

``--verdict``: the same 52 tables (``--verdict --held-out``: 24 tables of
seeds 17-22 never looked at before the rule was set), MEG and DB at their
defaults, and on each of the 10 splits the verdict ``KernelDistances`` gives
from the training half's labels (``verdict_["worse"]``: leave-one-out 1-NN
of the learned kernel more than one standard error below the observed
distances') against the held-out half's 1-NN accuracy, learned minus
observed. Does a warning mean a loss?

Usage::

    python benchmarks/bench_own_data.py            # the table (all data sets)
    python benchmarks/bench_own_data.py --quick    # smoke run: tiny data, 2 splits
    python benchmarks/bench_own_data.py --scale    # the 2,000-object run
    python benchmarks/bench_own_data.py --scale --all   # five 2,000-object sets
    python benchmarks/bench_own_data.py --scale --held-out   # two more, made after
    python benchmarks/bench_own_data.py --scale --quick   # its smoke run (40 objects)
    python benchmarks/bench_own_data.py --grid     # 52 sparse / noisy 204-object tables
    python benchmarks/bench_own_data.py --verdict  # KernelDistances' verdict on them
    python benchmarks/bench_own_data.py --sparse   # objects x share of pairs given
    python benchmarks/bench_own_data.py --sparse --seeds 2 3 --objects 500 2000 --learners MEG DB
    python benchmarks/bench_own_data.py --sparse --objects 5000 --kinds graph --fractions 0.2
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, clone
from sklearn.datasets import load_iris, load_wine
from sklearn.model_selection import (
    GridSearchCV,
    ShuffleSplit,
    StratifiedShuffleSplit,
    cross_val_score,
    cross_validate,
)
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _family_data import family_sequences as family_table_sequences  # noqa: E402
from _family_data import observed_pairs, planted_partition_hops  # noqa: E402
from _own_data import family_sequences, kmer_counts, pair_table  # noqa: E402

from megkernel import (  # noqa: E402
    DefiniteBoostKernel,
    KernelDistances,
    KernelLearnerMixin,
    MEGKernelRegressor,
)
from megkernel.datasets import load_fasta_kernel, load_gyrb  # noqa: E402

#: The FASTA file of the shared data folder (gyrB set B: Burkholderia,
#: Pseudomonas, Escherichia), read if present.
SHARED_FASTA = (Path(__file__).resolve().parents[2] / "shared" / "data" / "gyrb"
                / "gyrB_setB_Burkholderia_Pseudomonas_Escherichia.protein.faa")

#: MEG tuned: the grid of the pair-level search (batch from the spectral or the
#: identity prior; the paper's on-line trials at three rates and 1 or 3 passes).
MEG_GRID = [
    {"solver": ["batch"], "init": ["auto", "identity"]},
    {"solver": ["online"], "learning_rate": [0.1, 0.5, 2.0], "n_epochs": [1, 3],
     "shuffle": [True]},
]

#: DB tuned: gamma as fractions of the identity prior's squared distance 2/d.
DB_GAMMAS = (0.5, 0.3, 0.1, 0.03, 0.01, 0.003)

#: Share of the pairs the tuned searches hold out (one split: the budget).
SEARCH_HELD_OUT = 0.25


# --------------------------------------------------------------- data sets

def _squared_from_kernel(K):
    diag = np.diag(K)
    return np.maximum(diag[:, None] + diag[None, :] - 2.0 * K, 0.0)


def _table(ids, squared, fraction, seed):
    """A random ``fraction`` of the pairs of distinct objects: ``a, b, sq``."""
    return pair_table(ids, squared, fraction=fraction, seed=seed, column="sq")


def family(seed, mutation, n_families=4, per_family=51, fraction=0.2):
    """Planted-family sequences, distance 1000 (1 - cosine of 4-mer counts)."""
    ids, sequences, labels = family_sequences(n_families, per_family, mutation=mutation,
                                              seed=seed)
    counts = kmer_counts(sequences)
    unit = counts / np.linalg.norm(counts, axis=1, keepdims=True)
    distance = 1000.0 * np.clip(1.0 - unit @ unit.T, 0.0, None)
    np.fill_diagonal(distance, 0.0)
    ids = np.asarray(ids, dtype=object)
    return ids, labels, _table(ids, distance ** 2, fraction, seed)


def _fasta_set(data, fraction, seed):
    ids = np.array([":".join(h.split("|")[1:3]) for h in data.headers], dtype=object)
    return ids, data.labels, _table(ids, _squared_from_kernel(data.kernel), fraction, seed)


def gyrb(fraction=0.3, seed=0):
    """Bundled gyrB set A (113 proteins, 3 genera), 3-mer spectrum kernel."""
    return _fasta_set(load_gyrb(n_objects=None), fraction, seed)


def shared_fasta(fraction=0.3, seed=0):
    """gyrB set B from the shared data folder: 60 Burkholderia, all 29 Pseudomonas,
    60 Escherichia (149 proteins), 3-mer spectrum kernel."""
    per_class = {"Burkholderia": 60, "Pseudomonas": 29, "Escherichia": 60}
    return _fasta_set(load_fasta_kernel(SHARED_FASTA, per_class=per_class,
                                        random_state=seed), fraction, seed)


def iris():
    """README's pair table: 5,000 random draws (40 % of the pairs), 1e6 units."""
    features, species = load_iris(return_X_y=True)
    ids = np.array([f"flower-{i:03d}" for i in range(150)], dtype=object)
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 150, size=(2, 5000))
    table = pd.DataFrame({"a": ids[a], "b": ids[b],
                          "sq": 1e6 * np.sum((features[a] - features[b]) ** 2, axis=1)})
    return ids, species, table


def wine(fraction=0.3, seed=0):
    """All 178 wines, standardised features, squared Euclidean distances."""
    features, cultivar = load_wine(return_X_y=True)
    features = StandardScaler().fit_transform(features)
    ids = np.array([f"wine-{i:03d}" for i in range(len(features))], dtype=object)
    squared = np.sum((features[:, None, :] - features[None, :, :]) ** 2, axis=2)
    return ids, cultivar, _table(ids, squared, fraction, seed)


def datasets(quick=False):
    """name -> zero-argument loader of ``(ids, labels, table)``."""
    if quick:
        return {"family (quick)": lambda: family(0, 0.25, n_families=3, per_family=12,
                                                 fraction=0.4)}
    sets = {
        "family s0 m0.25 (204)": lambda: family(0, 0.25),
        "family s1 m0.35 (204)": lambda: family(1, 0.35),
        "family s2 m0.30 6fam (240)": lambda: family(2, 0.30, n_families=6,
                                                      per_family=40),
        "gyrB A bundled (113)": gyrb,
        "gyrB B shared FASTA (149)": shared_fasta,
        "iris pairs 1e6 (150)": iris,
        "wine std (178)": wine,
    }
    if not SHARED_FASTA.is_file():
        print(f"(skipped gyrB set B: {SHARED_FASTA} not found)")
        del sets["gyrB B shared FASTA (149)"]
    return sets


# ----------------------------------------------------------------- methods

#: The learners fitted through ``KernelDistances`` (which keeps only their
#: kernels), by ``Learner.tag``: for the verdict columns.
FITTED = {}


class Learner(KernelLearnerMixin, BaseEstimator):
    """A kernel learner as ``KernelDistances`` sees it, tuned or not.

    ``param_grid=None``: ``learner`` itself, fitted on the pairs (a clone).
    Otherwise ``GridSearchCV`` of it on its own pairs (split by ``cv``, never
    by the objects' labels), scored by ``scoring`` (``None``: the learner's
    own ``score``) and refit on every pair. Exposes the fitted ``kernel_``
    and ``objects_`` and keeps the fitted learner in ``FITTED[tag]``.
    """

    def __init__(self, learner=None, param_grid=None, cv=3, scoring=None, tag=None):
        self.learner = learner
        self.param_grid = param_grid
        self.cv = cv
        self.scoring = scoring
        self.tag = tag

    def fit(self, X, y=None):
        X = np.asarray(X, dtype=object)
        if self.param_grid is None:
            model = clone(self.learner).fit(X, y)
            self.best_params_, self.search_scores_ = {}, []
        else:
            search = GridSearchCV(clone(self.learner), self.param_grid, cv=self.cv,
                                  scoring=self.scoring, error_score="raise").fit(X, y)
            model = search.best_estimator_
            self.best_params_ = search.best_params_
            self.search_scores_ = [(params, score) for params, score in zip(
                search.cv_results_["params"], search.cv_results_["mean_test_score"])]
        self.model_ = model
        self.kernel_ = model.kernel_
        self.objects_ = model.objects_
        FITTED[self.tag] = self
        return self


def _db_pairs(table):
    """Closest 10 % of the observed pairs similar (+1), farthest 10 % dissimilar (-1)."""
    n_tenth = max(len(table) // 10, 2)
    close = table.nsmallest(n_tenth, "sq")
    far = table.nlargest(n_tenth, "sq")
    pairs = np.concatenate([close[["a", "b"]].to_numpy(dtype=object),
                            far[["a", "b"]].to_numpy(dtype=object)])
    return pairs, np.r_[np.ones(n_tenth), -np.ones(n_tenth)]


def steps(name, ids, table):
    """method -> its ``KernelDistances`` step (nothing of the labels)."""
    pairs = table[["a", "b"]]
    targets = table["sq"]
    db_pairs, db_labels = _db_pairs(table)
    meg = MEGKernelRegressor(objects=ids, random_state=0)
    db = DefiniteBoostKernel(objects=ids, random_state=0)
    # the search holds pairs out itself: no second split inside each fit
    db_fixed = DefiniteBoostKernel(objects=ids, random_state=0, validation_fraction=None)
    gammas = [f * 2.0 / len(ids) for f in DB_GAMMAS]
    return {
        "raw": KernelDistances(pairs=pairs, targets=targets, given_squared=True,
                               objects=ids),
        "MEG": KernelDistances(learner=Learner(meg, tag=(name, "MEG")), pairs=pairs,
                               targets=targets, given_squared=True),
        "MEG tuned": KernelDistances(
            learner=Learner(meg, MEG_GRID, ShuffleSplit(1, test_size=SEARCH_HELD_OUT,
                                                        random_state=0),
                            tag=(name, "MEG tuned")),
            pairs=pairs, targets=targets, given_squared=True),
        "DB": KernelDistances(learner=Learner(db, tag=(name, "DB")), pairs=pairs,
                              targets=targets, given_squared=True),
        "DB tuned": KernelDistances(
            learner=Learner(db_fixed, {"gamma": gammas},
                            StratifiedShuffleSplit(1, test_size=SEARCH_HELD_OUT,
                                                   random_state=0),
                            scoring="roc_auc", tag=(name, "DB tuned")),
            pairs=db_pairs, targets=db_labels),
        # the learner itself, not a Learner: no verdict line (FITTED) for it
        "DB labels": KernelDistances(learner=db, pairs=db_pairs, targets=db_labels),
    }


def knn_accuracy(step, ids, labels, n_splits=10):
    """Mean 1-NN accuracy of ``step`` under ShuffleSplit(n_splits, 0.5) of the objects."""
    pipe = Pipeline([("kernel", step),
                     ("knn", KNeighborsClassifier(n_neighbors=1, metric="precomputed"))])
    cv = ShuffleSplit(n_splits, test_size=0.5, random_state=0)
    return float(np.mean(cross_val_score(pipe, ids, labels, cv=cv)))


def _cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _params(params, n_objects):
    """A grid point in a few characters: ``online lr=0.5 epochs=3``, ``gamma=0.1x2/d``."""
    short = {"learning_rate": "lr", "n_epochs": "epochs"}
    words = [str(params["solver"])] if "solver" in params else []
    for key, value in sorted(params.items()):
        if key == "gamma":
            words.append(f"gamma={value * n_objects / 2:.3g}x2/d")
        elif key not in ("solver", "shuffle"):
            words.append(f"{short.get(key, key)}={value:.3g}" if isinstance(value, float)
                         else f"{short.get(key, key)}={value}")
    return " ".join(words)


def verdict(fitted):
    """One line on a fitted ``Learner``: its choice and held-out scores."""
    model = fitted.model_
    d = len(model.objects_)
    if fitted.search_scores_:  # a search: every candidate's held-out score
        scores = ", ".join(f"{_params(p, d)} {score:.3f}"
                           for p, score in fitted.search_scores_)
        return f"chose {_params(fitted.best_params_, d)} (held-out pairs: {scores})"
    if isinstance(model, DefiniteBoostKernel):
        gamma = (f"gamma {model.gamma_ * d / 2:.3g}x2/d" if model.y_kind_ == "labels" else
                 f"from distances: gamma {model.gamma_:.4g}, gamma_dissimilar "
                 f"{model.gamma_dissimilar_:.4g} (their units)")
        return (f"AUC prior {model.prior_score_:.3f} -> {model.validation_score_:.3f}, "
                f"{gamma}, "
                f"{model.n_iter_} projections, converged {model.converged_}")
    return (f"R2 prior {model.prior_score_:.3f} -> {model.validation_score_:.3f}, "
            f"prior rank {model.prior_rank_}, {model.n_iter_} iterations")


def run_dataset(name, load, n_splits):
    """One row: accuracy and fit time (wall, CPU) of every method, and warnings."""
    ids, labels, table = load()
    row = {"pairs": len(table)}
    caught_by = {}
    for method, step in steps(name, ids, table).items():
        wall, cpu = time.perf_counter(), _cpu()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step.fit(ids)  # learns (and caches) the kernel: the splits reuse it
        row[f"{method} s"] = time.perf_counter() - wall
        row[f"{method} cpu"] = _cpu() - cpu
        row[method] = knn_accuracy(step, ids, labels, n_splits)
        caught_by[method] = sorted({type(w.message).__name__ for w in caught})
        print(f"  [{name}] {method}: {row[method]:.3f}, fit {row[f'{method} s']:.1f} s "
              f"wall, {row[f'{method} cpu']:.1f} s cpu", file=sys.stderr, flush=True)
    return row, caught_by


# --------------------------------------------------------------------- scale

#: The 2000-object family sets of ``--scale --all``: (seed, mutation, families,
#: objects per family). The first is ``--scale``'s; the others are other seeds
#: and mutation rates (seed 3, mutation 0.4, is the hardest tried).
SCALE_SETS = ((0, 0.30, 8, 250), (1, 0.30, 8, 250), (3, 0.40, 8, 250), (4, 0.35, 5, 400),
              (5, 0.35, 10, 200))

#: ``--scale --held-out``: two more, generated after DefiniteBoostKernel's
#: rule of keeping its prior was set on the sets above.
HELD_OUT_SCALE_SETS = ((6, 0.30, 8, 250), (7, 0.35, 5, 400))


def scale(sets=SCALE_SETS[:1], n_pairs=100_000, learners=("MEG", "DB")):
    """Both learners' defaults on 2,000 objects and ~1e5 observed pairs, a row per set."""
    print(f"\n## Scale: defaults, ~{n_pairs} observed pairs (family data)\n")
    print("| set (seed, mutation, families x objects) | learner | fit s wall (cpu) "
          "| peak RSS growth MB (getrusage) | tracemalloc peak MB | 1-NN raw "
          "| 1-NN learned | held-out score prior -> kernel | iterations | warnings |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    classes = {"MEG": MEGKernelRegressor, "DB": DefiniteBoostKernel}
    met = []
    for seed, mutation, n_families, per_family in sets:
        d = n_families * per_family
        ids, labels, table = family(seed, mutation, n_families=n_families,
                                    per_family=per_family,
                                    fraction=min(1.0, n_pairs / (d * (d - 1) / 2)))
        X = table[["a", "b"]].to_numpy(dtype=object)
        y = table["sq"].to_numpy()
        raw = knn_accuracy(KernelDistances(pairs=table[["a", "b"]], targets=table["sq"],
                                           given_squared=True, objects=ids), ids, labels)
        for name in learners:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            tracemalloc.start()  # one fit, traced: numpy's arrays counted, BLAS work not
            start, cpu = time.perf_counter(), _cpu()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                model = classes[name](objects=ids, random_state=0).fit(X, y)
            seconds, cpu = time.perf_counter() - start, _cpu() - cpu
            traced_mb = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
            rss_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
            learned = knn_accuracy(KernelDistances(kernel=model.kernel_,
                                                   objects=model.objects_), ids, labels)
            rank = f" (rank {model.prior_rank_})" if hasattr(model, "prior_rank_") else ""
            print(f"| {seed}, {mutation}, {n_families} x {per_family} ({len(ids)} objects, "
                  f"{len(table)} pairs) | {name} | {seconds:.1f} ({cpu:.1f}) | {rss_mb:.0f} "
                  f"| {traced_mb:.0f} | {raw:.3f} | {learned:.3f} "
                  f"| {model.prior_score_:.3f} -> {model.validation_score_:.3f}{rank} | "
                  f"{model.n_iter_} | "
                  f"{sorted({type(w.message).__name__ for w in caught}) or 'none'} |",
                  flush=True)
            met.append((seconds <= 60, learned >= raw))
    print(f"\nTarget fit <= 60 s: met on {sum(t for t, _ in met)} of {len(met)} fits; "
          f"accuracy >= raw: met on {sum(a for _, a in met)} of {len(met)}")


# ---------------------------------------------------------------------- grid

#: ``--grid``: sparse and noisy tables where learning is hard (204 objects in 4
#: planted families): seeds x mutation rates x observed fractions. Seeds 7-10
#: at mutation 0.25 / 0.35 and 10 / 20 % of the pairs are the moderate part;
#: seeds 11-16 at 0.3 / 0.4 / 0.45 and 5 / 10 % the hard part (the observed
#: distances alone give 1-NN 0.33-0.79 there, chance is 0.25).
GRID = (((7, 8, 9, 10), (0.25, 0.35), (0.1, 0.2)),
        ((11, 12, 13, 14, 15, 16), (0.3, 0.4, 0.45), (0.05, 0.1)))


def grid(parts=GRID, n_splits=10):
    """Raw, MEG and DB defaults on every table of ``parts``, then a summary."""
    print(f"\n## Sparse, noisy family tables: 1-NN, ShuffleSplit({n_splits}, 0.5)\n")
    print("| seed | mutation | observed | raw | MEG | DB | MEG fit s | DB fit s |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for seeds, mutations, fractions in parts:
        for seed in seeds:
            for mutation in mutations:
                for fraction in fractions:
                    ids, labels, table = family(seed, mutation, fraction=fraction)
                    pairs, targets = table[["a", "b"]], table["sq"]
                    raw = knn_accuracy(KernelDistances(pairs=pairs, targets=targets,
                                                       given_squared=True, objects=ids),
                                       ids, labels, n_splits)
                    row = [raw]
                    for Learner in (MEGKernelRegressor, DefiniteBoostKernel):
                        start = time.perf_counter()
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            step = KernelDistances(
                                learner=Learner(objects=ids, random_state=0),
                                pairs=pairs, targets=targets, given_squared=True).fit(ids)
                        seconds = time.perf_counter() - start
                        row += [knn_accuracy(step, ids, labels, n_splits), seconds]
                    rows.append(row)
                    print(f"| {seed} | {mutation} | {fraction:.0%} | {raw:.3f} | "
                          f"{row[1]:.3f} | {row[3]:.3f} | {row[2]:.1f} | {row[4]:.1f} |",
                          flush=True)
    rows = np.array(rows)
    for name, column in (("MEG", 1), ("DB", 3)):
        gain = rows[:, column] - rows[:, 0]
        print(f"\n{name}: >= raw on {np.sum(gain >= 0)} of {len(rows)} tables, "
              f">= raw + 0.005 on {np.sum(gain >= 0.005)}; mean gain {gain.mean():+.3f}, "
              f"worst {gain.min():+.3f}", end="")
    print()


# ------------------------------------------------------------------- verdict

#: ``--verdict --held-out``: tables of seeds never looked at before the
#: verdict's rule was set.
HELD_OUT_GRID = (((17, 18, 19), (0.25, 0.35), (0.1, 0.2)),
                 ((20, 21, 22), (0.3, 0.4), (0.05, 0.1)))


def _split_accuracy(step, train, test, labels):
    """1-NN accuracy on ``test`` of a step fitted on ``train`` (with its labels)."""
    knn = KNeighborsClassifier(n_neighbors=1, metric="precomputed")
    knn.fit(step.transform(train), labels.loc[train])
    return float(np.mean(knn.predict(step.transform(test)) == labels.loc[test].to_numpy()))


def verdict_grid(parts=GRID, n_splits=10):
    """Per split: KernelDistances' verdict (training half) against held-out 1-NN."""
    print(f"\n## KernelDistances' verdict against held-out 1-NN, ShuffleSplit({n_splits}, "
          "0.5)\n")
    print("| seed | mutation | observed | learner | warned splits | held-out gain "
          "(mean) | gain on warned splits |")
    print("|---|---|---|---|---|---|---|")
    records = {"MEG": [], "DB": []}
    for seeds, mutations, fractions in parts:
        for seed in seeds:
            for mutation in mutations:
                for fraction in fractions:
                    ids, labels, table = family(seed, mutation, fraction=fraction)
                    labels = pd.Series(np.asarray(labels), index=ids)
                    pairs, targets = table[["a", "b"]], table["sq"]
                    raw = KernelDistances(pairs=pairs, targets=targets, given_squared=True,
                                          objects=ids)
                    cv = ShuffleSplit(n_splits, test_size=0.5, random_state=0)
                    for name, Learner in (("MEG", MEGKernelRegressor),
                                          ("DB", DefiniteBoostKernel)):
                        step = KernelDistances(learner=Learner(objects=ids, random_state=0),
                                               pairs=pairs, targets=targets)
                        warned, gains = [], []
                        for train, test in cv.split(ids):
                            train, test = ids[train], ids[test]
                            with warnings.catch_warnings():
                                warnings.simplefilter("ignore")
                                step.fit(train, labels.loc[train])
                            raw.fit(train)
                            warned.append(step.verdict_["worse"])
                            gains.append(_split_accuracy(step, train, test, labels)
                                         - _split_accuracy(raw, train, test, labels))
                        warned, gains = np.array(warned), np.array(gains)
                        records[name].append((warned, gains))
                        on_warned = f"{gains[warned].mean():+.3f}" if warned.any() else "–"
                        print(f"| {seed} | {mutation} | {fraction:.0%} | {name} | "
                              f"{warned.sum()} | {gains.mean():+.3f} | {on_warned} |",
                              flush=True)
    for name, rows in records.items():
        warned = np.concatenate([w for w, _ in rows])
        gains = np.concatenate([g for _, g in rows])
        worse_tables = [w.any() for w, g in rows if g.mean() < 0]
        other_tables = [w.any() for w, g in rows if g.mean() >= 0]
        on_warned = f"{gains[warned].mean():+.3f}" if warned.any() else "–"
        print(f"\n{name}: warned on {warned.sum()} of {len(warned)} splits; held-out "
              f"gain over the observed distances {on_warned} on them, "
              f"{gains[~warned].mean():+.3f} on the others. Tables below the observed "
              f"distances on held-out objects: {sum(worse_tables)} of {len(worse_tables)} "
              f"warn on some split; the others: {sum(other_tables)} of "
              f"{len(other_tables)}.", end="")
    print()


# ---------------------------------------------------------------------- main

METHODS = ("raw", "MEG", "MEG tuned", "DB", "DB tuned", "DB labels")


def table(quick=False):
    """The acceptance table, then each learned kernel's verdict."""
    n_splits = 2 if quick else 10
    print(f"## 1-NN accuracy, ShuffleSplit({n_splits}, test_size=0.5, random_state=0) "
          "over the objects\n")
    columns = ["data (objects)", "pairs", *METHODS, "MEG fit s (cpu)", "DB fit s (cpu)",
               "MEG/raw", "DB/raw"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    total = time.perf_counter()
    warned = {}
    for name, load in datasets(quick).items():
        row, caught_by = run_dataset(name, load, n_splits)
        warned[name] = caught_by
        cells = [name, str(row["pairs"]), *(f"{row[m]:.3f}" for m in METHODS),
                 f"{row['MEG s']:.1f} ({row['MEG cpu']:.1f})",
                 f"{row['DB s']:.1f} ({row['DB cpu']:.1f})",
                 f"{row['MEG'] / row['raw']:.3f}", f"{row['DB'] / row['raw']:.3f}"]
        print("| " + " | ".join(cells) + " |", flush=True)
    print(f"\nTotal {time.perf_counter() - total:.0f} s wall.\n")
    print("## Verdicts (held-out pairs inside each fit) and warnings\n")
    for (name, method), fitted in FITTED.items():
        warnings_seen = ", ".join(warned.get(name, {}).get(method, [])) or "none"
        print(f"- {name}, {method}: {verdict(fitted)}; warnings: {warnings_seen}")


# ------------------------------------------------------------ sparse tables

#: ``--sparse``: objects x share of the pairs given, on family sequences (8
#: families x 5 subfamilies, mutation 0.3, the 4-mer distance) and on
#: planted-partition graphs (8 blocks, hop counts).
SPARSE_OBJECTS = (500, 2000, 5000)
SPARSE_FRACTIONS = (0.02, 0.05, 0.2)


def _sparse_task(kind, n_objects, seed):
    if kind == "family":
        return family_table_sequences(n_objects, 8, mutation=0.3, n_subfamilies=5, seed=seed)
    return planted_partition_hops(n_objects, seed=seed)


def sparse(objects=SPARSE_OBJECTS, fractions=SPARSE_FRACTIONS, kinds=("family", "graph"),
           seeds=(1,), learners=("MEG",), n_splits=5, given_squared=None):
    """Where users are: many objects, a few percent of the pairs measured.

    Per table: 1-NN over ``ShuffleSplit(n_splits, 0.5)`` of the objects in
    the Pipeline ``KernelDistances -> KNeighborsClassifier(1)`` under the
    observed distances alone, the full matrix, each learner's kernel alone
    (``keep_given="never"``), the blend of the given and the learned
    distances (``keep_given="blend"``: what the default keeps without
    labels, unless the learner finds its kernel weak: then ``"first"``),
    the evidence of the given pairs' graph (``keep_given="paths"``: each
    object's chance of each class from all its given distances, the
    labels of each split's training half reading the chance of one class
    off a given distance) and the default step (``keep_given="auto"``: the
    labels of each split's training half choose; the mode each split's
    fit kept is listed last), with the first (cache-filling) fit's wall
    time and the warnings it gave. The user's plain distances go to
    ``KernelDistances`` as they are (its defaults: ``given_squared=None``
    reads a learner's targets as squared distances, with a
    ``FutureWarning``); ``given_squared=False`` says they are plain (the
    learner is taught their squares), the reading of megkernel 0.4.
    """
    reading = "" if given_squared is None else f", given_squared={given_squared}"
    print(f"\n## Sparse tables: objects x pairs given, defaults{reading}\n")
    head = "| task | seed | objects | pairs given | observed | full |"
    rule = "|---|---|---|---|---|---|"
    for name in learners:
        head += (f" {name} kernel | {name} blend | {name} paths | {name} default "
                 f"| {name} fit s | {name} warned |")
        rule += "---|---|---|---|---|---|"
    head += "".join(f" {name} default kept (per split) |" for name in learners)
    rule += "---|" * len(learners)
    print(head)
    print(rule)
    classes = {"MEG": MEGKernelRegressor, "DB": DefiniteBoostKernel}
    cv = ShuffleSplit(n_splits, test_size=0.5, random_state=0)
    rows = []
    for kind in kinds:
        for seed in seeds:
            for n_objects in objects:
                ids, labels, distances = _sparse_task(kind, n_objects, seed)
                for fraction in fractions:
                    table = observed_pairs(ids, distances, fraction, seed=seed)
                    side = dict(pairs=table[["a", "b"]], targets=table["distance"],
                                given_squared=given_squared)
                    def score(step, ids=ids, labels=labels, kept=None):
                        pipe = Pipeline([("distances", step), ("knn", KNeighborsClassifier(
                            n_neighbors=1, metric="precomputed"))])
                        out = cross_validate(pipe, ids, labels, cv=cv,
                                             return_estimator=kept is not None)
                        if kept is not None:  # what each split's fit kept
                            kept.extend(fitted[0].keeps_given_ for fitted in out["estimator"])
                        return float(out["test_score"].mean())

                    observed = score(KernelDistances(objects=ids, **side))
                    full = score(KernelDistances(distances=distances, objects=ids))
                    line = (f"| {kind} | {seed} | {n_objects} | {fraction:.0%} ({len(table)}) "
                            f"| {observed:.3f} | {full:.3f} |")
                    row = {"kind": kind, "objects": n_objects, "fraction": fraction,
                           "observed": observed}
                    choices = []
                    for name in learners:
                        learner = classes[name](objects=ids, random_state=0)
                        start = time.perf_counter()
                        with warnings.catch_warnings(record=True) as caught:
                            warnings.simplefilter("always")
                            KernelDistances(learner=learner, **side).fit(ids)  # fills the cache
                        seconds = time.perf_counter() - start
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            kept = []
                            alone, blend, paths, default = (
                                score(KernelDistances(learner=learner, keep_given=keep, **side),
                                      kept=kept if keep == "auto" else None)
                                for keep in ("never", "blend", "paths", "auto"))
                        choices.append(", ".join(kept))
                        warned = sorted({type(w.message).__name__ for w in caught})
                        line += (f" {alone:.3f} | {blend:.3f} | {paths:.3f} | {default:.3f} "
                                 f"| {seconds:.1f} | {', '.join(warned) or 'none'} |")
                        row[name] = (alone, default, "NoImprovementWarning" in warned, blend,
                                     paths)
                    line += "".join(f" {kept} |" for kept in choices)
                    print(line, flush=True)
                    rows.append(row)
    for name in learners:
        kept = sum(r[name][1] >= r["observed"] for r in rows)
        ahead = sum(r[name][1] >= r["observed"] + 0.005 for r in rows)
        losses = [r for r in rows if r[name][0] < r["observed"]]
        gains = {what: np.array([r[name][k] - r["observed"] for r in rows])
                 for what, k in (("kernel alone", 0), ("blend", 3), ("paths", 4),
                                 ("default", 1))}
        print(f"\n{name}: default >= observed on {kept} of {len(rows)} tables, "
              f">= observed + 0.005 on {ahead}; the kernel alone loses on {len(losses)}, "
              f"of which the fit warned on {sum(r[name][2] for r in losses)}; it warned "
              f"on {sum(r[name][2] for r in rows if r not in losses)} tables where it "
              "did not lose. Gain over the observed distances (mean, worst): "
              + "; ".join(f"{what} {g.mean():+.3f}, {g.min():+.3f}"
                          for what, g in gains.items()) + ".")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run on tiny data")
    parser.add_argument("--scale", action="store_true",
                        help="the 2,000-object, 1e5-pair MEG run only")
    parser.add_argument("--grid", action="store_true",
                        help="raw, MEG and DB defaults on sparse, noisy family tables")
    parser.add_argument("--sparse", action="store_true",
                        help="objects x share of pairs given (family data, graph hops)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1],
                        help="with --sparse: the tables' seeds")
    parser.add_argument("--learners", nargs="+", default=["MEG"], choices=["MEG", "DB"],
                        help="with --sparse: the learners")
    parser.add_argument("--objects", type=int, nargs="+", default=list(SPARSE_OBJECTS),
                        help="with --sparse: the numbers of objects")
    parser.add_argument("--fractions", type=float, nargs="+", default=list(SPARSE_FRACTIONS),
                        help="with --sparse: the shares of the pairs given")
    parser.add_argument("--plain", action="store_true",
                        help="with --sparse: given_squared=False (the distances are plain)")
    parser.add_argument("--kinds", nargs="+", default=["family", "graph"],
                        choices=["family", "graph"], help="with --sparse: the tasks")
    parser.add_argument("--all", action="store_true",
                        help="with --scale: every set of SCALE_SETS, one row each")
    parser.add_argument("--verdict", action="store_true",
                        help="KernelDistances' verdict against held-out 1-NN on the grid")
    parser.add_argument("--held-out", action="store_true",
                        help="with --verdict: HELD_OUT_GRID's tables; with --scale: "
                        "HELD_OUT_SCALE_SETS")
    args = parser.parse_args(argv)
    if args.sparse:
        if args.quick:
            sparse(objects=(60,), fractions=(0.3,), seeds=(0,), learners=args.learners,
                   n_splits=2, given_squared=False if args.plain else None)
        else:
            sparse(objects=args.objects, fractions=args.fractions, kinds=args.kinds,
                   seeds=args.seeds, learners=args.learners,
                   given_squared=False if args.plain else None)
    elif args.verdict:
        verdict_grid(parts=(((0,), (0.3,), (0.2,)),) if args.quick
                     else HELD_OUT_GRID if args.held_out else GRID,
                     n_splits=2 if args.quick else 10)
    elif args.grid:
        grid(parts=(((0,), (0.3,), (0.2,)),) if args.quick else GRID,
             n_splits=2 if args.quick else 10)
    elif args.scale:
        if args.quick:
            scale(sets=((0, 0.30, 2, 20),), n_pairs=300)
        else:
            scale(sets=HELD_OUT_SCALE_SETS if args.held_out
                  else SCALE_SETS if args.all else SCALE_SETS[:1])
    else:
        table(quick=args.quick)


if __name__ == "__main__":
    main()
