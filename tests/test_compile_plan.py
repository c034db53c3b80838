"""Which engines a call runs, hence which numba kernels its first use compiles."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import pair_trials

import megkernel._engines as engines
from megkernel._engines import ENGINES, run_pair_trials
from megkernel._numerics.state import ExponentState


def _trials(d, n, seed=0):
    return pair_trials(d, n, rank=5, seed=seed)


def _counting(monkeypatch):
    """Count the calls of each engine's ``pair_trials``."""
    calls = {}
    for name, engine in list(ENGINES.items()):

        def counted(*args, _name=name, _run=engine.pair_trials, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _run(*args, **kwargs)

        monkeypatch.setitem(ENGINES, name, engine._replace(pair_trials=counted))
    return calls


def test_a_short_call_from_the_identity_runs_by_one_engine(monkeypatch):
    """d = 300, 2000 trials from I/d: the call's work is a fraction of a
    second, so it runs by the engine chosen for all of it (Lanczos), not by
    short rank-one segments first (their engine's compile would cost more
    than the whole call)."""
    calls = _counting(monkeypatch)
    state, stats = ExponentState.identity(300), {}
    run_pair_trials(state, *_trials(300, 2000), learning_rate=0.5, stats=stats)
    assert stats["auto_segments"] == [("lanczos", 2000)]
    assert set(calls) == {"lanczos"}


def test_a_long_call_still_switches_engines(monkeypatch):
    """The rule reads the expected work: a long call from a trained d = 52
    state (the paper's run, rank-4 target) goes on in segments as before, to
    the rank-one engine, the cheaper one there; so the paper's run keeps its
    speed."""
    d, warm = 52, 25000
    rng = np.random.default_rng(0)
    X = rng.standard_normal((d, 4))
    K = X @ X.T / np.trace(X @ X.T)
    a = rng.integers(0, d, warm + 10000)
    b = (a + rng.integers(1, d, a.size)) % d
    y = K[a, a] + K[b, b] - 2 * K[a, b]
    state = ExponentState.identity(d)
    run_pair_trials(state, a[:warm], b[:warm], y[:warm], learning_rate=0.5)
    stats, segmented = {}, {}
    copy = state.copy()
    run_pair_trials(state, a[warm:], b[warm:], y[warm:], learning_rate=0.5, stats=stats)
    monkeypatch.setattr(engines, "AUTO_ONE_ENGINE_BELOW", 0.0)  # always in segments
    run_pair_trials(copy, a[warm:], b[warm:], y[warm:], learning_rate=0.5, stats=segmented)
    assert stats["auto_segments"] == segmented["auto_segments"]
    assert len(stats["auto_segments"]) > 1
    assert stats["auto_segments"][-1][0] == "rank-one"


def test_the_choice_reads_the_call_not_the_numba_cache():
    """The same call on the same state runs by the same engines whatever has
    been compiled before (same data, same answer)."""
    a, b, y = _trials(300, 2000, seed=2)
    runs = []
    for _ in range(2):
        state, stats = ExponentState.identity(300), {}
        predictions = run_pair_trials(state, a, b, y, learning_rate=0.5, stats=stats)
        runs.append((stats["auto_segments"], predictions, state.matrix()))
    assert runs[0][0] == runs[1][0]
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    np.testing.assert_array_equal(runs[0][2], runs[1][2])


_FIRST_FITS = textwrap.dedent("""
    import json

    import numpy as np
    from numba.core import event
    from megkernel import MEGKernelRegressor
    from megkernel.datasets import distance_triples

    compiled, dispatchers = set(), {}

    class Listener(event.Listener):
        def on_start(self, ev):
            dispatcher = ev.data["dispatcher"]
            compiled.add(dispatcher.py_func.__module__)
            if dispatcher.py_func.__module__.startswith("megkernel"):
                entry = dispatchers.setdefault(dispatcher.py_func.__name__, [dispatcher, 0])
                entry[1] += 1

        def on_end(self, ev):
            pass

    event.register("numba:compile", Listener())
    rng = np.random.default_rng(0)
    kernels = []
    for d in (52, 300):
        X = rng.standard_normal((d, 5))
        K = X @ X.T / np.trace(X @ X.T)
        pairs, y = distance_triples(K, 2000, random_state=0)
        kernels.append(MEGKernelRegressor(solver="online", n_objects=d).fit(pairs, y).kernel_)
    print(sorted(m for m in compiled if m.startswith("megkernel")))
    print(np.concatenate([k.ravel() for k in kernels]).tobytes().hex()[:4000])
    # per compiled function: compilations, specialisations, C-callable wrappers
    print(json.dumps({name: [count, len(dispatcher.signatures),
                             sum("cfunc." in dispatcher.inspect_llvm(sig)
                                 for sig in dispatcher.signatures)]
                      for name, (dispatcher, count) in sorted(dispatchers.items())}))
""")


@pytest.mark.slow
def test_the_first_fits_compile_one_engine(tmp_path):
    """The cold start of the benchmarks page (a d = 52 then a d = 300 on-line
    fit, empty numba cache) compiles the Lanczos kernels only, each once,
    and gives the same kernels as the same fits with a warm cache."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), OMP_NUM_THREADS="1")
    outputs = [subprocess.run([sys.executable, "-c", _FIRST_FITS], env=env, check=True,
                              capture_output=True, text=True).stdout.splitlines()
               for _ in range(2)]
    assert outputs[0][0] == "['megkernel._engines._lanczos_kernels']"
    assert outputs[1][0] == "[]"  # the second process loads them from the cache
    assert outputs[0][1] == outputs[1][1]
    # each kernel compiled once, for one set of argument types (the engine
    # normalises layouts and dtypes), and without a C-callable wrapper
    functions = json.loads(outputs[0][2])
    assert set(functions) == {"pair_trials", "_step", "tridiag_exp", "_radius",
                              "gauss_legendre_count", "_insert"}
    assert all(counts == [1, 1, 0] for counts in functions.values()), functions
    assert json.loads(outputs[1][2]) == {}


_DISTANCES = textwrap.dedent("""
    import numpy as np
    from megkernel._engines._distances import factor_rows_sq_distances
    factor = np.arange(12.0).reshape(4, 3)
    print(factor_rows_sq_distances(factor, np.array([0, 1]), np.array([2, 3])).tolist())
""")


@pytest.mark.parametrize("damage", [
    pytest.param(b"", id="emptied"),
    pytest.param(b"\x80\x04garbage", id="garbled", marks=pytest.mark.slow)])
def test_a_damaged_numba_cache_file_is_compiled_anew_and_replaced(tmp_path, damage):
    """numba unpickles its cache files unchecked: a damaged one raised from
    every later call of the kernel, in every session. It is discarded with
    one warning naming the folder; the next session reads the new files."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), OMP_NUM_THREADS="1")

    def run():
        return subprocess.run([sys.executable, "-W", "default", "-c", _DISTANCES], env=env,
                              capture_output=True, text=True, timeout=300)

    first = run()
    assert first.returncode == 0, first.stderr
    files = [path for path in tmp_path.rglob("*") if path.suffix in (".nbi", ".nbc")]
    assert {path.suffix for path in files} == {".nbi", ".nbc"}
    for path in files:
        path.write_bytes(damage)
    damaged = run()
    assert damaged.returncode == 0, damaged.stderr
    assert damaged.stdout == first.stdout
    assert damaged.stderr.count("UserWarning: numba's cache of megkernel's compiled "
                                "kernels in ") == 1, damaged.stderr
    assert "could not be read" in damaged.stderr and "compiling them again" in damaged.stderr
    repaired = run()
    assert (repaired.returncode, repaired.stdout, repaired.stderr) == (0, first.stdout, "")
