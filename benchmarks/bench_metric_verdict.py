"""Does the metric learners' validation verdict predict held-out 1-NN accuracy?

Issue 20, item 2. ``MEGMetric`` and ``DefiniteBoostMetric`` at their defaults
choose their training length by cross-validation over the training points
(:mod:`megkernel._solvers.holdout`): the fitted ``validation_`` says
either "learn" (``gain_is_real``: a learned length was chosen) or "keep
Euclidean" (length 0). This script checks that verdict against the held-out
1-NN accuracy.

Protocol (as ``bench_itml.py``): 5 stratified 50/50 splits; features
standardised on the training half; each learner fitted at its defaults
(``random_state=0``) on the training half's labels (``fit(X, y)``); 1-NN on
the test half, embedded by ``transform``, against the prior the learner
started from: the Euclidean metric of the standardised features, or for
``DefiniteBoostMetric`` with ``init_ == "soft-neighbors"`` the soft-neighbour
metric its projections start from (its verdict compares with that). Per
split:

* verdict "learn": did the held-out 1-NN improve (+), stay (=) or fall (-)?
* verdict "keep Euclidean": the same learner forced to learn, refitted with a
  fixed length -- the longest checkpoint the validation scored before it
  stopped (its largest candidate; ``n_epochs=`` / ``max_iter=`` sweeps x
  pairs) and one pass over the pairs -- would it have improved (+), stayed
  (=) or fallen (-)?

A diagnostic for the "learn" verdict: the same learner at a quarter of the
chosen length (``FOLD_SHARE``). A validation fold (``n_folds=2``, the default
until 2026-12-03; five folds below 600 points since) used to
learn from the pairs with both ends among its training points, about a
quarter of them, so that the chosen number of passes trained the final
metric about four times as far as the fold that chose it; from labels, a
fold now draws as many pairs as the final fit among its own points (the
diagnostic stays, to compare with the earlier table in docs/benchmarks.rst).

The verdict agrees on a split when it says learn and 1-NN improves, or says
keep and the forced fit at the largest candidate does not improve; it
disagrees when learning made 1-NN fall or keeping missed a gain; a learn
verdict with 1-NN unchanged counts as neither. The held-out *margin* (mean
relative 1-NN margin of the test points against the training points, the
validation's own score, on new points) is reported beside the accuracy: it
tells whether a disagreement is the score's (the margin moves with the
verdict but the accuracy does not) or the validation's (the margin on new
points disagrees too).

Data sets (nothing downloaded): iris, wine, breast_cancer, digits (a
stratified 1000-point subsample), ``make_classification`` with 4 informative
and 16 noise features, isotropic Gaussian blobs (every feature equally
informative: Euclidean is already the right metric), and the bundled gyrB
set A (113 proteins, kernel PCA of the 3-mer spectrum kernel, 30 components,
fitted without labels).

All fits run on one thread. Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_metric_verdict.py [--quick] [--splits 5] [--detail]
"""

from __future__ import annotations

import argparse
import itertools
import time
import warnings

import numpy as np
from sklearn import datasets
from sklearn.model_selection import StratifiedShuffleSplit, train_test_split
from sklearn.neighbors import KNeighborsClassifier
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from megkernel import DefiniteBoostMetric, MEGMetric
from megkernel.datasets import gyrb_path, load_fasta_kernel

LEARNERS = {"MEGMetric": MEGMetric, "DefiniteBoostMetric": DefiniteBoostMetric}

#: Share of the pairs a validation fold learns from at ``n_folds=2`` (the
#: default until 2026-12-03; both ends among the fold's training points:
#: about ``(1 - 1/2) ** 2``), so a pass over them makes about this share of
#: the full fit's updates. Kept as that diagnostic, for the earlier tables.
FOLD_SHARE = 0.25


def _digits_subsample(n=1000):
    X, y = datasets.load_digits(return_X_y=True)
    X, _, y, _ = train_test_split(X, y, train_size=n, stratify=y, random_state=0)
    return X, y


def _classification_noise():
    """4 informative features among 20 (16 pure noise): a metric should learn."""
    return datasets.make_classification(
        n_samples=400, n_features=20, n_informative=4, n_redundant=0, n_repeated=0,
        n_classes=3, n_clusters_per_class=1, class_sep=1.0, shuffle=False,
        random_state=21)


