"""The compiled greedy loop (megkernel._solvers.definiteboost_fused) against
the generic one of run_definiteboost: the same run, iteration by iteration."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from megkernel import DefiniteBoostMetric
from megkernel._engines import rank_one
from megkernel._numerics.state import ExponentState
from megkernel._solvers import definiteboost_fused as fused
from megkernel._solvers import definiteboost_projections as solver


def _problem(n, r, m, quantile, seed):
    """Pair constraints on a low-rank prior; dissimilar pairs no metric of the
    prior's range can separate left out (as every public entry point does)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, r)) * np.linspace(1.0, 3.0, r)
    labels = rng.integers(0, 3, n)
    a = rng.integers(0, n, m)
    b = (a + 1 + rng.integers(0, n - 1, m)) % n
    signs = np.where(labels[a] == labels[b], 1.0, -1.0)
    sq = np.sum((X[a] - X[b]) ** 2, axis=1) / np.sum(X**2)
    thresholds = np.where(signs > 0, np.quantile(sq, quantile), np.quantile(sq, 1 - quantile))
    keep = (signs > 0) | (sq > thresholds * 1.01)
    return ExponentState.from_factor(X), a[keep], b[keep], signs[keep], thresholds[keep]


def _both(problem, settings, monkeypatch, callback_at=None):
    """The generic and the compiled run; with ``callback_at``, also the
    callback's calls and the state's factor it saw."""
    state, a, b, signs, thresholds = problem
    runs = []
    for compiled in (False, True):
        with monkeypatch.context() as patch:
            if not compiled:
                patch.setattr(solver, "fused_applies", lambda *args: False)
            else:  # it must be the loop that runs
                patch.setattr(solver, "fused_applies",
                              lambda *args: _applies_or_fail(*args))
            run_state = state.copy()
            constraints = solver.PairConstraints(a, b, signs, thresholds, run_state)
            seen = []
            callback = (None if callback_at is None else
                        lambda t, record: seen.append((t, record, run_state.factor())))
            log = solver.run_definiteboost(constraints, run_state, settings, method="auto",
                                           callback=callback, callback_at=callback_at)
        runs.append((log, run_state) if callback_at is None else (log, run_state, seen))
    return runs


def _applies_or_fail(*args):
    assert fused.fused_applies(*args)
    return True


