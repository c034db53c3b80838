"""DefiniteBoost's iteration rate as a fit proceeds, at d = 500 ... 2000 objects.

The issues (19, 21): at 2000 objects a fit slowed from 44 to 1.7 iterations
/ s. What grows: each rank-one eigen-update costs ``O(d k^2)`` for the ``k``
eigenpairs that do not deflate. From the identity prior almost all deflate;
once the pairs touch every object (after about ``d / 2`` projections) none
do, and an update costs a d x d x d product.

Two runs of the same problem in the same process, one BLAS thread:

* ``eigen``: rank-one eigen-updates (``method="rank-one"``) with the working
  set between scans (``megkernel._solvers.definiteboost_projections``);
* ``auto``: what ``method="auto"`` runs there, the lazy greedy choice with
  values and steps by Lanczos quadrature on the (sparse) exponent
  (``megkernel._solvers.definiteboost_lazy``).

Printed: iterations / s in windows of the run and the ratio auto / eigen
(window by window); with ``--converge``, the ``auto`` run continued to
convergence (iterations, seconds, largest violation / gamma, leave-one-out
1-NN accuracy of the families under the learned kernel).

Data: family-structured sequences (``_family_data.py``, 8 families), a
random ``5 d`` pairs labelled similar (same family) or dissimilar, as a user's
0/1 table; the identity prior; the thresholds of
``megkernel._solvers.definiteboost_rules.pair_thresholds``; ``tol`` 1 % of gamma.

``--defaults``: :class:`~megkernel.DefiniteBoostKernel` at its defaults as a
user calls it, wall and CPU seconds and held-out 1-NN (``ShuffleSplit(10,
test_size=0.5)`` over the objects, ``_family_data.knn_accuracy``): family data
of ``d`` objects given as the 50-nearest-neighbour graph of their distances
topped up with random pairs to ``50 d`` pairs (1e5 at 2000), from the same-family
labels and from the distances; ``--user-tables`` adds a word list (600 words, an
edit distance, 20 % of the pairs) and a survey (944 respondents, a Gower
distance, 17 %) from ``_user_tables.py``, with MEG's batch fit on each;
``--roundoff`` fits MEG again on the same targets one ulp up
(``numpy.nextafter``) and notes the kernels' relative difference (Frobenius);
``--against REV`` fits MEG's rows again with the batch solver of git revision
``REV`` (its ``meg_batch.py`` and ``pair_loss.py``, loaded beside the working
tree's in the same process), and DefiniteBoost's rows from distances with
that solver's MEG prior, and prints those baseline rows and the CPU ratios.

Usage::

    python benchmarks/bench_definiteboost_scale.py [--sizes 500 1000 2000]
        [--iterations 1500] [--converge]
    python benchmarks/bench_definiteboost_scale.py --defaults --sizes 2000 [--user-tables]
        [--roundoff] [--against REV]
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _family_data import family_sequences  # noqa: E402

from megkernel._numerics.state import ExponentState  # noqa: E402
from megkernel._solvers import definiteboost_projections as solver  # noqa: E402
from megkernel._solvers.definiteboost_rules import pair_thresholds  # noqa: E402

PAIRS_PER_OBJECT = 5


def problem(d, seed=1):
    """Pairs ``(a, b)`` and their signs (+1 same family, -1 not)."""
    _, labels, _ = family_sequences(d, n_families=8, mutation=0.3, seed=seed)
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, d, size=(2, PAIRS_PER_OBJECT * d))
    keep = a != b
    a, b = a[keep], b[keep]
    return a, b, np.where(labels[a] == labels[b], 1.0, -1.0), labels


def rates(d, a, b, signs, n_iter, window, method):
    """Iterations / s in consecutive windows of one run from ``I / d``."""
    state = ExponentState.identity(d)
    thresholds, gamma, _ = pair_thresholds(state, signs)
    constraints = solver.PairConstraints(a, b, signs, thresholds, state)
    stamps = []

    def callback(t, record):
        if t % window == 0:
            stamps.append(time.perf_counter())

    settings = solver._Settings(max_iter=n_iter, tol=0.01 * gamma, keep="last")
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        log = solver.run_definiteboost(constraints, state, settings, method=method,
                                       callback=callback)
    seconds = time.perf_counter() - start
    times = np.diff([start, *stamps])
    return window / times, log, seconds, state, gamma


def loo_accuracy(state, labels):
    """Leave-one-out 1-NN accuracy of the families under the learned kernel."""
    W = state.matrix()
    diagonal = np.diag(W)
    distances = diagonal[:, None] + diagonal[None, :] - 2 * W
    np.fill_diagonal(distances, np.inf)
    return float(np.mean(labels[np.argmin(distances, axis=1)] == labels))


def knn_table(d, n_pairs=None, n_neighbors=50, seed=0):
    """Family data as a user's table: the ``n_neighbors``-NN graph of the
    objects' distances topped up with random pairs to ``n_neighbors d`` pairs
    (``n_pairs``), string ids, the distances and the same-family labels."""
    import pandas as pd

    ids, labels, distances = family_sequences(n_objects=d, n_families=8, length=300,
                                              seed=seed)
    n_neighbors = min(n_neighbors, d - 1)
    n_pairs = min(n_neighbors * d if n_pairs is None else n_pairs, d * (d - 1) // 2)
    ranked = distances + np.diag(np.full(d, np.inf))
    near = np.argsort(ranked, axis=1)[:, :n_neighbors]
    a, b = np.repeat(np.arange(d), n_neighbors), near.ravel()
    keys = np.unique(np.minimum(a, b).astype(np.int64) * d + np.maximum(a, b))[:n_pairs]
    rng = np.random.default_rng(seed)
    ra, rb = rng.integers(0, d, size=(2, 2 * n_pairs))
    other = ra != rb
    more = np.minimum(ra, rb)[other].astype(np.int64) * d + np.maximum(ra, rb)[other]
    more = rng.permutation(np.setdiff1d(more, keys))[:n_pairs - len(keys)]
    keys = np.sort(np.r_[keys, more])  # every object's neighbours, random pairs over all
    lo, hi = keys // d, keys % d
    table = pd.DataFrame({"a": ids[lo], "b": ids[hi], "distance": distances[lo, hi]})
    return ids, labels, table, np.where(labels[lo] == labels[hi], 1, -1)


def timed_fit(model, X, y):
    """Fit ``model``; return its wall and CPU seconds and the warnings' first words."""
    wall, cpu = time.perf_counter(), time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(X, y)
    notes = "; ".join(str(w.message)[:70] for w in caught)
    return time.perf_counter() - wall, time.process_time() - cpu, notes


