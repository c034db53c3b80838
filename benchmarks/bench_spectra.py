"""Per-trial speed of every MEG engine on realistic spectra, ratios in one run.

Run ``python benchmarks/bench_spectra.py`` (about 10 minutes; ``--quick``: a
smoke run without the d = 2000 rows, ``--sizes 150 500`` to choose). Prints
one markdown table: for each target and size, the time per on-line MEG trial
of the lean numpy loop (one ``numpy.linalg.eigh`` per trial), of every
registered engine and of ``"auto"`` (with the engine it picked), all from
the same state on the same trials, and the ratios.

Targets (each trace one; trials are random pairs with their exact squared
distances, :func:`megkernel.datasets.distance_triples`):

``random``
    RBF kernel of random 13-d Gaussian points (the old speed table's).
``random, dense``
    The same target from a generic dense prior (random eigenvectors,
    eigenvalues in [0.5, 1.5]): the exponent is dense, nothing deflates.
``clustered``
    Squared distances of 5-d points in three clusters (rank 5): a few
    large eigenvalues, many near-equal small ones (issue 21's rows).
``gyrB``
    The bundled gyrB k-mer spectrum kernel (:func:`~megkernel.datasets.load_gyrb`;
    at most its 113 proteins).
``sequences``
    Cosine 4-mer spectrum kernel of DNA-like sequences in 8 planted families
    (``_family_data.py``, the data of the DefiniteBoost benchmarks).
``k-NN graph``
    Diffusion kernel ``exp(-L)`` of the symmetrised 10-nearest-neighbour
    graph of scikit-learn's digits (at most its 1797 images).

Except for the dense rows, the state is the prior ``I/d`` after a warm-up of
trials of the same target: the steady state of an on-line fit, whose
exponent is ``-log d I`` plus one entry pair per distinct pair seen. Every
method then runs the next trials from a copy of that state in one call, as
``MEGKernelRegressor(solver="online").fit`` does (the Lanczos engine's
closing ``eigh`` included; the call length is printed). Times are the best
of a few rounds (``--repeats``, 3 by default and at least 7 below d = 500,
where a trial takes microseconds; the methods run in turn in each round) of
the CPU time of
the process on one BLAS thread (default:
robust on a shared machine, where wall clock measures the other jobs too),
or with ``--clock wall`` the wall clock with the BLAS thread limit the
engines use (one thread below ``SINGLE_THREAD_BELOW``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _family_data import family_sequences  # noqa: E402

from megkernel._engines import ENGINES, run_pair_trials, select  # noqa: E402
from megkernel._numerics.state import ExponentState  # noqa: E402
from megkernel._numerics.threads import SINGLE_THREAD_BELOW  # noqa: E402
from megkernel.datasets import distance_triples, load_gyrb  # noqa: E402

LEARNING_RATE = 0.5


# -- targets ----------------------------------------------------------------
def _trace_one(K):
    K = 0.5 * (K + K.T)
    return K / np.trace(K)


def random_target(d, seed=0):
    """RBF kernel of ``d`` random 13-d Gaussian points."""
    X = np.random.default_rng(seed).standard_normal((d, 13))
    sq = np.sum((X[:, None] - X[None]) ** 2, axis=-1)
    return _trace_one(np.exp(-sq / 13))


def clustered_target(d, seed=0):
    """Centred Gram matrix of ``d`` 5-d points in three clusters (rank 5)."""
    rng = np.random.default_rng(seed)
    centers = 3.0 * rng.standard_normal((3, 5))
    X = centers[rng.integers(0, 3, d)] + rng.standard_normal((d, 5))
    X -= X.mean(axis=0)
    return _trace_one(X @ X.T)


def gyrb_target(d, seed=0):
    """The gyrB k-mer spectrum kernel over ``min(d, 113)`` proteins."""
    return load_gyrb(n_objects=d if d <= 63 else None, random_state=seed).kernel


def sequences_target(d, seed=0):
    """Cosine 4-mer spectrum kernel of ``d`` DNA-like sequences in 8 planted
    families (``_family_data.py``; the kernel of the benchmarks' own data)."""
    _, _, distances = family_sequences(d, n_families=8, mutation=0.3, seed=seed)
    return _trace_one(1.0 - distances / 1000.0)


def knn_graph_target(d, seed=0, n_neighbors=10, beta=1.0):
    """Diffusion kernel ``exp(-beta L)`` of a k-NN graph of ``min(d, 1797)`` digits."""
    from sklearn.datasets import load_digits
    from sklearn.neighbors import kneighbors_graph

    X = load_digits().data
    if d < len(X):
        X = X[np.random.default_rng(seed).choice(len(X), d, replace=False)]
    adjacency = kneighbors_graph(X, n_neighbors, mode="connectivity").toarray()
    adjacency = np.maximum(adjacency, adjacency.T)
    laplacian = np.diag(adjacency.sum(axis=1)) - adjacency
    lam, vecs = np.linalg.eigh(laplacian)
    return _trace_one((vecs * np.exp(-beta * lam)) @ vecs.T)


def generic_prior(d, seed=1):
    rng = np.random.default_rng(seed)
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    return (Q * rng.uniform(0.5, 1.5, d)) @ Q.T


#: name -> (target, dense prior)
TARGETS = {
    "random": (random_target, False),
    "random, dense": (random_target, True),
    "clustered": (clustered_target, False),
    "gyrB": (gyrb_target, False),
    "sequences": (sequences_target, False),
    "k-NN graph": (knn_graph_target, False),
}


# -- methods ----------------------------------------------------------------
def lean_eigh_trials(A, a, b, y):
    """A lean numpy reference from exponent ``A``: one ``numpy.linalg.eigh`` per
    trial (eq. 7), nothing else; returns the predictions."""
    A = np.array(A, dtype=float)
    predictions = np.empty(len(y))
    for t in range(len(y)):
        lam, V = np.linalg.eigh(A)
        w = np.exp(lam - lam[-1])
        z = V[a[t]] - V[b[t]]
        predictions[t] = (z * z) @ w / w.sum()
        s = -2 * LEARNING_RATE * (predictions[t] - y[t])
        A[a[t], a[t]] += s
        A[b[t], b[t]] += s
        A[a[t], b[t]] -= s
        A[b[t], a[t]] -= s
    return predictions


#: "cpu" (process time, one BLAS thread) or "wall" (set by main)
CLOCK = "cpu"


def blas_limit(d):
    return 1 if CLOCK == "cpu" or d < SINGLE_THREAD_BELOW else None


def clock():
    return time.process_time() if CLOCK == "cpu" else time.perf_counter()


#: trials per call at each size: (warm-up, rank-one / Lanczos / auto, eigh and
#: the lean loop); rank-one gets fewer at d >= 500 (its time per trial does not
#: depend on the call's length, Lanczos's does: one eigh per call)
PLAN = {52: (5000, 5000, 300), 150: (5000, 2000, 60), 500: (5000, 1000, 8),
        2000: (5000, 300, 2)}
QUICK = {52: (1000, 1000, 50), 150: (1000, 300, 10), 500: (1000, 200, 3)}
RANK_ONE_TRIALS = {500: 30, 2000: 2}
QUICK_RANK_ONE_TRIALS = {500: 5}


def warm_state(K, dense, n_warm, n_run, seed=0):
    """The state after ``n_warm`` trials of target ``K`` from ``I/d`` (or the
    dense prior as it is) and the next ``n_run`` trials."""
    d = len(K)
    pairs, y = distance_triples(K, n_warm + n_run, random_state=seed)
    a, b = pairs[:, 0], pairs[:, 1]
    if dense:
        return ExponentState.from_prior(generic_prior(d)), a[n_warm:], b[n_warm:], \
            y[n_warm:]
    state = ExponentState.identity(d)
    with threadpool_limits(blas_limit(d)):
        run_pair_trials(state, a[:n_warm], b[:n_warm], y[:n_warm],
                        learning_rate=LEARNING_RATE, method="auto")
    return state, a[n_warm:], b[n_warm:], y[n_warm:]


def time_row(state, a, b, y, counts, repeats):
    """Best seconds per trial of every method from copies of ``state``.

    ``counts``: method -> trials. The methods run in turn, ``repeats``
    rounds (round-robin: a slow spell of the machine hits all of them), and
    each keeps its best round. Returns ``(times, predictions, stats)``.
    """
    times = dict.fromkeys(counts, np.inf)
    predictions, stats = {}, {}
    with threadpool_limits(blas_limit(state.size)):
        for _ in range(repeats):
            for method, n in counts.items():
                copy = state.copy()
                stats[method] = {}
                start = clock()
                if method == "lean":
                    predictions[method] = lean_eigh_trials(copy.exponent, a[:n], b[:n],
                                                           y[:n])
                else:
                    predictions[method] = run_pair_trials(
                        copy, a[:n], b[:n], y[:n], learning_rate=LEARNING_RATE,
                        method=method, stats=stats[method])
                times[method] = min(times[method], (clock() - start) / n)
    return times, predictions, stats


def describe_auto(stats):
    """What ``"auto"`` ran: ``"lanczos"``, or e.g. ``"rank-one 48, lanczos 1952"``."""
    trials = {}
    for name, length in stats.get("auto_segments", []):
        trials[name] = trials.get(name, 0) + length
    if len(trials) == 1:
        return next(iter(trials))
    return ", ".join(f"{name} {count}" for name, count in trials.items())


def fmt_time(seconds):
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def spectrum_note(state):
    lam = state.eigenvalues
    off = state.exponent - np.diag(np.diag(state.exponent))
    nnz = np.count_nonzero(off) + state.size
    return f"{lam[-1] - lam[0]:.3g}", f"{nnz / state.size ** 2:.2f}"


def run(sizes, plan, rank_one_trials, repeats, targets=TARGETS):
    engines = list(ENGINES)
    print("| target | d | spread of log W | nnz(A)/d² | trials per call | lean eigh loop | "
          + " | ".join(engines) + " | auto (picked) | "
          + " | ".join(f"lean / {name}" for name in engines)
          + " | lean / auto | auto / fastest |")
    print("|---|---|---|---|---|---|" + "---|" * (2 * len(engines) + 3))
    rows = []
    for size in sizes:
        n_warm, n_run, n_slow = plan[size]
        for name, (target, dense) in targets.items():
            K = target(size)
            d = len(K)
            if d < size // 2:
                continue  # no more data than that: shown at a smaller size
            state, a, b, y = warm_state(K, dense, n_warm, n_run)
            counts = {"lean": n_slow}
            for engine in engines:
                counts[engine] = (n_slow if engine == "eigh"
                                  else rank_one_trials.get(size, n_run)
                                  if engine == "rank-one" else n_run)
            counts["auto"] = n_run
            # rows of a few µs per trial are at the mercy of the shared machine's
            # spells: more rounds below d = 500 (their best is what is compared)
            rounds = repeats if size >= 500 or repeats == 1 else max(repeats, 7)
            times, predictions, stats = time_row(state, a, b, y, counts, rounds)
            picked = describe_auto(stats["auto"]) or select("auto", state, n_trials=n_run).name
            # same results: every engine against the eigh engine's predictions
            n_check = min(counts.values())
            for method, values in predictions.items():
                gap = np.abs(values[:n_check] - predictions["eigh"][:n_check]).max()
                if gap > 1e-9 * max(np.abs(y[:n_check]).max(), 1e-300):
                    print(f"<!-- {method} differs from eigh by {gap:.2e} -->")
            fastest = min(times[engine] for engine in engines)
            spread, density = spectrum_note(state)
            lz = stats.get("lanczos", {})
            steps = (f" ({lz['steps'] / max(lz['trials'], 1):.1f} steps)"
                     if lz.get("trials") else "")
            cells = [name, str(d), spread, density, str(n_run), fmt_time(times["lean"])]
            cells += [fmt_time(times[e]) + (steps if e == "lanczos" else "")
                      for e in engines]
            cells.append(f"{fmt_time(times['auto'])} ({picked})")
            cells += [f"{times['lean'] / times[e]:.1f}×" for e in engines]
            cells.append(f"{times['lean'] / times['auto']:.1f}×")
            cells.append(f"{times['auto'] / fastest:.2f}")
            print("| " + " | ".join(cells) + " |", flush=True)
            rows.append((name, d, times, picked))
    worst = max(rows, key=lambda row: row[2]["auto"] / min(row[2][e] for e in engines))
    print(f"\nWorst auto / fastest: {worst[2]['auto'] / min(worst[2][e] for e in engines):.2f}"
          f" ({worst[0]}, d = {worst[1]}).")
    return rows


def streams(sizes, chunks=(1, 10, 100, 500), n_warm=3000, rounds=2):
    """``partial_fit`` in chunks: every ``method`` of ``MEGKernelRegressor(solver="online")``
    on the clustered target, CPU time per trial (best of ``rounds``), the lean eigh
    loop and, for one-pair calls, scikit-learn's ``SGDRegressor.partial_fit`` per
    call, all in this process."""
    import copy
    import warnings

    from sklearn.linear_model import SGDRegressor

    from megkernel import MEGKernelRegressor

    methods = ["auto", *ENGINES]
    print("\n### Streams: partial_fit in chunks, clustered target (trace one), "
          "CPU time per trial\n")
    print("| d | pairs per call | lean eigh loop | " + " | ".join(methods)
          + " | auto / fastest | lean / auto |")
    print("|---|---|---|" + "---|" * (len(methods) + 2))
    for d in sizes:
        K = clustered_target(d)
        pairs, y = distance_triples(K, n_warm + 4000, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # rank-one names its cost on this spectrum
            base = MEGKernelRegressor(solver="online", n_objects=d, trace=1.0,
                                      learning_rate=LEARNING_RATE, method="lanczos")
            base.partial_fit(pairs[:n_warm], y[:n_warm])
            state = base.state_
            lean = np.inf
            with threadpool_limits(1):
                for _ in range(rounds):
                    start = clock()
                    lean_eigh_trials(state.exponent, pairs[n_warm:n_warm + 100, 0],
                                     pairs[n_warm:n_warm + 100, 1], y[n_warm:n_warm + 100])
                    lean = min(lean, (clock() - start) / 100)
            for chunk in chunks:
                times = {}
                for _ in range(rounds):
                    for method in methods:
                        slow = method in ("rank-one", "eigh") and d >= 200
                        n = max(chunk, 20) if slow or method == "eigh" else max(4 * chunk, 200)
                        model = copy.deepcopy(base).set_params(method=method)
                        with threadpool_limits(1):
                            start = clock()
                            for first in range(n_warm, n_warm + n, chunk):
                                model.partial_fit(pairs[first:first + chunk],
                                                  y[first:first + chunk])
                            times[method] = min(times.get(method, np.inf),
                                                (clock() - start) / n)
                fastest = min(times[m] for m in methods if m != "auto")
                print(f"| {d} | {chunk} | {fmt_time(lean)} | "
                      + " | ".join(fmt_time(times[m]) for m in methods)
                      + f" | {times['auto'] / fastest:.2f} | {lean / times['auto']:.1f}× |",
                      flush=True)
        if d <= 100:  # one pair per call against scikit-learn's SGDRegressor, same process
            features = np.random.default_rng(0).normal(size=(2000, 2))
            sgd = SGDRegressor().partial_fit(features[:1], y[:1])
            model = copy.deepcopy(base).set_params(method="auto")
            with threadpool_limits(1):
                start = clock()
                for i in range(1, 2000):
                    sgd.partial_fit(features[i:i + 1], y[i:i + 1])
                per_sgd = (clock() - start) / 1999
                start = clock()
                for i in range(n_warm, n_warm + 2000):
                    model.partial_fit(pairs[i:i + 1], y[i:i + 1])
                per_call = (clock() - start) / 2000
            print(f"\nd = {d}, one pair per call: MEGKernelRegressor.partial_fit "
                  f"{fmt_time(per_call)} per call, SGDRegressor.partial_fit "
                  f"{fmt_time(per_sgd)} ({per_call / per_sgd:.2f}×)\n", flush=True)


def warm_up():
    """Load the compiled kernels (their cold start is not measured here)."""
    state = ExponentState.identity(4)
    for method in ENGINES:
        run_pair_trials(state, np.array([0, 2]), np.array([1, 1]), np.array([0.3, 0.2]),
                        learning_rate=LEARNING_RATE, method=method)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: fewer trials, no d = 2000")
    parser.add_argument("--sizes", type=int, nargs="+", choices=sorted(PLAN),
                        help="sizes to run (default: all of the plan)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="process time on one BLAS thread (default) or wall clock")
    parser.add_argument("--streams", action="store_true",
                        help="only partial_fit in chunks of 1, 10, 100 and 500 pairs "
                             "(d = 52 and 500, clustered target)")
    args = parser.parse_args()
    global CLOCK
    CLOCK = args.clock
    if args.streams:
        warm_up()
        streams([52, 500], rounds=1 if args.quick else 2)
        return
    plan = QUICK if args.quick else PLAN
    sizes = [s for s in (args.sizes or plan) if s in plan]
    repeats = args.repeats or (1 if args.quick else 3)
    start = time.perf_counter()
    clock_name = ("CPU time, 1 BLAS thread" if CLOCK == "cpu" else
                  f"wall clock, 1 BLAS thread below d = {SINGLE_THREAD_BELOW}")
    print(f"## MEG engines on realistic spectra ({os.cpu_count()} logical cores, "
          f"load average at start {os.getloadavg()[0]:.2f}; {clock_name}; best of "
          f"{repeats} rounds, at least 7 below d = 500)\n")
    warm_up()
    run(sizes, plan, QUICK_RANK_ONE_TRIALS if args.quick else RANK_ONE_TRIALS, repeats)
    print(f"\nTotal benchmark time: {fmt_time(time.perf_counter() - start)}.")


if __name__ == "__main__":
    main()