def _isotropic_blobs():
    """Isotropic blobs at the 8 corners of a cube (3-d), overlapping: every
    direction separates classes equally and the noise is isotropic, so the
    Euclidean metric is already the right one (LDA's is the identity)."""
    corners = np.array(list(itertools.product([-1.0, 1.0], repeat=3)))
    return datasets.make_blobs(n_samples=400, centers=corners, cluster_std=0.7,
                               random_state=22)


def _blobs_in_8d():
    """4 isotropic blobs in 8 dimensions: the centres span 3 of them, the other
    5 directions are noise (a metric can learn to shrink them)."""
    return datasets.make_blobs(n_samples=300, centers=4, n_features=8, cluster_std=5.0,
                               center_box=(-6.0, 6.0), random_state=22)


def _gyrb_set_a(n_components=30):
    """Bundled gyrB set A (113 proteins, three genera): kernel PCA of the 3-mer
    spectrum kernel, fitted on all proteins without labels."""
    with gyrb_path() as path:
        data = load_fasta_kernel(path)
    kernel = data.kernel
    centring = np.eye(len(kernel)) - 1.0 / len(kernel)
    values, vectors = np.linalg.eigh(centring @ kernel @ centring)
    top = np.argsort(values)[::-1][:n_components]
    return vectors[:, top] * np.sqrt(np.maximum(values[top], 0.0)), data.labels


DATASETS = {
    "iris": lambda: datasets.load_iris(return_X_y=True),
    "wine": lambda: datasets.load_wine(return_X_y=True),
    "breast_cancer": lambda: datasets.load_breast_cancer(return_X_y=True),
    "digits (1000)": _digits_subsample,
    "classification 4+16 noise": _classification_noise,
    "isotropic blobs (cube)": _isotropic_blobs,
    "blobs 4 in 8-d": _blobs_in_8d,
    "gyrB set A (kPCA 30)": _gyrb_set_a,
}


def one_nn(Z_train, y_train, Z_test, y_test):
    return KNeighborsClassifier(n_neighbors=1).fit(Z_train, y_train).score(Z_test, y_test)


def held_out_margin(Z_train, y_train, Z_test, y_test):
    """Mean relative 1-NN margin ``(d_other - d_same) / (d_other + d_same)`` of
    the test points against the training points (the validation's score)."""
    sq = ((Z_test**2).sum(1)[:, None] - 2.0 * Z_test @ Z_train.T
          + (Z_train**2).sum(1)[None, :])
    distances = np.sqrt(np.maximum(sq, 0.0))
    same = y_train[None, :] == y_test[:, None]
    d_same = np.where(same, distances, np.inf).min(axis=1)
    d_other = np.where(same, np.inf, distances).min(axis=1)
    return float(np.mean((d_other - d_same) / np.maximum(d_other + d_same, 1e-300)))


def forced(name, passes, n_pairs, from_labels):
    """The learner at a fixed training length of ``passes`` over its pairs.

    With the kind of pairs the validated fit learned (``from_labels_``).
    """
    if name == "MEGMetric":
        return MEGMetric(n_epochs=passes, from_labels=from_labels, random_state=0)
    return DefiniteBoostMetric(max_iter=max(1, int(round(passes * n_pairs))),
                               from_labels=from_labels, random_state=0)


def _sign(delta):
    return "+" if delta > 1e-12 else ("-" if delta < -1e-12 else "=")