CASES = {  # n, r, m, quantile, max_iter
    "more pairs than points (the points' factor)": (200, 11, 1400, 0.3, 600),
    "fewer pairs than points (pair coordinates)": (300, 13, 200, 0.3, 600),
    "feasible, converges": (60, 6, 40, 0.45, 5000),
    "rank 3": (75, 3, 300, 0.3, 400),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_fused_loop_is_the_generic_run(case, monkeypatch):
    n, r, m, quantile, max_iter = CASES[case]
    settings = solver._Settings(max_iter=max_iter, tol=1e-8)
    (generic, generic_state), (compiled, compiled_state) = _both(
        _problem(n, r, m, quantile, seed=n + r), settings, monkeypatch)
    assert_array_equal(compiled["constraint"], generic["constraint"])
    # violations near convergence are differences of O(1e-2) squared distances:
    # the sums' round-off (the compiled scan adds in another order) is absolute
    for key, atol in (("violation", 1e-14), ("alpha", 1e-12), ("multipliers", 1e-10),
                      ("dual_objective", 0.0), ("dual_bound", 0.0)):
        assert_allclose(compiled[key], generic[key], rtol=1e-9, atol=atol, err_msg=key)
    for key in ("converged", "infeasible", "n_iter", "n_violated"):
        assert compiled[key] == generic[key], key
    assert_allclose(compiled["max_violation"], generic["max_violation"], rtol=1e-9,
                    atol=1e-15)
    assert_allclose(compiled_state.matrix(), generic_state.matrix(), atol=1e-12)
    assert_allclose(compiled_state.exponent, generic_state.exponent, atol=1e-10)
    if case == "feasible, converges":
        assert compiled["converged"] and compiled["n_iter"] > 0
        # every constraint holds on the kernel the state now holds
        values = solver.PairConstraints(*_problem(n, r, m, quantile, n + r)[1:],
                                        compiled_state).values(compiled_state)
        assert values.max() <= 1e-8


def test_fused_loop_re_anchors_as_the_rank_one_engine(monkeypatch):
    """With an eigh every 7 updates, the loop hands back to Python mid-run
    (several times, with an odd number of buffer trades between them)."""
    monkeypatch.setattr(rank_one, "REFRESH_EVERY", 7)
    monkeypatch.setattr(fused, "REFRESH_EVERY", 7)
    calls = []
    original = fused.eigh_symmetric
    monkeypatch.setattr(fused, "eigh_symmetric",
                        lambda *args, **kwargs: calls.append(1) or original(*args, **kwargs))
    settings = solver._Settings(max_iter=100, tol=1e-8)
    (generic, generic_state), (compiled, compiled_state) = _both(
        _problem(120, 8, 500, 0.3, seed=5), settings, monkeypatch)
    assert len(calls) >= 100 // 7
    assert_array_equal(compiled["constraint"], generic["constraint"])
    assert_allclose(compiled["multipliers"], generic["multipliers"], rtol=1e-9)
    assert_allclose(compiled_state.matrix(), generic_state.matrix(), atol=1e-12)


def test_fused_loop_stops_on_the_infeasibility_certificate(monkeypatch):
    # a prior eigenvalue floor far above the dual objective: stops after one step
    settings = solver._Settings(max_iter=500, tol=1e-8, min_prior_eigenvalue=0.5)
    (generic, _), (compiled, _) = _both(_problem(200, 11, 1400, 0.3, seed=1), settings,
                                        monkeypatch)
    assert compiled["infeasible"] and generic["infeasible"]
    assert compiled["n_iter"] == generic["n_iter"] < 500
    assert_array_equal(compiled["constraint"], generic["constraint"])


def test_fused_loop_with_no_iterations(monkeypatch):
    settings = solver._Settings(max_iter=0, tol=1e-8)
    (generic, generic_state), (compiled, compiled_state) = _both(
        _problem(80, 5, 300, 0.3, seed=2), settings, monkeypatch)
    assert compiled["n_iter"] == generic["n_iter"] == 0
    assert compiled["n_violated"] == generic["n_violated"] > 0
    assert_allclose(compiled_state.matrix(), generic_state.matrix(), atol=1e-15)


@pytest.mark.parametrize("change", ["callback", "corrective", "exact", "dense",
                                    "scan_every", "eigh engine"])
def test_fused_loop_only_where_it_is_the_same_run(change):
    state, a, b, signs, thresholds = _problem(200, 11, 1400, 0.3, seed=3)
    settings = solver._Settings()
    callback, engine = None, solver.select("auto", state, need="update")
    assert fused.fused_applies(solver.PairConstraints(a, b, signs, thresholds, state),
                               state, settings, 1, callback, engine)
    scan_every = 1
    if change == "callback":
        callback = print
    elif change == "corrective":
        settings = settings._replace(corrective=True)
    elif change == "exact":
        settings = settings._replace(projection="exact")
    elif change == "dense":
        state = ExponentState.identity(12)
        a, b = a % 12, (a + 1) % 12
    elif change == "scan_every":
        scan_every = 4
    else:
        engine = solver.select("eigh", state, need="update")
    constraints = solver.PairConstraints(a, b, signs, thresholds, state)
    assert not fused.fused_applies(constraints, state, settings, scan_every, callback, engine)


def test_metric_learner_is_the_same_with_the_fused_loop(monkeypatch):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(90, 6)) + np.repeat(np.eye(6)[:3] * 2.5, 30, axis=0)
    y = np.repeat(np.arange(3), 30)
    fits, runs = [], []
    for compiled in (True, False):
        with monkeypatch.context() as patch, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if not compiled:
                patch.setattr(solver, "fused_applies", lambda *args: False)
            patch.setattr(solver, "run_fused",
                          lambda *args: runs.append(compiled) or fused.run_fused(*args))
            fits.append(DefiniteBoostMetric(random_state=0, init="euclidean").fit(X, y))
    assert runs and all(runs)  # the validation's runs and the final one, compiled
    assert fits[0].n_iter_ == fits[1].n_iter_ > 0
    assert_allclose(fits[0].components_, fits[1].components_, atol=1e-10)


