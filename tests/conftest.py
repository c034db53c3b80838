"""Shared test configuration, helpers and the list of public estimators.

Plain helpers are imported by the test modules (``from conftest import
sq_dist``: pytest puts ``tests/`` on ``sys.path`` for its ``conftest.py``);
``assert_unchanged_on_error`` is also a fixture. ``ESTIMATORS`` holds one
small, quickly fitted case per public estimator (metric-learn's
``pairs_learners`` pattern): ``tests/test_contracts.py`` checks the
contracts every estimator shares over it.
"""

import pickle
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pytest
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.neighbors import KNeighborsClassifier
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from megkernel import (
    DefiniteBoostKernel,
    DefiniteBoostMetric,
    DefiniteBoostPairMetric,
    KernelDistances,
    KernelKNeighborsClassifier,
    MEGKernelRegressor,
    MEGMetric,
    MEGPairMetric,
    NoImprovementWarning,
)
from megkernel.objects import KernelLearnerMixin

# -- pytest configuration ----------------------------------------------------------


@pytest.fixture(autouse=True, scope="session")
def _single_threaded_blas():
    """The tests' matrices are small: threaded BLAS only adds contention."""
    with threadpool_limits(limits=1):
        yield


@pytest.fixture(autouse=True)
def _seeded_global_generator():
    """Learners left at ``random_state=None`` draw their held-out pairs from
    NumPy's global generator. Seeding it per test makes a test's outcome
    independent of which tests ran before it: on small tables an occasional
    held-out draw makes a kernel lose to its prior, and the warning that says
    so is an error under the suite's filters."""
    # the legacy global generator is the one check_random_state(None) uses
    state = np.random.get_state()  # noqa: NPY002
    np.random.seed(0)  # noqa: NPY002
    yield
    np.random.set_state(state)  # noqa: NPY002


def _expected_failure(item, call):
    """An exception in a test marked ``xfail`` (unconditionally, with no
    ``raises`` or a matching one), which pytest reports as xfailed."""
    if call.when != "call" or call.excinfo is None or item.config.getoption("runxfail"):
        return False
    marker = item.get_closest_marker("xfail")
    if marker is None:
        return False
    conditions = list(marker.args) + ([marker.kwargs["condition"]]
                                      if "condition" in marker.kwargs else [])
    if not all(condition is True for condition in conditions):
        return False
    if not marker.kwargs.get("run", True):
        return False
    raises = marker.kwargs.get("raises")
    return raises is None or call.excinfo.errisinstance(raises)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Expected failures get a one-line report instead of a formatted traceback.

    An xfailed test's traceback is never shown, but pytest formats it anyway,
    parsing the source of every frame: for scikit-learn's expected estimator
    check failures (deep in its long ``estimator_checks.py``) that was most of
    the suite's run time. Failures, xpasses and ``--runxfail`` are unchanged.
    """
    if not _expected_failure(item, call):
        return (yield)
    item.repr_failure = lambda excinfo, style=None: excinfo.exconly()
    try:
        return (yield)
    finally:
        del item.repr_failure


# -- a failed call changes nothing -------------------------------------------------


@contextmanager
def unchanged_on_error(model, exception=ValueError, match=None):
    """Expect ``exception`` from the block and ``model`` to pickle to the same bytes.

    The bytes are taken on entry: set parameters before the block. Yields
    pytest's ``ExceptionInfo``.
    """
    before = pickle.dumps(model)
    with pytest.raises(exception, match=match) as info:
        yield info
    assert pickle.dumps(model) == before, (
        f"a failed call ({info.typename}: {info.value}) changed the {type(model).__name__}")


@pytest.fixture
def assert_unchanged_on_error():
    """:func:`unchanged_on_error`: ``with assert_unchanged_on_error(model, ValueError): ...``."""
    return unchanged_on_error


def quietly(func, *args, category=Warning, **kwargs):
    """``func(*args, **kwargs)`` with warnings of ``category`` ignored."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category)
        return func(*args, **kwargs)


