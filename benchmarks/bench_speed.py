"""Speed of exact MEG and DefiniteBoost: rank-one and Lanczos engines vs eigh vs logm+expm.

Run ``python benchmarks/bench_speed.py`` (a few minutes; ``--quick`` for a
smoke run). Prints markdown tables: the machine and its BLAS, time per MEG
trial at d = 52, 200, 500, 2000, the paper-sized d = 52 run, exactness after
10^5 trials, the cold start of the compiled kernels, and DefiniteBoost.
Realistic spectra (clustered and low-rank targets, gyrB, a k-NN graph
kernel), with ``"auto"`` and the lean eigh loop in the same run:
``benchmarks/bench_spectra.py``.

Every method runs with the BLAS thread limit the rank-one engine chooses
for that size (one thread below ``SINGLE_THREAD_BELOW``), so the ratios
compare like with like. Per-trial times start from a generic prior (random
eigenvectors, distinct eigenvalues), where deflation saves nothing: the
steady state of a long run, not its degenerate start from ``I / d``.

The Lanczos engine is timed twice: from the generic (dense) prior, where
every product ``A x`` is a dense ``d^2`` pass, and from ``I / d`` after a
warm-up of trials, where the exponent is sparse. Its times include the one
``eigh`` it takes at the end of every call (the trials per call are printed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import scipy
from scipy import linalg
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_info, threadpool_limits

from megkernel import definiteboost_pairs
from megkernel._engines import lanczos as _lanczos
from megkernel._engines import rank_one as _rank_one
from megkernel._engines import run_pair_trials
from megkernel._numerics.state import ExponentState
from megkernel._numerics.threads import SINGLE_THREAD_BELOW
from megkernel.datasets import distance_triples, load_wine_kernel

LEARNING_RATE = 0.5


# -- problems ---------------------------------------------------------------
def target_kernel(d, seed=0):
    """Trace-one target: the wine kernel at d = 52, an RBF kernel otherwise."""
    if d == 52:
        return load_wine_kernel(52).kernel
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((d, 13))
    sq = np.sum((X[:, None] - X[None]) ** 2, axis=-1)
    K = np.exp(-sq / 13)
    return K / np.trace(K)


def generic_prior(d, seed=1):
    rng = np.random.default_rng(seed)
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    return (Q * rng.uniform(0.5, 1.5, d)) @ Q.T


def trials(d, n, seed=0):
    pairs, y = distance_triples(target_kernel(d), n, random_state=seed)
    return pairs[:, 0], pairs[:, 1], y


def blas_limit(d):
    return 1 if d < SINGLE_THREAD_BELOW else None


# -- methods ----------------------------------------------------------------
def naive_trials(W, a, b, y):
    """Public-code style MEG: ``W <- expm(logm(W) - 2 eta (yhat-y) X) / tr``."""
    for t in range(len(y)):
        y_hat = W[a[t], a[t]] + W[b[t], b[t]] - 2 * W[a[t], b[t]]
        u = np.zeros(len(W))
        u[a[t]], u[b[t]] = 1.0, -1.0
        L = np.real(linalg.logm(W)) - 2 * LEARNING_RATE * (y_hat - y[t]) * np.outer(u, u)
        E = linalg.expm(0.5 * (L + L.T))
        W = E / np.trace(E)
    return W


def time_method(method, d, n, repeats):
    """Median wall and CPU seconds per trial, from the generic prior."""
    a, b, y = trials(d, n)
    prior = generic_prior(d)
    walls, cpus = [], []
    with threadpool_limits(blas_limit(d)):
        for _ in range(repeats):
            state = ExponentState.from_prior(prior)
            wall, cpu = time.perf_counter(), time.process_time()
            if method == "logm+expm":
                naive_trials(prior / np.trace(prior), a, b, y)
            else:
                run_pair_trials(state, a, b, y, learning_rate=LEARNING_RATE,
                                method=method)
            walls.append((time.perf_counter() - wall) / n)
            cpus.append((time.process_time() - cpu) / n)
    return float(np.median(walls)), float(np.median(cpus))


def run_meg(method, a, b, y, d=52, prior=None, stats=None):
    state = (ExponentState.identity(d) if prior is None
             else ExponentState.from_prior(prior))
    with threadpool_limits(blas_limit(d)):
        wall, cpu = time.perf_counter(), time.process_time()
        predictions = run_pair_trials(state, a, b, y, learning_rate=LEARNING_RATE,
                                      method=method, stats=stats)
        elapsed = time.perf_counter() - wall, time.process_time() - cpu
    return predictions, state.matrix(), elapsed


# -- reports ----------------------------------------------------------------
def fmt_time(seconds):
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def machine_table():
    import numba

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    blas = "; ".join(
        f"{i['internal_api']} {i['version']} ({i['prefix']}, {i['num_threads']} threads"
        f", {i.get('architecture', '?')})" for i in threadpool_info()
        if i["user_api"] == "blas")
    rows = [
        ("CPU", f"{cpu}, {os.cpu_count()} logical cores"),
        ("load average at start", ", ".join(f"{x:.2f}" for x in os.getloadavg())),
        ("Python / numpy / scipy / numba",
         f"{platform.python_version()} / {np.__version__} / {scipy.__version__}"
         f" / {numba.__version__}"),
        ("BLAS (threadpoolctl)", blas),
        ("rank-one engine", f"refresh every "
         f"{_rank_one.REFRESH_EVERY} updates, 1 BLAS thread below d="
         f"{SINGLE_THREAD_BELOW}"),
        ("Lanczos engine", "stop at "
         f"a Gauss error bound of {_lanczos.TOL:g} relative (or the quadrature's "
         f"round-off level; consecutive quadratures compared from step "
         f"{_lanczos.QL_FROM}), at most {_lanczos.MAX_STEPS} steps, log Z "
         f"re-anchored every {_lanczos.ANCHOR_EVERY} updates, one eigh per call"),
    ]
    print("| machine | |\n|---|---|")
    for key, value in rows:
        print(f"| {key} | {value} |")


# trials per method at each d: (logm+expm, eigh, rank-one, lanczos)
SIZES = {52: (20, 1000, 20000, 20000), 200: (4, 60, 600, 3000),
         500: (2, 10, 40, 1000), 2000: (0, 2, 3, 150)}
QUICK = {52: (3, 50, 500, 500), 200: (1, 5, 30, 100), 500: (0, 2, 4, 20),
         2000: (0, 0, 0, 0)}
METHODS = ("logm+expm", "eigh", "rank-one", "lanczos")


def per_trial_table(sizes, repeats):
    print("\n### Time per MEG trial (steady state, median of "
          f"{repeats}; wall clock, CPU time in brackets)\n")
    print("| d | BLAS threads | logm+expm | eigh per trial | rank-one "
          "| Lanczos (trials per call) | eigh / rank-one | eigh / Lanczos "
          "| logm+expm / rank-one |")
    print("|---|---|---|---|---|---|---|---|---|")
    for d, counts in sizes.items():
        times = {}
        for method, n in zip(METHODS, counts):
            if n:
                times[method] = time_method(method, d, n, repeats)
        cells = [f"{fmt_time(times[m][0])} ({fmt_time(times[m][1])})"
                 if m in times else "–" for m in METHODS]
        if "lanczos" in times:
            cells[3] += f" ({counts[3]})"

        def ratio(slow, fast, times=times):
            if slow in times and fast in times:
                return f"{times[slow][0] / times[fast][0]:.1f}x"
            return "–"

        ratios = [ratio("eigh", "rank-one"), ratio("eigh", "lanczos"),
                  ratio("logm+expm", "rank-one")]
        threads = blas_limit(d) or os.cpu_count()
        print(f"| {d} | {threads} | " + " | ".join(cells + ratios) + " |")


def identity_start_table(d, n_fast, n_slow):
    """Per-trial time over the first trials from ``I / d`` (deflation regime)."""
    a, b, y = trials(d, n_fast)
    times = {}
    with threadpool_limits(blas_limit(d)):
        for method, n in (("eigh", n_slow), ("rank-one", n_fast)):
            state = ExponentState.identity(d)
            wall = time.perf_counter()
            run_pair_trials(state, a[:n], b[:n], y[:n],
                            learning_rate=LEARNING_RATE, method=method)
            times[method] = (time.perf_counter() - wall) / n
    print(f"\nFrom the prior I/d instead, d = {d}: the first {n_fast} trials "
          f"took {fmt_time(times['rank-one'])} per trial by rank-one (after t "
          "trials only about t eigenpairs have left the degenerate eigenvalue, "
          "the rest deflate), against "
          f"{fmt_time(times['eigh'])} by eigh ({n_slow} trials).")


def warm_identity_table(plan):
    """Per-trial times from ``I / d`` after a warm-up of trials (sparse exponent).

    ``plan``: ``{d: (warm-up trials, eigh, rank-one, lanczos trials)}``.
    """
    print("\n### Time per MEG trial from the prior I/d after a warm-up "
          "(wall clock; the exponent is diagonal plus one entry pair per "
          "distinct pair seen)\n")
    print("| d | warm-up trials | eigh per trial | rank-one | Lanczos (trials "
          "per call) | Lanczos steps per trial | eigh / rank-one "
          "| eigh / Lanczos |")
    print("|---|---|---|---|---|---|---|---|")
    for d, (n_warm, *counts) in plan.items():
        a, b, y = trials(d, n_warm + max(counts), seed=5)
        with threadpool_limits(blas_limit(d)):
            warm = ExponentState.identity(d)
            run_pair_trials(warm, a[:n_warm], b[:n_warm], y[:n_warm],
                            learning_rate=LEARNING_RATE, method="lanczos")
            times = {}
            for method, n in zip(("eigh", "rank-one", "lanczos"), counts):
                if not n:
                    continue
                state = warm.copy()
                sl = slice(n_warm, n_warm + n)
                wall = time.perf_counter()
                stats = {}
                run_pair_trials(state, a[sl], b[sl], y[sl],
                                learning_rate=LEARNING_RATE, method=method, stats=stats)
                times[method] = (time.perf_counter() - wall) / n
                if method == "lanczos":
                    steps = stats["steps"] / max(stats["trials"], 1)
        cells = [fmt_time(times[m]) if m in times else "–"
                 for m in ("eigh", "rank-one", "lanczos")]
        cells[2] += f" ({counts[2]})"
        ratios = [f"{times['eigh'] / times[m]:.1f}x" if m in times else "–"
                  for m in ("rank-one", "lanczos")]
        print(f"| {d} | {n_warm} | " + " | ".join(cells) + f" | {steps:.1f} | "
              + " | ".join(ratios) + " |")


def exactness_table(d, n, prior_name):
    """Lanczos against eigh per trial at ``d`` after ``n`` trials."""
    a, b, y = trials(d, n, seed=7)
    prior = generic_prior(d) if prior_name == "generic" else None
    ref_pred, ref_K, (ref_wall, _) = run_meg("eigh", a, b, y, d, prior)
    stats = {}
    fast_pred, fast_K, (fast_wall, _) = run_meg("lanczos", a, b, y, d, prior, stats)
    loss_fast = ((fast_pred - y) ** 2).sum()
    loss_ref = ((ref_pred - y) ** 2).sum()
    return (f"| {d} | {prior_name} | {n} | "
            f"{np.linalg.norm(fast_K - ref_K) / np.linalg.norm(ref_K):.1e} | "
            f"{np.abs(fast_pred - ref_pred).max():.1e} | "
            f"{abs(loss_fast - loss_ref) / loss_ref:.1e} | "
            f"{stats['steps'] / max(stats['trials'], 1):.1f} / {stats['max_steps']} | "
            f"{stats['fallbacks']} | {fmt_time(ref_wall)} / {fmt_time(fast_wall)} |")


def lanczos_exactness(cases):
    print("\n### Lanczos exactness against eigh per trial (same trials)\n")
    print("| d | prior | trials | kernel, relative Frobenius | predictions, max "
          "abs | cumulative loss, relative | Lanczos steps mean / max "
          "| trials run by eigh | time eigh / Lanczos |")
    print("|---|---|---|---|---|---|---|---|---|")
    for d, n, prior_name in cases:
        print(exactness_table(d, n, prior_name))


def lean_eigh_trials(d, a, b, y):
    """A lean numpy reference: one ``numpy.linalg.eigh`` of the exponent per
    trial (eq. 7), nothing else; returns the predictions."""
    A = -np.log(d) * np.eye(d)
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


def paper_and_exactness(n_paper, n_exact, n_lean):
    a, b, y = trials(52, n_paper, seed=3)
    fast_pred, fast_K, (fast_wall, fast_cpu) = run_meg("rank-one", a, b, y)
    with threadpool_limits(1):
        wall, cpu = time.perf_counter(), time.process_time()
        lean_pred = lean_eigh_trials(52, a[:n_lean], b[:n_lean], y[:n_lean])
        lean_wall, lean_cpu = time.perf_counter() - wall, time.process_time() - cpu
    lz_stats = {}
    lz_pred, lz_K, (lz_wall, lz_cpu) = run_meg("lanczos", a, b, y, stats=lz_stats)
    ref_pred, ref_K, (ref_wall, ref_cpu) = run_meg("eigh", a[:n_exact],
                                                   b[:n_exact], y[:n_exact])
    prefix_pred, prefix_K, _ = run_meg("rank-one", a[:n_exact], b[:n_exact],
                                       y[:n_exact])
    lz_prefix_pred, lz_prefix_K, _ = run_meg("lanczos", a[:n_exact], b[:n_exact],
                                             y[:n_exact])
    scale = n_paper / n_exact
    print(f"\n### Paper-sized run: d = 52 (wine kernel), {n_paper:.0e} trials,"
          " prior I/d, eta = 1/2, 1 BLAS thread\n")
    print("| engine | wall | CPU | note |\n|---|---|---|---|")
    print(f"| rank-one | {fmt_time(fast_wall)} | {fmt_time(fast_cpu)} | measured,"
          " full run |")
    print(f"| Lanczos | {fmt_time(lz_wall)} | {fmt_time(lz_cpu)} | measured, full "
          f"run; {lz_stats['steps'] / lz_stats['trials']:.1f} steps per trial "
          f"(max {lz_stats['max_steps']}), {lz_stats['fallbacks']} trials by eigh |")
    print(f"| eigh per trial | {fmt_time(ref_wall * scale)} | "
          f"{fmt_time(ref_cpu * scale)} | extrapolated x{scale:g} from the "
          f"first {n_exact:.0e} trials ({fmt_time(ref_wall)} measured) |")
    lean_scale = n_paper / n_lean
    print(f"| lean numpy loop, eigh per trial | {fmt_time(lean_wall * lean_scale)} | "
          f"{fmt_time(lean_cpu * lean_scale)} | extrapolated x{lean_scale:g} from "
          f"the first {n_lean:.0e} trials ({fmt_time(lean_wall)} measured; "
          "predictions within "
          f"{np.abs(lean_pred - fast_pred[:n_lean]).max():.1e} of rank-one's) |")
    print(f"| ratio eigh / rank-one | {ref_wall * scale / fast_wall:.1f}x | "
          f"{ref_cpu * scale / fast_cpu:.1f}x | |")
    print(f"| ratio lean numpy loop / rank-one | "
          f"{lean_wall * lean_scale / fast_wall:.1f}x | "
          f"{lean_cpu * lean_scale / fast_cpu:.1f}x | |")
    print(f"| ratio eigh / Lanczos | {ref_wall * scale / lz_wall:.1f}x | "
          f"{ref_cpu * scale / lz_cpu:.1f}x | |")
    print(f"| ratio lean numpy loop / Lanczos | {lean_wall * lean_scale / lz_wall:.1f}x | "
          f"{lean_cpu * lean_scale / lz_cpu:.1f}x | |")
    losses = ((prefix_pred - y[:n_exact]) ** 2).sum(), ((ref_pred - y[:n_exact]) ** 2).sum()
    lz_loss = ((lz_prefix_pred - y[:n_exact]) ** 2).sum()
    print(f"\n### Exactness after {n_exact:.0e} trials (rank-one and Lanczos vs"
          " eigh per trial, same trials)\n")
    print("| quantity | rank-one | Lanczos |\n|---|---|---|")
    print(f"| kernel, relative Frobenius | "
          f"{np.linalg.norm(prefix_K - ref_K) / np.linalg.norm(ref_K):.2e} | "
          f"{np.linalg.norm(lz_prefix_K - ref_K) / np.linalg.norm(ref_K):.2e} |")
    print(f"| predictions, max abs (max y = {y.max():.3g}) | "
          f"{np.abs(prefix_pred - ref_pred).max():.2e} | "
          f"{np.abs(lz_prefix_pred - ref_pred).max():.2e} |")
    print(f"| cumulative loss, relative | "
          f"{abs(losses[0] - losses[1]) / losses[1]:.2e} | "
          f"{abs(lz_loss - losses[1]) / losses[1]:.2e} |")
    print(f"| full-run prefix vs separate prefix run, max abs prediction | "
          f"{np.abs(fast_pred[:n_exact] - prefix_pred).max():.2e} | "
          f"{np.abs(lz_pred[:n_exact] - lz_prefix_pred).max():.2e} |")


def paper_clustered(n_paper, n_lean):
    """The paper's run as a user makes it: one ``MEGKernelRegressor(solver="online").fit``
    call at d = 52 from ``I / d``, on a clustered (rank-4, trace-one) target
    and on the wine kernel (full rank), against the lean eigh-per-trial loop
    on the same trials, in this process."""
    from megkernel import MEGKernelRegressor

    d = 52
    X = np.random.default_rng(0).standard_normal((d, 4))
    targets = {"clustered, rank 4": X @ X.T / np.trace(X @ X.T),
               "wine kernel, full rank": target_kernel(d)}
    print(f"\n### Paper-sized run on a clustered target and a full-rank one: d = 52, "
          f"{n_paper:.0e} trials, prior I/d, eta = 1/2, one fit call, 1 BLAS thread\n")
    print("| target | method | wall | CPU | per trial (CPU) | lean loop / method (CPU) "
          "| trials by engine |\n|---|---|---|---|---|---|---|")
    for label, K in targets.items():
        pairs, y = distance_triples(K, n_paper, random_state=0)
        rows = []
        with threadpool_limits(1), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for method in ("auto", "rank-one", "lanczos"):
                wall, cpu = time.perf_counter(), time.process_time()
                MEGKernelRegressor(solver="online", n_objects=d, trace=1.0, learning_rate=0.5,
                                   method=method).fit(pairs, y)
                rows.append((method, time.perf_counter() - wall, time.process_time() - cpu))
            wall, cpu = time.perf_counter(), time.process_time()
            lean_eigh_trials(d, pairs[:n_lean, 0], pairs[:n_lean, 1], y[:n_lean])
            lean = ((time.perf_counter() - wall) * n_paper / n_lean,
                    (time.process_time() - cpu) * n_paper / n_lean)
            stats = {}  # the engines auto runs these trials with (the same call, untimed)
            run_pair_trials(ExponentState.identity(d), pairs[:, 0], pairs[:, 1], y,
                            learning_rate=0.5, stats=stats)
        shares = {}
        for name, length in stats.get("auto_segments", []):
            shares[name] = shares.get(name, 0) + length
        for method, wall, cpu in rows:
            share = (", ".join(f"{name} {count}" for name, count in shares.items())
                     if method == "auto" else method)
            print(f"| {label} | {method} | {fmt_time(wall)} | {fmt_time(cpu)} "
                  f"| {fmt_time(cpu / n_paper)} | {lean[1] / cpu:.1f}x | {share} |")
        print(f"| {label} | lean numpy loop, eigh per trial | {fmt_time(lean[0])} "
              f"| {fmt_time(lean[1])} | {fmt_time(lean[1] / n_paper)} | 1.0x "
              f"| extrapolated x{n_paper / n_lean:g} from the first {n_lean:.0e} trials |")


COLD_START = """
import json, sys, time
start, cpu = time.perf_counter(), time.process_time()
import numpy as np
from numba.core import event
from megkernel import MEGKernelRegressor
from megkernel.datasets import distance_triples
times = [(time.perf_counter() - start, time.process_time() - cpu)]
compiled, open_ = {}, []
class Compiles(event.Listener):  # CPU seconds per compiled kernel, its callees included
    def on_start(self, ev):
        open_.append(time.process_time())
    def on_end(self, ev):
        seconds = time.process_time() - open_.pop()
        f = ev.data["dispatcher"].py_func
        if not open_ and f.__module__.startswith("megkernel"):
            name = f.__module__.rsplit(".", 1)[-1] + "." + f.__name__
            compiled[name] = compiled.get(name, 0.0) + seconds