@pytest.mark.parametrize("keep", ["best", "last"])
def test_fused_loop_with_multiplier_caps(keep, monkeypatch):
    """Soft constraints (DefiniteBoostMetric's slack): steps clipped at the
    caps, capped constraints never chosen again, either iterate kept."""
    problem = _problem(150, 9, 900, 0.2, seed=4)
    caps = np.full(len(problem[1]), 3.0)
    settings = solver._Settings(max_iter=800, tol=1e-8, max_multiplier=caps, keep=keep)
    (generic, generic_state), (compiled, compiled_state) = _both(problem, settings,
                                                                 monkeypatch)
    assert np.sum(compiled["multipliers"] == 3.0) > 0  # some reached their cap
    assert_array_equal(compiled["constraint"], generic["constraint"])
    assert_allclose(compiled["multipliers"], generic["multipliers"], rtol=1e-9, atol=1e-10)
    assert_allclose(compiled["dual_bound"], generic["dual_bound"], rtol=1e-9)
    assert_allclose(compiled["max_violation"], generic["max_violation"], rtol=1e-9)
    assert_allclose(compiled_state.matrix(), generic_state.matrix(), atol=1e-12)


def test_fused_loop_calls_back_at_the_given_iterations(monkeypatch):
    settings = solver._Settings(max_iter=300, tol=1e-8)
    at = [0, 1, 7, 7, 64, 150, 299, 1000]  # 0: before any step, never called
    (generic, _, generic_seen), (compiled, _, compiled_seen) = _both(
        _problem(200, 11, 1400, 0.3, seed=6), settings, monkeypatch, callback_at=at)
    assert [t for t, _, _ in compiled_seen] == [1, 7, 64, 150, 299]
    assert [t for t, _, _ in generic_seen] == [1, 7, 64, 150, 299]
    for (_, record, factor), (_, expected, expected_factor) in zip(compiled_seen,
                                                                   generic_seen):
        assert record["constraint"] == expected["constraint"]
        for key in ("violation", "alpha", "dual_objective", "dual_bound"):
            assert_allclose(record[key], expected[key], rtol=1e-9, atol=1e-14)
        assert_allclose(factor @ factor.T, expected_factor @ expected_factor.T, atol=1e-12)


def test_fused_loop_records_grow_with_the_run(monkeypatch):
    """Records sized to ``max_iter`` would make ``max_iter=10**9`` an
    allocation of tens of GB: they start small and double; the run is the
    same."""
    monkeypatch.setattr(fused, "_FIRST_RECORDS", 3)
    settings = solver._Settings(max_iter=200, tol=1e-8)
    (generic, _), (compiled, _) = _both(_problem(120, 8, 500, 0.3, seed=7), settings,
                                        monkeypatch)
    assert compiled["n_iter"] == generic["n_iter"] == 200
    assert_array_equal(compiled["constraint"], generic["constraint"])
    assert_allclose(compiled["dual_bound"], generic["dual_bound"], rtol=1e-9)
    state, a, b, signs, thresholds = _problem(60, 6, 40, 0.45, seed=66)
    log = solver.run_definiteboost(solver.PairConstraints(a, b, signs, thresholds, state),
                                   state, solver._Settings(max_iter=10**9), method="auto")
    assert log["converged"] and len(log["dual_objective"]) == log["n_iter"] + 1