def standardised_halves(X, y, seed=0):
    """A stratified 50/50 split standardised on its training half, and the
    held-out 1-NN accuracy of a fitted metric's embedding (``held_out(model)``)."""
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.5, stratify=y,
                                                        random_state=seed)
    scaler = StandardScaler().fit(X_train)
    X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)

    def held_out(model):
        knn = KNeighborsClassifier(1).fit(model.transform(X_train), y_train)
        return knn.score(model.transform(X_test), y_test)

    return X_train, X_test, y_train, y_test, held_out


# -- random kernels, matrices and pairs --------------------------------------------


def sq_dist(K, pairs):
    """Squared distances ``K[a, a] + K[b, b] - 2 K[a, b]`` of the pairs ``(a, b)``."""
    a, b = pairs[:, 0], pairs[:, 1]
    return K[a, a] + K[b, b] - 2 * K[a, b]


def low_rank_kernel(d, rank, seed, *, positive=True):
    """A random PSD kernel of the given rank and trace one: ``F F^T``, ``F`` of
    shape ``(d, rank)`` uniform on [0, 1) (positive entries) or standard normal."""
    rng = np.random.default_rng(seed)
    F = rng.uniform(0, 1, size=(d, rank)) if positive else rng.normal(size=(d, rank))
    K = F @ F.T
    return K / np.trace(K)


class FixedKernelLearner(KernelLearnerMixin, RegressorMixin, BaseEstimator):
    """A 'learner' of distances returning a given kernel (the identity by
    default: every pair equally far apart, a kernel that knows nothing)."""

    def __init__(self, objects=None, kernel=None):
        self.objects = objects
        self.kernel = kernel

    def fit(self, pairs, targets):
        self.objects_ = np.asarray(self.objects, dtype=object)
        self.kernel_ = (np.eye(len(self.objects_)) if self.kernel is None
                        else np.asarray(self.kernel, dtype=float))
        return self


def new_object_pairs(table, new):
    """The rows of a pair table with exactly one object in ``new``, as
    ``new_pairs`` of ``KernelDistances``: columns ``new`` and ``known``."""
    across = table[table["a"].isin(new) ^ table["b"].isin(new)]
    first_new = across["a"].isin(new)
    pairs = pd.DataFrame({"new": np.where(first_new, across["a"], across["b"]),
                          "known": np.where(first_new, across["b"], across["a"])})
    return across, pairs


def clustered_pair_table(n=40, seed=0, fraction=0.5, *, spread, separation, clusters=4, dim=3):
    """Points in ``clusters`` clusters (``spread`` around corners ``separation``
    apart, in ``dim <= clusters`` dimensions) and a ``fraction`` of their
    squared distances as a pair table of string ids.

    Returns ``ids``, ``labels``, ``points`` and the table (columns ``a``,
    ``b``, ``sq``)."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % clusters
    points = (rng.normal(size=(n, dim)) * spread
              + separation * np.eye(clusters)[labels][:, :dim])
    ids = np.array([f"s{i:03d}" for i in range(n)], dtype=object)
    sq = ((points[:, None] - points[None]) ** 2).sum(-1)
    a, b = np.triu_indices(n, 1)
    keep = rng.random(len(a)) < fraction
    table = pd.DataFrame({"a": ids[a[keep]], "b": ids[b[keep]], "sq": sq[a[keep], b[keep]]})
    return ids, labels, points, table


def pair_trials(d, n, *, rank, seed=0):
    """``n`` trials ``(a, b, y)`` of distinct objects of a random trace-one
    kernel of the given rank (``F F^T``, ``F`` standard normal), ``y`` their
    squared distances under it."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((d, rank))
    K = X @ X.T / np.trace(X @ X.T)
    a = rng.integers(0, d, n)
    b = (a + rng.integers(1, d, n)) % d
    return a, b, K[a, a] + K[b, b] - 2 * K[a, b]


