"""DefiniteBoost where users wait: the budget of max_iter='auto', runs stopped early."""

import numpy as np
import pytest

from megkernel._numerics.state import ExponentState
from megkernel._solvers import definiteboost_lazy, definiteboost_projections, slow_runs
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


class _ScriptedHeldOut:
    """Held-out pairs whose scores are given in turn (prior first)."""

    def __init__(self, scores):
        self.scores = iter(scores)

    def score(self, sq_distances):
        return next(self.scores)


@pytest.mark.parametrize("scores, tried", [
    ((0.5, 0.7, 0.8, 0.9), 3),  # improving: every candidate
    ((0.5, 0.9, 0.8, 0.95), 2),  # the second scores below the first: pruned there
])
def test_the_gamma_path_stops_past_its_best(scores, tried):
    from megkernel._solvers.definiteboost_rules import fit_labelled_pairs

    d = 12
    pairs, signs = _problem(d, 40, seed=3)
    state = ExponentState.from_prior(np.eye(d) / d)
    log = fit_labelled_pairs(state, pairs, signs, gamma="auto", gamma_dissimilar="auto",
                             trace=1.0, max_iter=5000, held_out=_ScriptedHeldOut(scores),
                             method="auto", projection="approximate", slack=None,
                             corrective=False, tol=1e-2)
    assert len(log["gamma_path"]) == tried
    assert log["validation_score"] == max(scores[1:tried + 1])


def test_the_slow_run_note_leaves_the_setup_out_of_the_pace(monkeypatch):
    """A first eigh of seconds before the first projection is paid once: it
    used to count as the pace of every projection (at 2000 objects: "1
    projections took 4.2 s; ... about 4.7 h" for a run of a minute)."""
    times = iter([0.0, 4.0] + list(4.0 + 0.001 * np.arange(1, 10_000)))
    monkeypatch.setattr(slow_runs, "clock", lambda: next(times))
    note = definiteboost_projections.SlowRunNote(ChosenCount(4000), 90_000)
    with _no_warning():
        for done in range(1, 4000):
            note(done)
    # a slow pace after the setup is still said, with the setup counted once
    times = iter([0.0, 4.0] + list(4.0 + 0.05 * np.arange(1, 10_000)))
    note = definiteboost_projections.SlowRunNote(ChosenCount(4000), 90_000)
    with pytest.warns(UserWarning, match=r"take about 3 min"):
        for done in range(1, 200):
            note(done)


def test_the_slow_run_note_counts_towards_the_tolerance(monkeypatch):
    """A run whose largest violation falls steadily (log scale) towards tol
    ends by it long before max_iter: the note projects that end, not the time
    to max_iter ("at this pace the 13333 projections ... 11 min" for a run of
    40 s used to be said); a run that stalls short of tol is still said, with
    both estimates."""
    clock = iter(0.01 * np.arange(100_000))
    monkeypatch.setattr(slow_runs, "clock", lambda: next(clock))
    tol = 1e-4

    def steady(done):  # 1 -> tol in 3000 projections (30 s at 0.01 s each)
        return max(tol, 10.0 ** (-4 * done / 2900))

    note = definiteboost_projections.SlowRunNote(ChosenCount(60_000), 90_000, tol)
    with _no_warning():
        for done in range(1, 2901):
            note(done, steady(done))
    # without violations (or for a run that stalls) the end is max_iter's
    note = definiteboost_projections.SlowRunNote(ChosenCount(60_000), 90_000)
    with pytest.warns(UserWarning, match=r"60000 projections .* take about 10 min if the run"):
        for done in range(1, 500):
            note(done)
    note = definiteboost_projections.SlowRunNote(ChosenCount(60_000), 90_000, tol)
    with pytest.warns(UserWarning, match=r"take about 10 min; the largest violation has come "
                                         r"25 % of the way to tol \(log scale\), and at this "
                                         r"pace reaches it in about"):
        for done in range(1, 5000):
            note(done, max(0.1, steady(done)))  # stalls at a quarter of the way


class _no_warning:
    def __enter__(self):
        import warnings

        self.caught = warnings.catch_warnings(record=True)
        self.records = self.caught.__enter__()
        warnings.simplefilter("always")

    def __exit__(self, *exc):
        self.caught.__exit__(*exc)
        assert not [str(w.message) for w in self.records]
        return False


def test_a_budget_spreads_the_ties_over_the_objects(monkeypatch):
    """Under I / d every similar pair is equally violated; the table's order
    (canonical: pairs of object 0 first) made a run stopped by the budget
    move only the first objects. Under a budget the ties go in a fixed
    scrambled order (the same for the same data), and the run returns its
    last iterate."""
    from megkernel._solvers import definiteboost_rules as rules
    from megkernel._solvers.definiteboost_rules import canonical_table

    d = 60
    monkeypatch.setattr(definiteboost_projections, "_SCAN_ALWAYS_UP_TO", 0)
    monkeypatch.setattr(definiteboost_lazy, "LAZY_FROM", 50)  # the lazy run's stale ties
    monkeypatch.setattr(rules, "AUTO_BUDGET", 30 * d)
    monkeypatch.setattr(rules, "MIN_AUTO_MAX_ITER", 30)
    pairs, signs = _problem(d, 600, seed=2)
    pairs, signs, _ = canonical_table(np.sort(pairs, axis=1), signs)
    budget = rules.auto_max_iter(len(pairs), d)
    assert budget == 30 and budget.reason
    runs = []
    for max_iter in (budget, 30):
        state = ExponentState.from_prior(np.eye(d) / d)
        log = fit_pair_constraints(state, pairs, signs, max_iter=max_iter, warn=False)
        assert log["n_iter"] == 30
        runs.append((log, state))
    (budgeted, state), (plain, _) = runs
    first_objects = pairs[budgeted["constraint"], 0]
    assert first_objects.max() > 3 * d / 4  # spread over the objects
    assert pairs[plain["constraint"], 0].max() < d / 2  # the table's order: the first ones
    assert budgeted["keep"] == "last" and plain["keep"] == "best"
    assert np.array_equal(budgeted["kept"], np.sort(budgeted["kept"]))
    # the same data, the same answer
    again = ExponentState.from_prior(np.eye(d) / d)
    fit_pair_constraints(again, pairs, signs, max_iter=budget, warn=False)
    assert np.array_equal(again.exponent, state.exponent)

