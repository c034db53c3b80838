"""DefiniteBoost where users wait: the budget of max_iter='auto', runs stopped early."""

import numpy as np
import pytest

from megkernel._numerics.state import ExponentState
from megkernel._solvers import definiteboost_lazy, definiteboost_projections
from megkernel._solvers.definiteboost_projections import ChosenCount, _warn_outcome
from megkernel._solvers.definiteboost_rules import (
    AUTO_BUDGET,
    ITERATIONS_PER_CONSTRAINT,
    MIN_AUTO_MAX_ITER,
    auto_max_iter,
    fit_pair_constraints,
    prior_mean_sq_distance,
)


def _problem(d, n_pairs, seed=0):
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, 4, size=d)
    pairs = rng.integers(0, d, size=(3 * n_pairs, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]][:n_pairs]
    signs = np.where(groups[pairs[:, 0]] == groups[pairs[:, 1]], 1.0, -1.0)
    return pairs, signs


@pytest.mark.parametrize("lazy", [False, True])
def test_a_run_stopped_between_scans_keeps_its_progress(monkeypatch, lazy):
    """keep='best' compares the last iterate too: a lazy run that reaches
    max_iter before its next full scan (every m / 2 iterations) used to return
    the prior (its only scan)."""
    d = 60
    monkeypatch.setattr(definiteboost_projections, "_SCAN_ALWAYS_UP_TO", 0)
    monkeypatch.setattr(definiteboost_lazy, "LAZY_FROM", 50 if lazy else 10**6)
    pairs, signs = _problem(d, 1500)
    points = np.random.default_rng(1).normal(size=(d, 3))
    prior = points @ points.T + 0.1 * np.eye(d)  # violations of all sizes
    state = ExponentState.from_prior(prior / np.trace(prior))
    prior = state.copy()
    gamma = 0.1 * prior_mean_sq_distance(state)
    runs = []
    run_lazy = definiteboost_projections.run_lazy
    monkeypatch.setattr(definiteboost_projections, "run_lazy",
                        lambda *args: runs.append(1) or run_lazy(*args))
    log = fit_pair_constraints(state, pairs, signs, gamma=gamma, max_iter=100, warn=False)
    assert bool(runs) == lazy
    assert not log["converged"] and log["n_iter"] == 100
    assert not np.allclose(state.matrix(), prior.matrix())  # not the prior
    # the kept iterate's largest violation is the returned state's, below the prior's
    values = np.where(signs > 0, 1.0, -1.0) * (
        state.pair_sq_distances(pairs[:, 0], pairs[:, 1]) - log["thresholds"])
    prior_values = np.where(signs > 0, 1.0, -1.0) * (
        prior.pair_sq_distances(pairs[:, 0], pairs[:, 1]) - log["thresholds"])
    assert values.max() < prior_values.max()
    assert log["max_violation"] == pytest.approx(values.max(), rel=1e-6,
                                                 abs=1e-12)


def test_auto_max_iter_is_a_budget_on_many_objects():
    # few objects: 25 per constraint, at least MIN_AUTO_MAX_ITER, as before
    assert auto_max_iter(10, 52) == MIN_AUTO_MAX_ITER
    assert auto_max_iter(1000, 52) == ITERATIONS_PER_CONSTRAINT * 1000
    assert auto_max_iter(1000) == ITERATIONS_PER_CONSTRAINT * 1000
    # many objects and constraints: the budget, said in the count's reason
    count = auto_max_iter(90_000, 2000)
    assert isinstance(count, ChosenCount) and count == AUTO_BUDGET // 2000
    assert "budget for 2000 objects" in count.reason
    assert auto_max_iter(90_000, 10**7) == MIN_AUTO_MAX_ITER  # never below the floor
    assert auto_max_iter(10, 10**7).reason == ""


def test_reaching_the_budget_says_so():
    log = {"infeasible": False, "converged": False, "n_violated": 3,
           "multipliers": np.zeros(100), "max_violation": 0.25}
    with pytest.warns(Warning, match=r"did not converge in the 4000 iterations "
                                     r"max_iter='auto' chose \(the budget for 2000 "
                                     r"objects.*give max_iter to run longer\): 97 of 100 "
                                     r"constraints met"):
        _warn_outcome(log, auto_max_iter(90_000, 2000))
