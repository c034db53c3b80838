"""DefiniteBoost's lazy greedy run with Lanczos steps (many objects)."""

import numpy as np
import pytest
from scipy import linalg

from megkernel._engines import lanczos
from megkernel._numerics.state import ExponentState
from megkernel._solvers import definiteboost_lazy as lazy
from megkernel._solvers import definiteboost_projections as solver
from megkernel._solvers.definiteboost_rules import pair_thresholds


def _problem(d=60, n_pairs=400, n_families=3, seed=0):
    """Similar / dissimilar pairs of objects in families (0/1 labels)."""
    rng = np.random.default_rng(seed)
    family = rng.integers(0, n_families, size=d)
    a, b = rng.integers(0, d, size=(2, n_pairs))
    keep = a != b
    a, b = a[keep], b[keep]
    signs = np.where(family[a] == family[b], 1.0, -1.0)
    state = ExponentState.identity(d)
    thresholds, gamma, _ = pair_thresholds(state, signs)
    return state, solver.PairConstraints(a, b, signs, thresholds, state), gamma


def _pair_matrix(d, a, b):
    v = np.zeros(d)
    v[a], v[b] = 1.0, -1.0
    return np.outer(v, v)


def _sq(K, a, b):
    return K[a, a] + K[b, b] - 2 * K[a, b]


@pytest.mark.parametrize("keep", ["last", "best"])
def test_lazy_run_converges_and_keeps_the_algebra(keep):
    state, constraints, gamma = _problem()
    settings = solver._Settings(max_iter=20_000, tol=1e-3 * gamma, keep=keep)
    log = lazy.run_lazy(constraints, state, settings)
    assert log["converged"] and log["n_violated"] == 0
    d = state.size
    W = state.matrix()
    # feasible, checked on the returned kernel (not the log)
    values = constraints.signs * (_sq(W, constraints.a, constraints.b)
                                  - constraints.thresholds)
    assert values.max() <= 1.001e-3 * gamma
    assert np.isclose(np.trace(W), 1.0)
    # the exponent is exactly log W_1 - sum_j alpha_j s_j v_j v_j^T
    expected = -np.log(d) * np.eye(d)
    for j, alpha in enumerate(log["multipliers"]):
        if alpha:
            expected -= alpha * constraints.signs[j] * _pair_matrix(
                d, constraints.a[j], constraints.b[j])
    np.testing.assert_allclose(state.exponent, expected, atol=1e-10)
    # the dual objective falls at every step and stays below Theorem 4.1's bound
    dual = log["dual_objective"]
    assert np.all(np.diff(dual) <= 1e-12 * dual[:-1])
    assert np.all(dual <= log["dual_bound"] * (1 + 1e-9))
    if keep == "last":  # the carried log Z is the exact one of the final exponent
        offset = np.sum(log["multipliers"] * constraints.signs * constraints.thresholds)
        lam = linalg.eigvalsh(state.exponent)
        exact = np.log(np.exp(lam - lam.max()).sum()) + lam.max() + offset
        assert np.isclose(np.log(dual[-1]), exact, rtol=0, atol=1e-9)


def test_lanczos_steps_match_eigen_updates():
    """The Lanczos oracle and rank-one eigen-updates take the same path."""
    logs, states = {}, {}
    for oracle in ("lanczos", "eigen"):
        state, constraints, gamma = _problem(seed=1)
        settings = solver._Settings(max_iter=300, tol=1e-3 * gamma, keep="last")
        if oracle == "eigen":
            original = lazy._Oracle.__init__

            def eigen_only(self, state, original=original):
                original(self, state)
                self.steps = lazy._EigenSteps(state)
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(lazy._Oracle, "__init__", eigen_only)
                logs[oracle] = lazy.run_lazy(constraints, state, settings)
        else:
            logs[oracle] = lazy.run_lazy(constraints, state, settings)
        states[oracle] = state
    np.testing.assert_array_equal(logs["lanczos"]["constraint"], logs["eigen"]["constraint"])
    np.testing.assert_allclose(logs["lanczos"]["alpha"], logs["eigen"]["alpha"], rtol=1e-9)
    np.testing.assert_allclose(logs["lanczos"]["dual_objective"],
                               logs["eigen"]["dual_objective"], rtol=1e-10)
    np.testing.assert_allclose(states["lanczos"].matrix(), states["eigen"].matrix(),
                               atol=1e-13)


def test_declined_quadratures_fall_back_to_eigen_updates(monkeypatch):
    """A Lanczos run too short to converge is refused and the step taken exactly."""
    state, constraints, gamma = _problem(seed=2)
    reference = state.copy()
    settings = solver._Settings(max_iter=200, tol=1e-3 * gamma, keep="last")
    expected = lazy.run_lazy(constraints, reference, settings)
    state, constraints, gamma = _problem(seed=2)
    monkeypatch.setattr(lanczos, "MAX_STEPS", 2)  # every quadrature declines
    log = lazy.run_lazy(constraints, state, settings)
    np.testing.assert_array_equal(log["constraint"], expected["constraint"])
    np.testing.assert_allclose(log["alpha"], expected["alpha"], rtol=1e-9)
    np.testing.assert_allclose(state.matrix(), reference.matrix(), atol=1e-13)