event.register("numba:compile", Compiles())
rng = np.random.default_rng(0)
for d in (52, 300):  # both by the Lanczos engine (short calls: one engine each)
    X = rng.standard_normal((d, 5))
    K = X @ X.T / np.trace(X @ X.T)
    pairs, y = distance_triples(K, 2000, random_state=0)
    t, cpu = time.perf_counter(), time.process_time()
    MEGKernelRegressor(solver="online", n_objects=d).fit(pairs, y)
    times.append((time.perf_counter() - t, time.process_time() - cpu))
print(json.dumps(times))
print(json.dumps(compiled))
"""

#: numba's fixed cost: the first compilation in a process of a function of
#: four lines (numba initialises its compiler and code generator once).
NUMBA_FIRST = """
import json, time
from numba import njit
@njit(error_model="numpy")
def total(x, n):
    s = 0.0
    for i in range(n):
        s += x[i]
    return s
import numpy as np
x = np.ones(3)
t, cpu = time.perf_counter(), time.process_time()
total(x, 3)
print(json.dumps([time.perf_counter() - t, time.process_time() - cpu]))
"""


def cold_start(repeats, main_job):
    """First fits in a fresh process: empty numba cache, then warm.

    Each cold run gets its own new ``NUMBA_CACHE_DIR`` (numba then reads and
    writes only there: no stale ``__pycache__`` entries beside the package
    are used); the warm runs reuse the directory the cold run filled. Wall
    and CPU seconds (on a loaded machine the wall time is the CPU time
    stretched by the other jobs), and numba's fixed cost of a first
    compilation in a fresh process.
    """
    def run(cache, argv=None):
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, OMP_NUM_THREADS="1",
                   OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        argv = argv or [sys.executable, "-c", COLD_START]
        wall = time.perf_counter()
        out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
        return time.perf_counter() - wall, out.stdout

    rows = {"cold": [], "warm": []}
    kernels, first = {}, []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as cache:
            for label in rows:
                times, compiled = run(cache)[1].splitlines()
                rows[label].append(np.array(json.loads(times)))
                if label == "cold":
                    for name, seconds in json.loads(compiled).items():
                        kernels.setdefault(name, []).append(seconds)
            first.append(json.loads(run(cache, [sys.executable, "-c", NUMBA_FIRST])[1]))
    print("\n### Cold start: first fits in a fresh process (median of "
          f"{repeats}; a new empty `NUMBA_CACHE_DIR` per cold run; wall / CPU)\n")
    print("| numba cache | import | first fit, d = 52 "
          "| then d = 300 | both fits |\n|---|---|---|---|---|")
    med = {label: np.median(np.array(runs), axis=0) for label, runs in rows.items()}
    for label, (imp, f52, f300) in med.items():
        both = f52 + f300
        print(f"| {label} | " + " | ".join(f"{fmt_time(w)} / {fmt_time(c)}"
                                          for w, c in (imp, f52, f300, both)) + " |")
    cold, warm = med["cold"], med["warm"]
    first = np.median(np.array(first), axis=0)
    print(f"\nCompiling costs {fmt_time(cold[1, 1] + cold[2, 1] - warm[1, 1] - warm[2, 1])} "
          "CPU (cold minus warm fits); kernels compiled by the cold run (median CPU "
          "seconds, callees and numba's first-compile set-up included): "
          + (", ".join(f"`{name}` {np.median(seconds):.2f} s"
                       for name, seconds in kernels.items()) or "none")
          + f". numba's fixed cost, the first compile of a four-line function in a fresh "
          f"process: {fmt_time(first[0])} / {fmt_time(first[1])}.")
    if main_job:
        with tempfile.TemporaryDirectory() as cache, \
                tempfile.TemporaryDirectory() as out:
            argv = [sys.executable, "-m", "megkernel", "reproduce", "--quiet",
                    "--out", out]
            first, _ = run(cache, argv)
            second, _ = run(cache, argv)
        print(f"\nThe main job, `python -m megkernel reproduce` (defaults): "
              f"{fmt_time(first)} with an empty numba cache, {fmt_time(second)} "
              "with a warm one.")


def definiteboost_table(d, n_pairs, n_iter, n_check):
    K = target_kernel(d)
    rng = np.random.default_rng(0)
    iu = np.triu_indices(d, 1)
    dist = (np.diag(K)[iu[0]] + np.diag(K)[iu[1]] - 2 * K[iu])
    closest = np.argsort(dist)[:n_pairs]
    pairs = np.column_stack([iu[0][closest], iu[1][closest]])
    pairs = pairs[rng.permutation(n_pairs)]
    gamma = 0.2 / d
    results = {}
    # tol=0 runs all n_iter iterations: "did not converge" is expected
    with threadpool_limits(blas_limit(d)), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for label in ("eigh", "rank-one"):
            wall, cpu = time.perf_counter(), time.process_time()
            W, log = definiteboost_pairs(pairs, np.ones(n_pairs), gamma,
                                         n_objects=d, max_iter=n_iter, tol=0.0,
                                         method=label, keep="last")
            results[label] = (time.perf_counter() - wall, time.process_time() - cpu,
                              W, log)
    (ew, ec, eW, elog), (rw, rc, rW, rlog) = results["eigh"], results["rank-one"]
    print(f"\n### DefiniteBoost: d = {d}, {n_pairs} similar-pair constraints "
          f"(gamma = 0.2/d), {elog['n_iter']} iterations (approximate "
          "projection, eq. 13)\n")
    print("| engine | wall | CPU | per iteration |\n|---|---|---|---|")
    for label, (w, c, _, log) in results.items():
        print(f"| {label} | {fmt_time(w)} | {fmt_time(c)} | "
              f"{fmt_time(w / max(log['n_iter'], 1))} |")
    print(f"| ratio | {ew / rw:.1f}x | {ec / rc:.1f}x | |")
    same = np.cumprod(elog["constraint"] == rlog["constraint"]).sum()
    print(f"\nThe two runs chose the same constraints for the first {same} of "
          f"{elog['n_iter']} iterations; final kernels "
          f"{np.linalg.norm(rW - eW) / np.linalg.norm(eW):.1e} apart (relative "
          "Frobenius). From W_1 = I/d many constraints tie for the largest "
          "violation; ties are broken by index, not by round-off, so both "
          "engines take the same path.")
    print(definiteboost_agreement(d, pairs, gamma, n_check))


def definiteboost_step_table(d, n_pairs, n_iter, n_dense_iter):
    """DefiniteBoost iterations at large d: constraint values by the compiled
    pair loop against the previous gather of ``V[a] - V[b]`` (same run)."""
    from megkernel._solvers import definiteboost_projections as solver

    K = target_kernel(d)
    iu = np.triu_indices(d, 1)
    dist = (np.diag(K)[iu[0]] + np.diag(K)[iu[1]] - 2 * K[iu])
    closest = np.argsort(dist)[:n_pairs]
    pairs = np.column_stack([iu[0][closest], iu[1][closest]])
    pairs = pairs[np.random.default_rng(0).permutation(n_pairs)]

    def run(values, prior, n):
        stamps = []
        solver.pair_sq_distances, saved = values, solver.pair_sq_distances
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                _, log = definiteboost_pairs(
                    pairs, np.ones(n_pairs), gamma=0.2 / d, n_objects=d, prior=prior,
                    max_iter=n, tol=0.0, method="rank-one", keep="last",
                    callback=lambda t, record: stamps.append(time.perf_counter()))
        finally:
            solver.pair_sq_distances = saved
        return float(np.median(np.diff(stamps))), log

    def gathered(state, a, b):  # the previous values: V[a] - V[b] for every pair
        return state.pair_sq_distances(a, b)

    new, new_log = run(solver.pair_sq_distances, None, n_iter)
    old, old_log = run(gathered, None, n_iter)
    same = bool(np.array_equal(new_log["constraint"], old_log["constraint"]))
    print(f"\n### DefiniteBoost iteration at d = {d}: {n_pairs} similar pairs, "
          f"median over {n_iter} iterations (BLAS threads as configured)\n")
    print("| prior | constraint values | per iteration |\n|---|---|---|")
    print(f"| I/d | gathered rows V[a] - V[b] (before) | {fmt_time(old)} |")
    print(f"| I/d | compiled loop over eigenvectors (now) | {fmt_time(new)} |")
    print(f"| | ratio | {old / new:.1f}x |")
    if n_dense_iter:
        dense, _ = run(solver.pair_sq_distances, generic_prior(d), n_dense_iter)
        print(f"| generic dense prior (every eigenvector rotates) | compiled loop | "
              f"{fmt_time(dense)} |")
    print(f"\nSame constraints chosen at every iteration: {same}; dual objectives "
          f"within {np.abs(new_log['dual_objective'] / old_log['dual_objective'] - 1).max():.1e}"
          " (relative).")


def definiteboost_agreement(d, pairs, gamma, n_iter):
    """Both engines from a generic prior (no ties): same run up to round-off."""
    runs = []
    with threadpool_limits(blas_limit(d)), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for method in ("eigh", "rank-one"):
            runs.append(definiteboost_pairs(
                pairs, np.ones(len(pairs)), gamma, prior=generic_prior(d),
                max_iter=n_iter, tol=0.0, method=method, keep="last"))
    (eW, elog), (rW, rlog) = runs
    same = bool(np.array_equal(elog["constraint"], rlog["constraint"]))
    duals = np.abs(rlog["dual_objective"] / elog["dual_objective"] - 1).max()
    return (f"From a generic prior (no ties), {n_iter} iterations: same "
            f"constraints chosen: {same}; kernels "
            f"{np.linalg.norm(rW - eW) / np.linalg.norm(eW):.1e} apart "
            f"(relative Frobenius), dual objectives within {duals:.1e}.")


def one_call_table(d, n_calls):
    """On-line use: one example per call, against scikit-learn's SGDRegressor."""
    from sklearn.linear_model import SGDRegressor

    from megkernel import MEGKernelRegressor

    a, b, y = trials(d, n_calls + 10, seed=11)
    pairs = np.column_stack([a, b])
    features = np.random.default_rng(0).normal(size=(n_calls + 10, 2))
    rows = []
    with threadpool_limits(1):
        model = MEGKernelRegressor(solver="online",
                                   n_objects=d, trace=1.0).partial_fit(pairs[:10], y[:10])
        sgd = SGDRegressor().partial_fit(features[:10], y[:10])
        for label, call in (
                ("MEGKernelRegressor.partial_fit, one pair",
                 lambda i: model.partial_fit(pairs[i:i + 1], y[i:i + 1])),
                ("SGDRegressor.partial_fit, one sample (baseline)",
                 lambda i: sgd.partial_fit(features[i:i + 1], y[i:i + 1])),
                ("MEGKernelRegressor.predict, one pair",
                 lambda i: model.predict(pairs[i:i + 1])),
                ("SGDRegressor.predict, one sample (baseline)",
                 lambda i: sgd.predict(features[i:i + 1]))):
            times = []
            for _ in range(3):
                wall = time.perf_counter()
                for i in range(10, n_calls + 10):
                    call(i)
                times.append((time.perf_counter() - wall) / n_calls)
            rows.append((label, float(np.median(times))))
    print(f"\n### One example per call (d = {d}, {n_calls} calls, median of 3)\n")
    print("| call | per call | / SGDRegressor |\n|---|---|---|")
    baseline = {"partial_fit": rows[1][1], "predict": rows[3][1]}
    for label, seconds in rows:
        kind = "partial_fit" if "partial_fit" in label else "predict"
        print(f"| {label} | {fmt_time(seconds)} | {seconds / baseline[kind]:.1f}x |")