def run_split(name, X_train, y_train, X_test, y_test):
    """One learner on one split: verdict, 1-NN and margins (Euclidean, learned,
    forced when the verdict kept the Euclidean metric)."""
    euclid = one_nn(X_train, y_train, X_test, y_test)
    euclid_margin = held_out_margin(X_train, y_train, X_test, y_test)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        learner = LEARNERS[name](random_state=0).fit(X_train, y_train)
    seconds = time.perf_counter() - start
    log = learner.validation_
    learned = (learner.transform(X_train), learner.transform(X_test))
    prior = euclid  # the verdict's reference: the prior the learner started from
    if getattr(learner, "init_", "euclidean") != "euclidean":
        start = learner.prior_components_
        prior = one_nn((X_train - learner.mean_) @ start.T, y_train,
                       (X_test - learner.mean_) @ start.T, y_test)
    row = {"euclid": euclid, "prior": prior, "euclid_margin": euclid_margin,
           "seconds": seconds,
           "learned": one_nn(learned[0], y_train, learned[1], y_test),
           "learned_margin": held_out_margin(learned[0], y_train, learned[1], y_test)}
    if log is None:
        row.update(verdict="none", chosen=None, longest=None)
        return row
    row.update(verdict="learn" if log["gain_is_real"] else "keep", chosen=log["chosen"],
               score=log["score"],
               longest=log["checkpoints"][-1], val_scores=(log["scores"][0],
                                                           max(log["scores"])))
    if row["verdict"] == "learn":  # diagnostic: the length in a validation fold's updates
        forced_lengths = (("fold_length", row["chosen"] * FOLD_SHARE),)
    else:
        forced_lengths = (("forced_one", 1.0), ("forced_longest", row["longest"]))
    for key, passes in forced_lengths:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = forced(name, passes, len(learner.pairs_), learner.from_labels_).fit(
                X_train, y_train)
        Z = model.transform(X_train), model.transform(X_test)
        row[key] = one_nn(Z[0], y_train, Z[1], y_test)
        row[key + "_margin"] = held_out_margin(Z[0], y_train, Z[1], y_test)
    return row


def run_set(loader, learners, n_splits, max_points=None):
    X, y = loader()
    if max_points is not None and len(X) > max_points:
        X, _, y, _ = train_test_split(X, y, train_size=max_points, stratify=y,
                                      random_state=0)
    splitter = StratifiedShuffleSplit(n_splits=n_splits, test_size=0.5, random_state=0)
    rows = {name: [] for name in learners}
    for train, test in splitter.split(X, y):
        scaler = StandardScaler().fit(X[train])
        parts = scaler.transform(X[train]), y[train], scaler.transform(X[test]), y[test]
        for name in learners:
            with threadpool_limits(1):
                rows[name].append(run_split(name, *parts))
    return rows


def counts(rows):
    """Per verdict: 1-NN improved / same / fell (learn: the default fit, and
    the diagnostic fit at the fold-equivalent length; keep: forced to the
    largest candidate, and to one pass)."""
    out = {"learn": {"+": 0, "=": 0, "-": 0}, "keep": {"+": 0, "=": 0, "-": 0},
           "keep1": {"+": 0, "=": 0, "-": 0}, "fold": {"+": 0, "=": 0, "-": 0},
           "none": 0}
    for row in rows:
        if row["verdict"] == "learn":
            out["learn"][_sign(row["learned"] - row["prior"])] += 1
            if "fold_length" in row:
                out["fold"][_sign(row["fold_length"] - row["prior"])] += 1
        elif row["verdict"] == "keep":
            out["keep"][_sign(row["forced_longest"] - row["prior"])] += 1
            out["keep1"][_sign(row["forced_one"] - row["prior"])] += 1
        else:
            out["none"] += 1
    out["agree"] = out["learn"]["+"] + out["keep"]["="] + out["keep"]["-"]
    out["disagree"] = out["learn"]["-"] + out["keep"]["+"]
    out["neutral"] = out["learn"]["="]
    return out


def learner_summary(name, rows):
    """One learner over every split: per verdict, how often and how much the
    held-out 1-NN moved (learn: the default fit; keep: forced to the largest
    candidate) against the prior the learner started from (the Euclidean
    metric, or DefiniteBoostMetric's soft-neighbour prior, ``init_``)."""
    learn = [row["learned"] - row["prior"] for row in rows if row["verdict"] == "learn"]
    keep = [row["forced_longest"] - row["prior"] for row in rows
            if row["verdict"] == "keep"]
    c = counts(rows)

    def mean(values):
        return f"{np.mean(values):+.4f}" if values else "n/a"

    return (f"- {name}: 'learn' on {len(learn)} splits, 1-NN +/=/- {_pm(c['learn'])}, "
            f"mean change {mean(learn)}; 'keep the prior' on {len(keep)}, forced to the "
            f"largest candidate +/=/- {_pm(c['keep'])}, mean change {mean(keep)}; agree "
            f"{c['agree']}, neutral {c['neutral']}, disagree {c['disagree']}.")