def test_auto_runs_the_lazy_choice_only_where_the_greedy_scan_is_not_every_step(monkeypatch):
    monkeypatch.setattr(lazy, "LAZY_FROM", 10)
    state, constraints, gamma = _problem()
    settings = solver._Settings(max_iter=10, tol=1e-3 * gamma)
    interval = solver._scan_interval(len(constraints), state.size)
    assert interval == 1 and not lazy.lazy_applies(constraints, state, settings, interval)
    assert lazy.lazy_applies(constraints, state, settings, 5)
    for other in (settings._replace(projection="exact"), settings._replace(scan_every=3)):
        assert not lazy.lazy_applies(constraints, state, other, 5)
    # general constraint matrices and low-rank states keep the eigen-updates
    general = solver.MatrixConstraints([_pair_matrix(3, 0, 1) - 0.1 * np.eye(3)])
    assert not lazy.lazy_applies(general, ExponentState.identity(3), settings, 5)
    # fewer objects than LAZY_FROM: eigen-updates
    monkeypatch.setattr(lazy, "LAZY_FROM", 400)
    assert not lazy.lazy_applies(constraints, state, settings, 5)
    assert lazy.lazy_state(ExponentState.identity(400), 5)


def test_auto_many_objects_uses_the_lazy_run(monkeypatch):
    """Above the scan's size ``run_definiteboost(method="auto")`` is the lazy run."""
    calls = []
    original = lazy.run_lazy

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(solver, "run_lazy", spy)
    monkeypatch.setattr(solver, "_SCAN_ALWAYS_UP_TO", 1000)
    monkeypatch.setattr(lazy, "LAZY_FROM", 10)
    state, constraints, gamma = _problem()
    settings = solver._Settings(max_iter=5000, tol=1e-3 * gamma)
    log = solver.run_definiteboost(constraints, state, settings, method="auto")
    assert calls and log["converged"]
    state, constraints, gamma = _problem()
    solver.run_definiteboost(constraints, state, settings, method="rank-one")
    assert len(calls) == 1


def test_interrupt_in_the_lazy_run_leaves_the_estimator_unchanged(monkeypatch):
    from megkernel import DefiniteBoostKernel

    rng = np.random.default_rng(3)
    d = 40
    family = rng.integers(0, 3, size=d)
    pairs = rng.integers(0, d, size=(300, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    y = (family[pairs[:, 0]] == family[pairs[:, 1]]).astype(int)
    est = DefiniteBoostKernel(n_objects=d).fit(pairs, y)
    before = est.kernel_.copy()
    monkeypatch.setattr(solver, "_SCAN_ALWAYS_UP_TO", 100)
    monkeypatch.setattr(lazy, "LAZY_FROM", 10)
    n = []

    def interrupt(*args, **kwargs):
        n.append(1)
        if len(n) > 50:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    original = lanczos.PairSteps.update
    monkeypatch.setattr(lanczos.PairSteps, "update", interrupt)
    with pytest.raises(KeyboardInterrupt):
        est.fit(pairs, y)
    assert n, "the lazy run was not used"
    np.testing.assert_array_equal(est.kernel_, before)


def test_reanchoring_log_z_changes_nothing_but_round_off(monkeypatch):
    """Re-anchoring ``log Z`` on eigh every few steps gives the same run."""
    logs = {}
    for every in (lanczos.STEPS_ANCHOR_EVERY, 7):
        monkeypatch.setattr(lanczos, "STEPS_ANCHOR_EVERY", every)
        state, constraints, gamma = _problem(seed=4)
        settings = solver._Settings(max_iter=150, tol=1e-3 * gamma, keep="last")
        logs[every] = lazy.run_lazy(constraints, state, settings)
    first, second = logs.values()
    np.testing.assert_array_equal(first["constraint"], second["constraint"])
    np.testing.assert_allclose(first["dual_objective"], second["dual_objective"], rtol=1e-11)
    np.testing.assert_allclose(first["alpha"], second["alpha"], rtol=1e-9)


@pytest.mark.parametrize("seed", [3, 4, 7, 10])
def test_multipliers_clipped_at_their_cap_stay_there(seed):
    """A step clipped at ``max_multiplier`` leaves the multiplier exactly at it
    (a few ulps short, the constraint was chosen again and again for steps
    rounding to zero), so a capped run converges as the eigen-update run does."""
    results = {}
    for method in ("lazy", "rank-one"):
        state, constraints, gamma = _problem(d=60, n_pairs=300, seed=seed)
        settings = solver._Settings(max_iter=4000, tol=1e-3 * gamma, keep="last",
                                    max_multiplier=0.05)
        if method == "lazy":
            log = lazy.run_lazy(constraints, state, settings)
        else:
            log = solver.run_definiteboost(constraints, state, settings, method="rank-one")
        results[method] = log
        assert log["converged"]
        assert np.all(log["multipliers"] <= 0.05)
    assert np.count_nonzero(results["lazy"]["alpha"] == 0) == 0
    assert results["lazy"]["n_iter"] <= 2 * results["rank-one"]["n_iter"]


def test_compile_note_names_the_engine_of_the_lazy_run():
    from megkernel._solvers.definiteboost import update_engine

    state = ExponentState.identity(2000)
    assert update_engine("auto", state, n_constraints=10_000) == "lanczos"
    assert update_engine("auto", state, n_constraints=100) == "rank-one"
    assert update_engine("auto", state, n_constraints=10_000, projection="exact") == "rank-one"
    assert update_engine("rank-one", state, n_constraints=10_000) == "rank-one"