def warm_up():
    """Load the compiled kernels (their cold start is measured separately)."""
    state = ExponentState.identity(4)
    run_pair_trials(state, np.array([0]), np.array([1]), np.array([0.3]),
                    learning_rate=LEARNING_RATE, method="rank-one")
    run_pair_trials(state, np.array([0, 2]), np.array([1, 1]), np.array([0.3, 0.2]),
                    learning_rate=LEARNING_RATE, method="lanczos")
    _rank_one.pair_update(state, 0, 1, -0.5)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run")
    parser.add_argument("--cold", type=int, metavar="N",
                        help="only the cold start, median of N runs")
    args = parser.parse_args()
    if args.cold:
        cold_start(args.cold, main_job=False)
        return
    start = time.perf_counter()
    print("## megkernel speed benchmark\n")
    machine_table()
    warm_up()
    if args.quick:
        per_trial_table(QUICK, 1)
        identity_start_table(200, 50, 5)
        warm_identity_table({52: (500, 50, 200, 200), 200: (200, 5, 20, 100)})
        lanczos_exactness([(200, 100, "identity"), (200, 30, "generic")])
        paper_and_exactness(3000, 1000, 1000)
        paper_clustered(3000, 500)
        cold_start(1, main_job=False)
        definiteboost_table(100, 200, 20, 10)
        definiteboost_step_table(300, 300, 20, 0)
        one_call_table(52, 200)
    else:
        per_trial_table(SIZES, 3)
        identity_start_table(2000, 200, 2)
        warm_identity_table({52: (10_000, 1000, 10_000, 10_000),
                             200: (5000, 60, 1000, 5000),
                             500: (5000, 10, 40, 5000),
                             2000: (5000, 2, 3, 5000)})
        lanczos_exactness([(500, 2000, "identity"), (500, 300, "generic")])
        paper_and_exactness(300_000, 100_000, 20_000)
        paper_clustered(300_000, 20_000)
        cold_start(3, main_job=True)
        definiteboost_table(500, 2000, 300, 50)
        definiteboost_step_table(2000, 2000, 200, 4)
        one_call_table(52, 2000)
    print(f"\nTotal benchmark time: {fmt_time(time.perf_counter() - start)}.")


if __name__ == "__main__":
    main()