def baseline_fit_batch(revision):
    """``fit_batch`` of the batch solver at a git revision, loaded beside the working tree's."""
    import importlib.util
    import subprocess
    import tempfile

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    folder = tempfile.mkdtemp(prefix="meg_batch_")
    modules = {}
    for name in ("pair_loss", "meg_batch"):
        source = subprocess.run(["git", "show", f"{revision}:megkernel/_solvers/{name}.py"],
                                cwd=root, check=True, capture_output=True, text=True).stdout
        source = source.replace("from .pair_loss import", "from .pair_loss_baseline import")
        path = os.path.join(folder, f"{name}_baseline.py")
        with open(path, "w") as file:
            file.write(source)
        spec = importlib.util.spec_from_file_location(f"megkernel._solvers.{name}_baseline", path)
        modules[name] = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = modules[name]
        spec.loader.exec_module(modules[name])
    baseline = modules["meg_batch"].fit_batch

    def fit_batch(*args, who=None, **kwargs):  # (a revision before the slow-fit note)
        return baseline(*args, **kwargs)

    return fit_batch


def defaults_table(sizes, user_tables, roundoff=False, against=None):
    """DefiniteBoostKernel (and MEG's batch fit) at their defaults, as a user calls them."""
    from _family_data import knn_accuracy, raw_knn_accuracy
    from _user_tables import survey_table, word_table

    import megkernel._solvers.definiteboost_fit as definiteboost_fit
    import megkernel.meg_regressor as meg_regressor
    from megkernel import DefiniteBoostKernel, MEGKernelRegressor

    learners = [("MEG batch", meg_regressor.fit_batch)]
    boosts = [("DefiniteBoost", definiteboost_fit.fit_batch)]
    if against is not None:
        baseline = baseline_fit_batch(against)
        learners.insert(0, (f"MEG batch at {against}", baseline))
        boosts.insert(0, (f"DefiniteBoost, MEG prior at {against}", baseline))

    print("\n| data | objects | pairs | learner | wall s | CPU s | 1-NN | iterations | "
          "converged | notes |\n|---|---|---|---|---|---|---|---|---|---|")
    cases = []
    for d in sizes:
        ids, labels, table, signs = knn_table(d)
        cases.append(("families, k-NN graph, labels", ids, labels, table, signs))
        cases.append(("families, k-NN graph, distances", ids, labels, table, None))
    if user_tables:
        for name, make in (("word list, edit distance", word_table),
                           ("survey, Gower distance", survey_table)):
            ids, labels, table = make()
            cases.append((name, ids, labels, table, "meg"))
            cases.append((name, ids, labels, table, None))
    rows = []
    for name, ids, labels, table, signs in cases:
        meg = isinstance(signs, str)
        if meg:
            y = table["distance"].to_numpy() ** 2
            runs = learners
        else:
            y = table["distance"] if signs is None else signs
            runs = boosts if signs is None else boosts[-1:]  # labels: no MEG prior
        baseline_cpu = None
        for learner, fit_batch in runs:
            if meg:  # the batch solver of this run
                meg_regressor.fit_batch = fit_batch
                model = MEGKernelRegressor(objects=ids, random_state=0)
            else:
                definiteboost_fit.fit_batch = fit_batch
                # plain distances, said so (y_kind='auto' reads floats as squared)
                model = DefiniteBoostKernel(objects=ids, random_state=0,
                                            y_kind="labels" if signs is not None
                                            else "distances")
            wall, cpu, notes = timed_fit(model, table[["a", "b"]], y)
            if roundoff and meg:
                again = MEGKernelRegressor(objects=ids, random_state=0)
                timed_fit(again, table[["a", "b"]], np.nextafter(y, np.inf))
                change = (np.linalg.norm(again.kernel_ - model.kernel_)
                          / np.linalg.norm(model.kernel_))
                notes = "; ".join(filter(None, [
                    f"targets one ulp up: kernel {change:.1e} apart", notes]))
            if against is not None and len(runs) > 1:
                if baseline_cpu is None:
                    baseline_cpu = cpu
                else:
                    notes = "; ".join(filter(None, [
                        f"CPU {cpu / baseline_cpu:.2f}x the baseline's", notes]))
            extra = f"; held-out R2 {model.validation_score_:.4f}" if meg else ""
            n_iter = getattr(model, "n_iter_", "")
            converged = getattr(model, "converged_", "")
            row = (f"| {name} (raw 1-NN {raw_knn_accuracy(ids, labels, table):.3f}) | "
                   f"{len(ids)} | {len(table)} | {learner} | {wall:.1f} | {cpu:.1f} | "
                   f"{knn_accuracy(model, ids, labels):.3f} | {n_iter} | {converged} | "
                   f"load {os.getloadavg()[0]:.1f}{extra}; {notes[:150]} |")
            rows.append(row)
            print(row, flush=True)
        meg_regressor.fit_batch = learners[-1][1]
        definiteboost_fit.fit_batch = boosts[-1][1]
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--defaults", action="store_true",
                        help="the estimators at their defaults on user-like tables instead")
    parser.add_argument("--user-tables", action="store_true",
                        help="with --defaults: also the word list and the survey")
    parser.add_argument("--roundoff", action="store_true",
                        help="with --defaults: MEG again on targets one ulp up")
    parser.add_argument("--against", metavar="REV",
                        help="with --defaults: MEG's rows also with the batch solver of REV")
    parser.add_argument("--sizes", type=int, nargs="*", default=[500, 1000, 2000])
    parser.add_argument("--iterations", type=int, default=1500)
    parser.add_argument("--window", type=int, default=250)
    parser.add_argument("--converge", action="store_true",
                        help="also run auto to convergence (up to 400,000 iterations)")
    args = parser.parse_args()
    if args.defaults:
        defaults_table(args.sizes, args.user_tables, args.roundoff, args.against)
        return
    print(f"{'d':>5} {'pairs':>6} {'method':>7}  iterations / s by window of {args.window}")
    for d in args.sizes:
        a, b, signs, labels = problem(d)
        results = {}
        for method in ("rank-one", "auto"):
            results[method] = rates(d, a, b, signs, args.iterations, args.window, method)[0]
            shown = " ".join(f"{r:7.1f}" for r in results[method])
            print(f"{d:5d} {len(a):6d} {method:>7}  {shown}", flush=True)
        n = min(len(results["rank-one"]), len(results["auto"]))
        ratio = " ".join(f"{r:7.2f}" for r in results["auto"][:n] / results["rank-one"][:n])
        print(f"{'':5} {'':6} {'ratio':>7}  {ratio}", flush=True)
        if args.converge:
            window = 5000
            per_window, log, seconds, state, gamma = rates(d, a, b, signs, 400_000, window,
                                                           "auto")
            shown = " ".join(f"{r:.0f}" for r in per_window)
            print(f"{'':5} {'':6} {'auto':>7}  to convergence: {log['n_iter']} iterations in "
                  f"{seconds:.1f} s, converged {log['converged']}, largest violation "
                  f"{log['max_violation'] / gamma:.4f} gamma, LOO 1-NN "
                  f"{loo_accuracy(state, labels):.3f}; iterations / s by {window}: {shown}",
                  flush=True)


if __name__ == "__main__":
    main()