def _pm(c):
    return f"{c['+']}/{c['=']}/{c['-']}"


def markdown_table(results):
    head = ("| data set | learner | Euclid 1-NN | prior 1-NN | default 1-NN | learn: +/=/- | "
            "keep: forced largest +/=/- | keep: forced 1 pass +/=/- | agree / neutral / "
            "disagree | learn at chosen/4: +/=/- | margin gain (held-out) | fit s |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for (data, name), rows in results.items():
        c = counts(rows)
        margin = np.mean([r["learned_margin"] - r["euclid_margin"] for r in rows])
        lines.append(
            f"| {data} | {name} | {np.mean([r['euclid'] for r in rows]):.3f} | "
            f"{np.mean([r['prior'] for r in rows]):.3f} | "
            f"{np.mean([r['learned'] for r in rows]):.3f} | {_pm(c['learn'])} | "
            f"{_pm(c['keep'])} | {_pm(c['keep1'])} | {c['agree']} / {c['neutral']} / "
            f"{c['disagree']} | {_pm(c['fold'])} | {margin:+.4f} | "
            f"{np.mean([r['seconds'] for r in rows]):.2f} |")
    return "\n".join(lines)


def detail_table(results):
    """One line per split: the verdict, chosen / longest scored length, the
    validation's margin (prior, best), held-out 1-NN and margin."""
    head = ("| data set | learner | split | verdict | chosen | longest | validation score: "
            "prior -> best | 1-NN Euclid | 1-NN default | 1-NN forced largest / 1 pass "
            "(learn: at chosen/4) | "
            "held-out margin Euclid -> default (forced largest) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for (data, name), rows in results.items():
        for split, r in enumerate(rows):
            val = (f"{r['score']} {r['val_scores'][0]:.4f} -> {r['val_scores'][1]:.4f}"
                   if "val_scores" in r else "")
            force = (f"{r['forced_longest']:.3f} / {r['forced_one']:.3f}"
                     if "forced_longest" in r else
                     f"({r['fold_length']:.3f})" if "fold_length" in r else "")
            margin = f"{r['euclid_margin']:.4f} -> {r['learned_margin']:.4f}"
            if "forced_longest_margin" in r:
                margin += f" ({r['forced_longest_margin']:.4f})"
            lines.append(f"| {data} | {name} | {split} | {r['verdict']} | {r['chosen']} | "
                         f"{r['longest']} | {val} | {r['euclid']:.3f} | {r['learned']:.3f} "
                         f"| {force} | {margin} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: iris and isotropic blobs, 2 splits, 120 points")
    parser.add_argument("--detail", action="store_true", help="also print every split")
    args = parser.parse_args(argv)
    sets, n_splits, max_points = DATASETS, args.splits, None
    if args.quick:
        sets = {key: DATASETS[key] for key in ("iris", "isotropic blobs (cube)")}
        n_splits, max_points = 2, 120
    results = {}
    for data, loader in sets.items():
        start = time.perf_counter()
        for name, rows in run_set(loader, LEARNERS, n_splits, max_points).items():
            results[data, name] = rows
        print(f"{data}: {time.perf_counter() - start:.0f} s", flush=True)
    print(f"\n### Validation verdict vs held-out 1-NN ({n_splits} stratified 50/50 splits, "
          "defaults, fit(X, y) on the training half)\n")
    print(markdown_table(results))
    for name in LEARNERS:
        print("\n" + learner_summary(name, [row for (_, learner), rows in results.items()
                                            if learner == name for row in rows]))
    total = [counts(rows) for rows in results.values()]
    print(f"\nAll: agree {sum(c['agree'] for c in total)}, neutral (learn, 1-NN unchanged) "
          f"{sum(c['neutral'] for c in total)}, disagree {sum(c['disagree'] for c in total)}"
          f", no verdict {sum(c['none'] for c in total)} of "
          f"{sum(len(rows) for rows in results.values())} fits.")
    if args.detail:
        print("\n" + detail_table(results))
    return results


if __name__ == "__main__":
    main()
