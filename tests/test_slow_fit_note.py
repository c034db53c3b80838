"""A fit that will take long says so up front, without verbose, counting towards its tolerance.

The batch fit of MEGKernelRegressor (and DefiniteBoostKernel's prior from
distances, which is one) makes a d x d eigendecomposition per iteration: on a
survey table of 944 respondents it took 20 s CPU, over a minute of wall time
on loaded cores, without a word unless ``verbose``. Its note is the one of
DefiniteBoost's projections (``slow_runs.PaceEstimate``): an estimate from
the pace of the first iterations, to the sooner of ``max_iter`` and the
tolerance. The clock is a fake one (``slow_runs.clock``), so these tests
take the fit's real time, not the note's.
"""

import re
import warnings

import numpy as np
import pytest

from megkernel import DefiniteBoostKernel, MEGKernelRegressor
from megkernel._solvers import slow_runs
from megkernel._solvers.meg_batch import SlowFitNote


class _FakeClock:
    """``step`` seconds more at each reading."""

    def __init__(self, step):
        self.step, self.now = step, 0.0

    def __call__(self):
        self.now += self.step
        return self.now


def _table(d=40, n_pairs=400, seed=0):
    """Pairs of points in the plane and their squared distances (noisy)."""
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(d, 2))
    a, b = rng.integers(0, d, size=(2, n_pairs))
    keep = a != b
    a, b = a[keep], b[keep]
    sq = np.sum((points[a] - points[b]) ** 2, axis=1) * rng.uniform(0.8, 1.2, size=a.size)
    return np.column_stack([a, b]), sq


def _slow_notes(caught):
    return [str(w.message) for w in caught if "iterations of the batch fit" in str(w.message)]


def test_a_slow_batch_fit_says_so_up_front_without_verbose(monkeypatch):
    """At 10 s an iteration the note comes once the stopping rule's window
    (n_iter_no_change=5 iterations) has a mean gain to measure progress by:
    with the estimate to the tolerance (the share of the way the gain has
    come) and the remedies; the fit goes on and returns its kernel."""
    monkeypatch.setattr(slow_runs, "clock", _FakeClock(10.0))
    X, y = _table()
    model = MEGKernelRegressor(random_state=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(X, y)
    notes = _slow_notes(caught)
    assert len(notes) == 1, [str(w.message) for w in caught]
    assert re.match(r"MEGKernelRegressor: 6 iterations of the batch fit on 40 objects took "
                    r"60\.0 s \(10 s each\); at this pace its run on the training pairs "
                    r"reaches the tolerance in about \d+ (s|min) \(the loss's gain per "
                    r"iteration has come [\d.]+ % of the way down to tol, log scale\), and a "
                    r"refit on every pair follows\. To shorten it: a larger tol or a smaller "
                    r"max_iter\.$", notes[0]), notes[0]
    assert model.n_iter_ > 2 and np.all(np.isfinite(model.kernel_))


def test_a_quick_batch_fit_says_nothing(monkeypatch):
    """At 1 ms an iteration nothing is said, however long the run (the
    suite's warnings are errors: any note would fail the fit)."""
    monkeypatch.setattr(slow_runs, "clock", _FakeClock(0.001))
    X, y = _table()
    MEGKernelRegressor(random_state=0).fit(X, y)


def test_the_note_counts_towards_the_tolerance_not_max_iter(monkeypatch):
    """A run whose gain falls steadily (log scale) to the tolerance in 200
    iterations of 0.1 s ends in 20 s, though max_iter=1000 would take 100 s:
    nothing is said. The same run stalling at a quarter of the way is said,
    with its time to the tolerance; a run that max_iter stops first, with the
    time to max_iter, short of the tolerance."""
    monkeypatch.setattr(slow_runs, "clock", _FakeClock(0.1))
    goal = 1e-4

    def steady(iteration):
        return max(goal, 10.0 ** (-4 * iteration / 190))

    note = SlowFitNote("MEGKernelRegressor", 500, 1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for iteration in range(1, 201):
            note(iteration, steady(iteration), goal)
    note = SlowFitNote("MEGKernelRegressor", 500, 1000)
    with pytest.warns(UserWarning, match=r"reaches the tolerance in about \d+ s \(the "
                                         r"loss's gain per iteration has come 25 %"):
        for iteration in range(1, 400):
            note(iteration, max(0.1, steady(iteration)), goal)
    # so slow a fall that max_iter comes first: said as such, not as reaching tol
    note = SlowFitNote("MEGKernelRegressor", 500, 1000)
    with pytest.warns(UserWarning, match=r"stops at max_iter=1000 in about 100 s, short of "
                                         r"the tolerance \(the loss's gain per iteration has "
                                         r"come 0\.\d+ %"):
        for iteration in range(1, 400):
            note(iteration, 10.0 ** (-4 * iteration / 19000), goal)
    # no progress to measure: the estimate is to max_iter
    note = SlowFitNote("MEGKernelRegressor", 500, 1000)
    with pytest.warns(UserWarning, match=r"the 1000 iterations of max_iter take about 100 s "
                                         r"if the run does not converge first"):
        for iteration in range(1, 400):
            note(iteration, 1.0, goal)


def test_definiteboost_from_distances_names_its_prior_fit(monkeypatch):
    """DefiniteBoostKernel's prior from distances is MEG's batch fit: a slow
    one says so in the name of the estimator the user called."""
    monkeypatch.setattr(slow_runs, "clock", _FakeClock(10.0))
    X, y = _table(d=40, n_pairs=600)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DefiniteBoostKernel(random_state=0, y_kind="sq_distances").fit(X, y)
    notes = _slow_notes(caught)
    assert notes and all(n.startswith("DefiniteBoostKernel (its prior, MEG's fit of the "
                                      "distances): ") for n in notes), notes


def test_definiteboosts_prior_note_says_what_shortens_that_fit(monkeypatch):
    """DefiniteBoostKernel's tol and max_iter are its projections', not its
    prior fit's: the note names what does shorten that fit (a prior of one's
    own, from a quicker MEG fit), and that advice works."""
    monkeypatch.setattr(slow_runs, "clock", _FakeClock(10.0))
    X, y = _table(d=40, n_pairs=600)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DefiniteBoostKernel(random_state=0, y_kind="sq_distances").fit(X, y)
    notes = _slow_notes(caught)
    assert notes and all("a larger tol" not in n for n in notes), notes
    assert all(n.endswith("To shorten it: give DefiniteBoostKernel a prior of your own, "
                          "init=MEGKernelRegressor(tol=..., max_iter=...).fit(X, y).kernel_ "
                          "over the same objects, with squared=False where y holds plain "
                          "distances (y_kind='distances'); its own tol and max_iter are its "
                          "projections'.") for n in notes), notes
    monkeypatch.setattr(slow_runs, "clock", _FakeClock(0.001))
    prior = MEGKernelRegressor(tol=1e-2, random_state=0).fit(X, y).kernel_
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DefiniteBoostKernel(init=prior, random_state=0, y_kind="sq_distances").fit(X, y)
        # plain distances (y_kind="distances"): the advice's squared=False gives that prior
        plain = MEGKernelRegressor(tol=1e-2, random_state=0, squared=False).fit(
            X, np.sqrt(y)).kernel_
    assert np.all(np.isfinite(model.kernel_))
    np.testing.assert_allclose(plain, prior, rtol=1e-6, atol=1e-9 * np.abs(prior).max())