def random_spd(d, seed, *, rank=None, ridge=0.1, trace=None):
    """A random symmetric PSD matrix ``F F^T`` (``F`` standard normal, ``rank``
    columns), plus ``ridge * I`` when of full rank (positive definite), scaled
    to ``trace`` if given."""
    rng = np.random.default_rng(seed)
    F = rng.normal(size=(d, d if rank is None else rank))
    M = F @ F.T
    if rank is None:
        M += ridge * np.eye(d)
    M = 0.5 * (M + M.T)
    return M if trace is None else M / (np.trace(M) / trace)


def random_pairs(d, n, seed, *, distinct=True):
    """``n`` random pairs of indices below ``d``; ``distinct``: none with itself."""
    pairs = np.random.default_rng(seed).integers(0, d, size=(n, 2))
    if distinct:
        same = pairs[:, 0] == pairs[:, 1]
        pairs[same, 1] = (pairs[same, 0] + 1) % d
    return pairs


# -- the public estimators, each with a small fit ----------------------------------


class Arguments:
    """Positional and keyword arguments of a call, for :class:`EstimatorCase`."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


#: What the small cases below rightly say, ignored by :func:`call` (category,
#: start of the message): the deprecated aliases every case calls, the short
#: batch fit's stop, and the metric learners' verdicts and dropped pairs on 30
#: random points. Anything else a case's call warns fails the test.
CASE_NOTES = [
    (FutureWarning, r"(pair_distances|score_pairs) is deprecated"),
    (ConvergenceWarning, r"MEGKernelRegressor: the batch fit stopped at max_iter=20 "),
    (NoImprovementWarning, r"\w+Metric: no validated gain over the Euclidean metric"),
    (UserWarning, r"Dropped \d+ of \d+ constraints: dissimilar pairs that can never reach"),
]


def call(model, method, args):
    """``model.method(*args)`` (``args`` a tuple or :class:`Arguments`), with
    the :data:`CASE_NOTES` ignored."""
    kwargs = {}
    if isinstance(args, Arguments):
        args, kwargs = args.args, args.kwargs
    with warnings.catch_warnings():
        for category, message in CASE_NOTES:
            warnings.filterwarnings("ignore", message, category)
        return getattr(model, method)(*args, **kwargs)


@dataclass
class EstimatorCase:
    """A public estimator with a small valid fit and the calls it answers.

    Parameters
    ----------
    name : str
        The test id.
    make : callable
        ``make()`` gives a new unfitted instance.
    fit : list of (str, tuple)
        The fitting calls, in order (``fit`` first).
    calls : dict
        Every public method that uses a fit, with valid arguments (a tuple or
        :class:`Arguments`); ``updates`` name those that change the fitted
        model.
    bad : dict
        Calls with bad input, each to raise ``ValueError``: fitting methods
        (refused by an unfitted and a fitted model) and methods using a fit.
    """

    name: str
    make: object
    fit: list
    calls: dict
    bad: dict
    updates: frozenset = field(default_factory=frozenset)

    def fitted(self):
        """A new instance, fitted (notes about the small data ignored)."""
        return self.fit_again(self.make())

    def fit_again(self, model):
        """``model`` after the case's fitting calls."""
        for method, args in self.fit:
            call(model, method, args)
        return model

    def __repr__(self):
        return self.name


def _with(array, index, value):
    array = np.array(array, dtype=float)
    array[index] = value
    return array


def _meg_regressor_case():
    pairs = random_pairs(8, 60, 0, distinct=False)
    y = sq_dist(low_rank_kernel(8, 3, 0), pairs)
    return EstimatorCase(
        "MEGKernelRegressor",
        lambda: MEGKernelRegressor(n_objects=8, early_stopping=False, max_iter=20,
                                   random_state=0),
        fit=[("fit", (pairs, y))],
        calls={"predict": (pairs,), "score": (pairs, y), "kernel_entries": ([0, 1], [2])},
        bad={"fit": (pairs, _with(y, 3, np.inf)),
             "partial_fit": (_with(pairs, (2, 1), -1), y),
             "predict": (_with(pairs, (0, 0), 8),),
             "score": (pairs, y[:-1]),
             "kernel_entries": ([0, 8],)})


