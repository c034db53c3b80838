"""User-facing warnings point at the user's line (this file), not at
``sklearn/base.py`` (the ``_fit_context`` wrapper) or at megkernel itself."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from megkernel import (
    DefiniteBoostKernel,
    DefiniteBoostMetric,
    MEGMetric,
    definiteboost,
    definiteboost_pairs,
    draw_pairs,
)

CHAIN = np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [0, 5], [1, 4]])
CHAIN_SIGNS = np.array([1, 1, 1, 1, 1, 1, -1])


def _points_here(record, category, match):
    """The warnings of ``category`` whose message contains ``match`` were
    attributed to this file."""
    found = [w for w in record if issubclass(w.category, category) and match in str(w.message)]
    assert found, [str(w.message) for w in record]
    assert [w.filename for w in found] == [__file__] * len(found)


def _metric_data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, size=n)
    X = rng.normal(size=(n, 5)) + 1.5 * labels[:, None] * np.eye(5)[0]
    return X, labels


# -- DefiniteBoostKernel --------------------------------------------------------

def test_estimator_non_convergence_points_at_the_caller():
    # (validation_fraction=None: 7 pairs are too few to hold any out, which would warn too)
    model = DefiniteBoostKernel(n_objects=6, max_iter=3, validation_fraction=None)
    with pytest.warns(ConvergenceWarning, match="did not converge") as record:
        model.fit(CHAIN, CHAIN_SIGNS)
    _points_here(record, ConvergenceWarning, "did not converge")


def test_estimator_infeasibility_points_at_the_caller():
    model = DefiniteBoostKernel(n_objects=4, gamma=0.01, gamma_dissimilar=1.0,
                                max_iter=100_000, validation_fraction=None)
    with pytest.warns(ConvergenceWarning, match="infeasible") as record:
        model.fit(np.array([[0, 1], [0, 1]]), np.array([1, -1]))
    _points_here(record, ConvergenceWarning, "infeasible")


def test_estimator_dropped_constraints_point_at_the_caller():
    # low-rank prior: objects 0 and 1 coincide in its range, so the
    # dissimilar pair (0, 1) can never hold
    factor = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    model = DefiniteBoostKernel(init_factor=factor, validation_fraction=None)
    with pytest.warns(UserWarning, match="Dropped") as record:
        model.fit(np.array([[0, 1], [2, 3], [0, 2]]), np.array([-1, 1, -1]))
    assert list(model.dropped_constraints_) == [0]
    _points_here(record, UserWarning, "Dropped")


# -- the solver functions -------------------------------------------------------

def test_definiteboost_pairs_non_convergence_points_at_the_caller():
    with pytest.warns(ConvergenceWarning, match="did not converge") as record:
        definiteboost_pairs(CHAIN, CHAIN_SIGNS, 0.05, n_objects=6, max_iter=3)
    _points_here(record, ConvergenceWarning, "did not converge")


def test_definiteboost_infeasibility_points_at_the_caller():
    Cs = np.array([np.diag([1.0, -1.0]), np.diag([-1.0, 1.0]) + 0.5 * np.eye(2)])
    with pytest.warns(ConvergenceWarning, match="infeasible") as record:
        definiteboost(Cs, np.eye(2) / 2, max_iter=1_000_000)
    _points_here(record, ConvergenceWarning, "infeasible")


# -- the metric learners --------------------------------------------------------

def test_draw_pairs_shortage_points_at_the_caller():
    with pytest.warns(UserWarning, match="distinct") as record:
        draw_pairs(np.array([0, 0, 1, 1]), 5, random_state=0)
    _points_here(record, UserWarning, "distinct")


# 4 points show no gain of a learned metric, which the fit's verdict says: not the subject here
@pytest.mark.filterwarnings(
    "ignore:MEGMetric. no validated gain over the Euclidean metric:megkernel.NoImprovementWarning")
def test_draw_pairs_shortage_inside_fit_points_at_the_caller():
    X = np.random.default_rng(0).normal(size=(4, 3))
    with pytest.warns(UserWarning, match="distinct") as record:
        MEGMetric(n_constraints=5, random_state=0).fit(X, np.array([0, 0, 1, 1]))
    _points_here(record, UserWarning, "distinct")


# the verdict on 6 points is not the subject here
@pytest.mark.filterwarnings("ignore::megkernel.NoImprovementWarning")
@pytest.mark.parametrize("Metric", [MEGMetric, DefiniteBoostMetric])
def test_a_shortage_of_pairs_at_the_default_count_says_whose_count_it_is(Metric):
    """n_constraints=None draws 20 n_classes^2 pairs of each kind: where fewer
    exist, the warning said '(asked for 80)' of a number nobody asked for."""
    X = np.random.default_rng(0).normal(size=(6, 3))
    labels = np.array([0, 0, 0, 1, 1, 1])
    with pytest.warns(UserWarning, match="distinct") as record:
        Metric(from_labels="random", random_state=0).fit(X, labels)
    said = [str(w.message) for w in record if "distinct" in str(w.message)]
    assert said and not any("asked for" in message for message in said), said
    assert all("n_constraints=None draws 20 * n_classes**2 = 80" in message
               for message in said), said
    _points_here(record, UserWarning, "distinct")


def test_meg_metric_worse_than_prior_points_at_the_caller():
    X, labels = _metric_data()
    pairs, pair_labels = draw_pairs(labels, 40, random_state=1)
    metric = MEGMetric(gamma=1.0, gamma_dissimilar=1.0, learning_rate=1e6, n_epochs=1,
                       loss="square",
                       random_state=0)
    with pytest.warns(UserWarning, match="worse than its prior") as record:
        metric.fit_pairs(X, pairs, -pair_labels)
    _points_here(record, UserWarning, "worse than its prior")


def _hard_infeasible_metric_fit():
    X, labels = _metric_data()
    pairs, pair_labels = draw_pairs(labels, 40, random_state=1)
    # the Euclidean prior (not one learned from these inverted pairs): the
    # projections then meet the pairs worse than it
    metric = DefiniteBoostMetric(slack=None, gamma=1.0, gamma_dissimilar=1.0, max_iter=50,
                                 init="euclidean", random_state=0)
    with pytest.warns(Warning) as record:
        metric.fit_pairs(X, pairs, -pair_labels)
    return record


def test_definiteboost_metric_worse_than_prior_points_at_the_caller():
    record = _hard_infeasible_metric_fit()
    _points_here(record, UserWarning, "worse than its prior")


def test_definiteboost_metric_infeasibility_points_at_the_caller():
    record = _hard_infeasible_metric_fit()
    _points_here(record, ConvergenceWarning, "infeasible")


# the verdict on these thresholds (no validated gain, or a gain within noise)
# is not the subject here
@pytest.mark.filterwarnings("ignore:DefiniteBoostMetric. (no validated gain|the learned metric's"
                            " held-out):megkernel.NoImprovementWarning")
def test_definiteboost_metric_dropped_constraints_point_at_the_caller():
    X, labels = _metric_data()
    pairs, pair_labels = draw_pairs(labels, 40, random_state=1)
    metric = DefiniteBoostMetric(gamma=0.5, gamma_dissimilar=30.0, random_state=0)
    with pytest.warns(UserWarning, match="Dropped") as record:
        metric.fit_pairs(X, pairs, pair_labels)
    _points_here(record, UserWarning, "Dropped")


def test_a_tie_at_the_best_possible_score_is_said_as_such():
    """Issue 19: DefiniteBoost's verdict warned "no better than its prior ...
    check the units" when both held-out AUCs were 1: nothing could show a gain.
    A tie at the ceiling now says so; a tie below it, or a loss, still points
    at the units."""
    from megkernel._warnings import NoImprovementWarning, warn_if_not_better

    with pytest.warns(NoImprovementWarning, match="no gain can show") as record:
        assert not warn_if_not_better("L", 1.0, 1.0, what="AUC", best_possible=1.0)
    assert "units" not in str(record[0].message)
    for score, prior in ((0.9, 0.9), (0.8, 0.9), (0.9, 1.0)):
        with pytest.warns(NoImprovementWarning, match="check the units"):
            assert not warn_if_not_better("L", score, prior, what="AUC", best_possible=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_if_not_better("L", 0.95, 0.9, what="AUC", best_possible=1.0)


def test_the_suite_runs_with_warnings_as_errors(pytestconfig):
    """Every warning fails the test it arises in (pyproject's filterwarnings):
    an expected one is asserted or ignored where it arises. An ignore listed
    there must name the message it ignores, never a whole category."""
    filters = pytestconfig.getini("filterwarnings")
    assert filters[0] == "error", filters
    for entry in filters[1:]:
        action, message = (entry.split(":") + [""])[:2]
        assert action == "ignore" and message.strip(), entry
    with pytest.raises(UserWarning, match="an unasserted warning"):
        warnings.warn("an unasserted warning", UserWarning, stacklevel=1)


def _weak_online_search(filter_action, monkeypatch):
    """Six fits (five splits and the refit) that each warn of the same weak
    on-line gain with their own figures, from one line of this file."""
    from sklearn.model_selection import GridSearchCV, KFold

    from megkernel import MEGKernelRegressor, _warnings
    from megkernel.datasets import distance_triples, load_wine_kernel

    monkeypatch.setattr(_warnings, "_WARNED", {})
    wine = load_wine_kernel(20, random_state=0)
    pairs, y = distance_triples(wine.kernel, 400, random_state=0)
    search = GridSearchCV(MEGKernelRegressor(n_objects=20, solver="online", learning_rate=1e-4,
                                             trace=1.0), {"n_epochs": [1]}, cv=KFold(5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter(filter_action)
        search.fit(pairs, y)
    return [w for w in caught if "on-line trials" in str(w.message)
            or "recurs" in str(w.message)]


def test_a_search_shows_a_recurring_problem_once_in_full_and_once_as_recurring(monkeypatch):
    shown = _weak_online_search("default", monkeypatch)
    assert len(shown) == 2, [str(w.message) for w in shown]
    assert "predicted little better than the prior (R^2" in str(shown[0].message)
    assert str(shown[1].message).startswith(
        "MEGKernelRegressor: the problem warned above recurs in another fit from this line")
    assert [w.filename for w in shown] == [__file__] * 2


def test_an_always_filter_shows_every_fit_in_full(monkeypatch):
    shown = _weak_online_search("always", monkeypatch)
    assert len(shown) == 6
    assert all("predicted little better than the prior (R^2" in str(w.message) for w in shown)


def test_the_same_problem_from_another_line_is_shown_in_full(monkeypatch):
    from megkernel import _warnings

    monkeypatch.setattr(_warnings, "_WARNED", {})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(3):
            _warnings.warn_user("Learner: a problem (figure 1).")
        _warnings.warn_user("Learner: a problem (figure 2).")
    assert [str(w.message) for w in caught] == [
        "Learner: a problem (figure 1).",
        _warnings.recurring("Learner: a problem (figure 1)."),
        "Learner: a problem (figure 2).",   # another line of this file
    ]


def test_a_limit_error_in_a_search_is_said_at_the_top_too(monkeypatch):
    """scikit-learn shows a fit's error only at the end of its "All the N fits
    failed"; the limit is also a warning at the user's line, once in full."""
    from sklearn.model_selection import GridSearchCV

    from megkernel import MEGKernelRegressor, _warnings
    from megkernel.datasets import distance_triples, load_wine_kernel

    monkeypatch.setattr(_warnings, "_WARNED", {})
    wine = load_wine_kernel(20, random_state=0)
    pairs, y = distance_triples(wine.kernel, 300, random_state=0)
    search = GridSearchCV(MEGKernelRegressor(n_objects=20, solver="online"),
                          {"n_epochs": [2**42]}, cv=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        with pytest.raises(ValueError, match="All the 5 fits failed"):
            search.fit(pairs, y)
    said = [str(w.message) for w in caught if issubclass(w.category, UserWarning)
            and ("MAX_TRIALS" in str(w.message) or "recurs" in str(w.message))]
    assert len(said) == 2 and "lower n_epochs" in said[0], said
    assert said[1].startswith("megkernel (MAX_TRIALS): the problem warned above recurs")
    assert [w.filename for w in caught if "lower n_epochs" in str(w.message)] == [__file__]


def test_where_warnings_are_errors_a_limit_raises_its_value_error():
    from megkernel import MEGKernelRegressor

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="MAX_TRIALS"):
            MEGKernelRegressor(n_objects=4, solver="online", n_epochs=2**42).fit(
                np.array([[0, 1], [1, 2]]), np.array([1.0, 1.0]))
