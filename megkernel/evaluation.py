"""Judging a kernel by nearest-neighbor accuracy on object labels.

Section 5 of Tsuda, Raetsch & Warmuth (2004) evaluates a kernel by the 1-NN
test error over 10 random 50/50 splits of the labeled objects.
:func:`nearest_neighbor_error` is that protocol as one call, built from
scikit-learn's ``ShuffleSplit`` and ``cross_val_score`` on
:class:`~megkernel.KernelKNeighborsClassifier`, and
:func:`make_knn_kernel_scorer` turns it into a ``scoring=`` callable for
hyper-parameter search of kernel learners.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
from sklearn.model_selection import ShuffleSplit, cross_val_score
from sklearn.utils._param_validation import Interval, validate_params

from ._numerics.spectral import check_symmetric
from ._pair_estimator import check_class_labels
from .neighbors import KernelKNeighborsClassifier

__all__ = ["KNNErrorResult", "nearest_neighbor_error", "make_knn_kernel_scorer"]


@dataclass(frozen=True)
class KNNErrorResult:
    """Outcome of :func:`nearest_neighbor_error`.

    A frozen record of the protocol's errors; each parameter is kept as the
    attribute of the same name.

    Parameters
    ----------
    errors : ndarray of shape (n_splits,)
        Test error (fraction misclassified) of each split.
    mean : float
        Mean test error over the splits.
    std : float
        Standard deviation of the per-split errors.

    See Also
    --------
    nearest_neighbor_error : The protocol that returns it.

    Examples
    --------
    >>> import numpy as np
    >>> from megkernel.evaluation import nearest_neighbor_error
    >>> labels = np.repeat([0, 1], 5)
    >>> K = np.eye(10) + np.equal.outer(labels, labels)
    >>> result = nearest_neighbor_error(K, labels, n_splits=3, random_state=0)
    >>> result.errors.shape, float(result.mean)
    ((3,), 0.0)
    """

    errors: np.ndarray
    mean: float
    std: float


_PROTOCOL_CONSTRAINTS = {
    "n_splits": [Interval(Integral, 1, None, closed="left")],
    "test_size": [
        Interval(Real, 0, 1, closed="neither"),
        Interval(Integral, 1, None, closed="left"),
    ],
    "n_neighbors": [Interval(Integral, 1, None, closed="left")],
    "random_state": ["random_state"],
}


@validate_params(
    {"K": ["array-like"], "labels": ["array-like"], **_PROTOCOL_CONSTRAINTS},
    prefer_skip_nested_validation=True,
)
def nearest_neighbor_error(K, labels, *, n_splits=10, test_size=0.5,
                           n_neighbors=1, random_state=None):
    """Compute the k-NN test error of a kernel over random splits (the paper's protocol).

    Equivalent, by construction and exactly, to::

        1 - cross_val_score(
            KernelKNeighborsClassifier(n_neighbors=n_neighbors), K, labels,
            cv=ShuffleSplit(n_splits, test_size=test_size,
                            random_state=random_state))

    Parameters
    ----------
    K : array-like of shape (n_objects, n_objects)
        Symmetric kernel over the labeled objects.
    labels : array-like of shape (n_objects,)
        Class label of each object.
    n_splits : int, default=10
        Number of random train/test splits.
    test_size : float or int, default=0.5
        Test fraction (or count) of each split; the paper uses 50/50.
    n_neighbors : int, default=1
        Neighbors of the k-NN classifier; the paper uses 1.
    random_state : int, RandomState instance or None, default=None
        Seed of the splits; an int makes the result reproducible.

    Returns
    -------
    result : KNNErrorResult
        Per-split errors, their mean and standard deviation.
    """
    K = check_symmetric(K, name="K")
    labels = np.asarray(check_class_labels(labels, name="labels"))
    if labels.shape != (len(K),):
        raise ValueError(f"Found input variables with inconsistent numbers of samples: "
                         f"labels must have shape ({len(K)},), one per object of K, "
                         f"got {labels.shape}.")
    n_test = (math.ceil(test_size * len(K)) if isinstance(test_size, Real)
              and not isinstance(test_size, Integral) else int(test_size))
    n_train = len(K) - n_test
    if n_train < 1 or n_test < 1:
        raise ValueError(f"test_size={test_size} leaves {n_train} training and "
                         f"{n_test} test objects of {len(K)}: both need at least one.")
    if n_neighbors > n_train:
        raise ValueError(f"n_neighbors={n_neighbors} exceeds the {n_train} training "
                         f"objects of each split ({len(K)} objects, test_size={test_size}).")
    cv = ShuffleSplit(n_splits=n_splits, test_size=test_size,
                      random_state=random_state)
    accuracies = cross_val_score(
        KernelKNeighborsClassifier(n_neighbors=n_neighbors), K, labels, cv=cv,
        error_score="raise",
    )
    errors = 1.0 - accuracies
    return KNNErrorResult(errors=errors, mean=float(errors.mean()),
                          std=float(errors.std()))


class KNNKernelScorer:
    """Scorer: downstream k-NN accuracy of a fitted kernel learner's ``kernel_``.

    Build it with :func:`make_knn_kernel_scorer`. Calling
    ``scorer(estimator, X, y)`` returns ``1 - nearest_neighbor_error(
    estimator.kernel_, labels, ...).mean``. ``X`` and ``y`` (the held-out
    pairs and their targets in a search over pair learners) are not used: the
    kernel is judged only by how well it separates the labeled objects.
    """

    def __init__(self, labels, *, n_splits, test_size, n_neighbors, random_state):
        self.labels = labels
        self.n_splits = n_splits
        self.test_size = test_size
        self.n_neighbors = n_neighbors
        self.random_state = random_state

    def __call__(self, estimator, X=None, y=None):
        """Mean k-NN accuracy of ``estimator.kernel_`` on the object labels."""
        kernel = getattr(estimator, "kernel_", None)
        if kernel is None:
            raise ValueError(
                f"{type(estimator).__name__} has no fitted kernel_ attribute; the "
                "k-NN kernel scorer needs a fitted kernel learner."
            )
        if np.shape(kernel) != (len(self.labels),) * 2:
            raise ValueError(
                f"kernel_ has shape {np.shape(kernel)}, but there are "
                f"{len(self.labels)} object labels."
            )
        result = nearest_neighbor_error(
            kernel, self.labels, n_splits=self.n_splits, test_size=self.test_size,
            n_neighbors=self.n_neighbors, random_state=self.random_state,
        )
        return 1.0 - result.mean

    def __repr__(self):
        return (f"make_knn_kernel_scorer(labels=<{len(self.labels)} labels>, "
                f"n_splits={self.n_splits}, test_size={self.test_size}, "
                f"n_neighbors={self.n_neighbors}, random_state={self.random_state!r})")


@validate_params(
    {"labels": ["array-like"], **_PROTOCOL_CONSTRAINTS},
    prefer_skip_nested_validation=True,
)
def make_knn_kernel_scorer(labels, *, n_splits=10, test_size=0.5, n_neighbors=1,
                           random_state=0):
    """Make a ``scoring=`` callable: k-NN accuracy of the learned kernel.

    For hyper-parameter search (``GridSearchCV``, ``cross_validate``) of a
    kernel learner with a fitted ``kernel_`` attribute, a ``d x d`` kernel
    over all objects (such as :class:`~megkernel.MEGKernelRegressor` or
    :class:`~megkernel.DefiniteBoostKernel`). The score is the mean k-NN
    accuracy over random splits of the labeled objects
    (``1 - nearest_neighbor_error(...).mean``); greater is better.

    The scorer's ``X`` and ``y`` (the held-out pairs of the search) are
    ignored: the learner is fitted on the training pairs only and then judged
    on the object labels, which it never sees while fitting.

    Parameters
    ----------
    labels : array-like of shape (n_objects,)
        Class label of each object, in the kernel's order.
    n_splits : int, default=10
        Number of random splits of the objects; see
        :func:`nearest_neighbor_error`.
    test_size : float or int, default=0.5
        Test fraction (or count) of each split.
    n_neighbors : int, default=1
        Neighbors of the k-NN classifier.
    random_state : int, RandomState instance or None, default=0
        Seed of the object splits. Keep it fixed so that every candidate is
        judged on the same splits.

    Returns
    -------
    scorer : callable
        ``scorer(estimator, X, y) -> float``, picklable (works with
        ``n_jobs`` and joblib's Dask backend).
    """
    return KNNKernelScorer(
        np.asarray(labels), n_splits=n_splits, test_size=test_size,
        n_neighbors=n_neighbors, random_state=random_state,
    )