def _definiteboost_kernel_case():
    K = low_rank_kernel(12, 3, 0)
    pairs = np.column_stack(np.triu_indices(12, 1))
    dist = sq_dist(K, pairs)
    low, high = np.quantile(dist, [0.2, 0.8])
    keep = (dist < low) | (dist > high)
    pairs, y = pairs[keep], np.where(dist[keep] < low, 1, -1)
    return EstimatorCase(
        "DefiniteBoostKernel",
        lambda: DefiniteBoostKernel(n_objects=12, gamma=low, gamma_dissimilar=high,
                                    max_iter=100, validation_fraction=None),
        fit=[("fit", (pairs, y))],
        calls={"predict": (pairs,), "decision_function": (pairs,), "score": (pairs, y),
               "pair_sq_distances": (pairs,), "pair_distances": (pairs,),
               "kernel_entries": ([0, 1], [2])},
        bad={"fit": (pairs, np.where(y > 0, 1, 2)),
             "predict": (_with(pairs, (0, 0), np.nan),),
             "decision_function": (pairs[:, :1],),
             "score": (pairs, y[:-1]),
             "pair_sq_distances": (_with(pairs, (0, 1), 12),),
             "pair_distances": (_with(pairs, (0, 1), -1),),
             "kernel_entries": ([0, 12],)})


def _points(n=30, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 3
    X = rng.normal(size=(n, 3)) + 3.0 * np.eye(3)[labels]
    pairs = random_pairs(n, 40, seed)
    signs = np.where(labels[pairs[:, 0]] == labels[pairs[:, 1]], 1, -1)
    return X, labels, pairs, signs


def _metric_case(Metric, **params):
    X, labels, pairs, signs = _points()
    fit = [("fit", (X, labels))]
    calls = {"transform": (X,), "get_feature_names_out": (), "get_mahalanobis_matrix": (),
             "pair_sq_distances": (X, pairs), "pair_distances": (X, pairs),
             "get_metric": (), "pair_distance": (X[pairs],), "pair_score": (X[pairs],),
             "score_pairs": (X[pairs],)}
    bad = {"fit": (_with(X, (4, 1), np.inf), labels),
           "fit_pairs": (X, pairs, signs[:-1]),
           "transform": (X[:, :2],),
           "pair_distance": (X,),
           "pair_score": (X[pairs][:, :, :2],),
           "pair_sq_distances": (X, pairs + len(X)),
           "pair_distances": (X, pairs[:, :1])}
    if hasattr(Metric, "partial_fit"):
        stream = X[pairs[:10]]
        fit.append(("partial_fit", (stream, signs[:10])))
        calls["online_bound"] = (stream, signs[:10])
        bad["partial_fit"] = (_with(stream, (1, 0, 2), np.nan), signs[:10])
        bad["online_bound"] = (stream[:5], signs[:5])
    return EstimatorCase(Metric.__name__, lambda: Metric(random_state=0, **params),
                         fit=fit, calls=calls, bad=bad)


def _pair_metric_case(Metric, **params):
    X, _, pairs, signs = _points()
    pairs_of_points = X[pairs]
    fit = [("fit", (pairs_of_points, signs))]
    calls = {"transform": (X,), "get_feature_names_out": (), "get_mahalanobis_matrix": (),
             "pair_sq_distances": (X, pairs), "pair_distances": (X, pairs),
             "pair_score": (pairs_of_points,), "decision_function": (pairs_of_points,),
             "predict": (pairs_of_points,), "score": (pairs_of_points, signs),
             "calibrate_threshold": (pairs_of_points, signs),
             "get_metric": (), "pair_distance": (pairs_of_points,),
             "score_pairs": (pairs_of_points,)}
    bad = {"fit": (pairs_of_points, np.where(signs > 0, 1, 2)),
           "fit_pairs": (X, pairs, signs[:-1]),
           "transform": (_with(X, (0, 0), np.nan),),
           "pair_score": (X,),
           "decision_function": (pairs_of_points[:, :, :2],),
           "predict": (_with(pairs_of_points, (0, 1, 1), np.inf),),
           "score": (pairs_of_points, signs[:-1]),
           "calibrate_threshold": (pairs_of_points, signs * 2),
           "pair_distance": (X,),
           "pair_sq_distances": (X, pairs + len(X)),
           "pair_distances": (X, pairs[:, :1])}
    if hasattr(Metric, "partial_fit"):
        fit.append(("partial_fit", (pairs_of_points[:10], signs[:10])))
        calls["online_bound"] = (pairs_of_points[:10], signs[:10])
        bad["partial_fit"] = (_with(pairs_of_points, (1, 0, 2), np.nan), signs)
        bad["online_bound"] = (pairs_of_points[:5], signs[:5])
    return EstimatorCase(Metric.__name__, lambda: Metric(random_state=0, **params),
                         fit=fit, calls=calls, bad=bad,
                         updates=frozenset({"calibrate_threshold"}))


def _knn_case():
    X, labels, _, _ = _points()
    train, test = np.arange(0, 30, 2), np.arange(1, 30, 2)
    K = X @ X.T
    K_test, diagonal = K[np.ix_(test, train)], np.diag(K)[test]
    return EstimatorCase(
        "KernelKNeighborsClassifier",
        lambda: KernelKNeighborsClassifier(n_neighbors=3),
        fit=[("fit", (K[np.ix_(train, train)], labels[train]))],
        calls={"predict": Arguments(K_test, test_diagonal=diagonal),
               "predict_proba": Arguments(K_test, test_diagonal=diagonal),
               "score": (K_test, labels[test])},
        bad={"fit": (_with(K[np.ix_(train, train)], (1, 2), np.nan), labels[train]),
             "predict": (K_test[:, :-1],),
             "predict_proba": Arguments(K_test, test_diagonal=diagonal[:-1]),
             "score": (K_test, labels[test][:-1])})


def _kernel_distances_case():
    K = low_rank_kernel(6, 3, 0) + 0.1 * np.eye(6)
    ids = ["a", "b", "c", "d", "e", "f"]
    return EstimatorCase(
        "KernelDistances", lambda: KernelDistances(kernel=K, objects=ids),
        fit=[("fit", (ids[:4],))],
        calls={"transform": (ids[3:],), "get_feature_names_out": ()},
        bad={"fit": (["a", "z"],), "transform": (["b", None],)})


def _kernel_distances_learner_case():
    pairs = random_pairs(6, 30, 1)
    y = sq_dist(low_rank_kernel(6, 2, 1), pairs)
    return EstimatorCase(
        "KernelDistances-learner",
        lambda: KernelDistances(learner=MEGKernelRegressor(solver="online", n_objects=6),
                                pairs=pairs, targets=y, given_squared=True),
        fit=[("fit", ([0, 1, 2],))],
        calls={"transform": ([4, 5],), "get_feature_names_out": ()},
        bad={"fit": ([0, 6],), "transform": ([-1],)})


#: One case per public estimator of ``megkernel`` (``tests/test_contracts.py``
#: checks that none is missing).
ESTIMATORS = [
    _meg_regressor_case(),
    _definiteboost_kernel_case(),
    _metric_case(MEGMetric, n_constraints=20),
    _metric_case(DefiniteBoostMetric, n_constraints=20, max_iter=200),
    _pair_metric_case(MEGPairMetric),
    _pair_metric_case(DefiniteBoostPairMetric, max_iter=50),
    _knn_case(),
    _kernel_distances_case(),
    _kernel_distances_learner_case(),
]
