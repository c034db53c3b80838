"""k-nearest-neighbor classification on a precomputed kernel.

A kernel ``K`` induces the feature-space distance
``d(i, j) = sqrt(K_ii + K_jj - 2 K_ij)``. :class:`KernelKNeighborsClassifier`
classifies with scikit-learn's ``KNeighborsClassifier(metric="precomputed")``
on these distances, and takes the kernel itself as input, so that it can
judge a learned kernel by neighbor accuracy as Section 5 of Tsuda, Raetsch &
Warmuth (2004) does.

**The rule for kernels from the user** (here and in :func:`kernel_to_distances`):
distances are computed on the kernel divided by a power of four near its
largest entry (exact in floating point, and neighbors do not depend on the
scale), so that any finite kernel gives finite distances, never NaN; and a
kernel that cannot be positive semidefinite (a clearly negative induced
squared distance or diagonal entry) is named in a ``UserWarning``, since its
"distances" are not those of any embedding.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.neighbors import KNeighborsClassifier
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ._numerics.spectral import (
    check_symmetric,
    induced_sq_distances,
    power_of_four_scale,
    warn_if_not_psd,
)
from ._pair_estimator import check_class_labels, unchanged_on_error

__all__ = ["KernelKNeighborsClassifier", "kernel_to_distances", "kernel_distances"]



def kernel_to_distances(K, *, squared=False):
    """Compute the distances between all objects of a kernel.

    The distance of objects ``i`` and ``j`` is ``sqrt(K_ii + K_jj - 2 K_ij)``.

    What scikit-learn's ``metric="precomputed"`` estimators take, so a
    learned kernel goes straight into them::

        D = kernel_to_distances(model.kernel_)
        KNeighborsClassifier(metric="precomputed").fit(D[train][:, train], y[train])
        ... .predict(D[test][:, train])

    Computed on ``K`` divided by a power of four near its largest entry and
    scaled back (exact), so that a kernel anywhere in the float range gives
    finite distances.

    Parameters
    ----------
    K : array-like of shape (n, n)
        Symmetric kernel; positive semidefinite for true distances. For an
        indefinite one a ``UserWarning`` says so, and negative squared
        distances are clipped at 0.
    squared : bool, default=False
        Return squared distances (a ``ValueError`` if one exceeds the float
        range, which the distances themselves never do).

    Returns
    -------
    D : ndarray of shape (n, n)
        Symmetric, zero diagonal.
    """
    K = check_symmetric(K, name="K")
    scale = power_of_four_scale(np.abs(K).max(initial=0.0))
    K = K / scale
    diagonal = np.diag(K)
    squared_distances = induced_sq_distances(K, diagonal, diagonal)
    warn_if_not_psd(K, diagonal, squared_distances, name="The kernel K")
    squared_distances = np.maximum(squared_distances, 0.0)
    np.fill_diagonal(squared_distances, 0.0)
    if not squared:
        return np.sqrt(squared_distances) * np.sqrt(scale)  # sqrt of a power of 4: exact
    largest = float(squared_distances.max(initial=0.0))
    if scale > 1.0 and largest > np.finfo(float).max / scale:
        raise ValueError(
            f"The largest squared distance of K, {largest:.6g} x {scale:.6g}, exceeds the "
            "float range; use squared=False (the distances are finite) or scale K down.")
    return squared_distances * scale


def kernel_distances(kernel_rows, row_diagonal, column_diagonal):
    """Feature-space distances induced by a kernel.

    ``d(i, j) = sqrt(max(K_ii + K_jj - 2 K_ij, 0))``; the clip at zero only
    removes round-off of (nearly) coinciding points.

    Parameters
    ----------
    kernel_rows : ndarray of shape (n_rows, n_columns)
        Kernel values ``K_ij`` between row objects ``i`` and column objects
        ``j``.
    row_diagonal : ndarray of shape (n_rows,)
        ``K_ii`` of the row objects.
    column_diagonal : ndarray of shape (n_columns,)
        ``K_jj`` of the column objects.

    Returns
    -------
    distances : ndarray of shape (n_rows, n_columns)
    """
    squared = induced_sq_distances(kernel_rows, row_diagonal, column_diagonal)
    return np.sqrt(np.maximum(squared, 0.0))


class KernelKNeighborsClassifier(ClassifierMixin, BaseEstimator):
    """Classifier of the k nearest neighbors on a precomputed kernel.

    ``fit`` takes the kernel between training objects, ``predict`` the
    kernel between test and training objects. Neighbors are those closest in
    the distance the kernel induces, ``d(i, j) = sqrt(K_ii + K_jj - 2 K_ij)``
    (see :func:`kernel_distances`); the neighbor search and the vote are
    scikit-learn's ``KNeighborsClassifier(metric="precomputed",
    algorithm="brute")``.

    The estimator is tagged ``pairwise``, so ``cross_val_score``,
    ``GridSearchCV`` and ``Pipeline`` hand it ``K[train][:, train]`` to fit and
    ``K[test][:, train]`` to predict.

    **The test diagonal.** Under that slicing the test objects' own values
    ``K_ii`` are not available. With ``weights="uniform"`` they are not
    needed: for a test object ``i``, ``K_ii`` is the same for every candidate
    neighbor ``j``, so ranking by ``K_jj - 2 K_ij`` (shifted per row to be
    non-negative) ranks exactly as the distances do, and the prediction equals
    scikit-learn's on the induced distance matrix. Ties are broken by
    scikit-learn in both cases (equal distances stay equal); only distances
    that differ by floating-point rounding alone may be ordered differently.
    Distance weights (``weights="distance"`` or a callable) need the actual
    distances, hence ``K_ii``: pass them as ``test_diagonal`` to ``predict``
    / ``predict_proba``; without them these methods raise a ``ValueError``.
    For cross-validation with distance weights, give scikit-learn's
    ``KNeighborsClassifier(metric="precomputed")`` the distance matrix of all
    objects instead (``kernel_distances(K, np.diag(K), np.diag(K))``).

    Parameters
    ----------
    n_neighbors : int, default=1
        Number of neighbors (the paper's protocol uses 1).
    weights : {"uniform", "distance"} or callable, default="uniform"
        Weight function of scikit-learn's ``KNeighborsClassifier``. Anything
        but ``"uniform"`` needs ``test_diagonal`` at prediction time.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Class labels.
    n_features_in_ : int
        Number of training objects (columns of the kernel).
    train_diagonal_ : ndarray of shape (n_features_in_,)
        ``K_jj`` of the training objects.
    kernel_scale_ : float
        Largest absolute entry of the training kernel; distances are
        computed on the kernel divided by it (the neighbors do not change).
    neighbors_ : sklearn.neighbors.KNeighborsClassifier
        The fitted neighbor search on the training distances.

    See Also
    --------
    megkernel.evaluation.nearest_neighbor_error : The paper's 1-NN protocol.

    Examples
    --------
    >>> import numpy as np
    >>> from megkernel import KernelKNeighborsClassifier
    >>> points = np.array([[0.0], [0.1], [1.0], [1.1]])
    >>> K = points @ points.T
    >>> clf = KernelKNeighborsClassifier().fit(K[:3][:, :3], [0, 0, 1])
    >>> clf.predict(K[3:][:, :3])
    array([1])
    """

    _parameter_constraints = {
        "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        "weights": [StrOptions({"uniform", "distance"}), callable],
    }

    def __init__(self, *, n_neighbors=1, weights="uniform"):
        self.n_neighbors = n_neighbors
        self.weights = weights

    def __sklearn_tags__(self):
        """Declare a precomputed kernel as input (``pairwise``)."""
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = True
        return tags

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit on the kernel between training objects.

        Parameters
        ----------
        X : array-like of shape (n_train, n_train)
            Symmetric kernel matrix of the training objects.
        y : array-like of shape (n_train,)
            Class labels, all of one kind (a missing label, or ``str`` next
            to a number, is refused naming its row).

        Returns
        -------
        self : KernelKNeighborsClassifier
            The fitted classifier.
        """
        with unchanged_on_error(self):
            check_class_labels(y)  # a missing label or a mix of kinds, named
            X, y = validate_data(self, X, y, dtype=np.float64)
            X = check_symmetric(X, name="Training kernel X")
            # neighbors do not change with the kernel's scale: work at largest
            # entry near 1, so kernels anywhere in the float range give finite
            # distances; a power of 4 scales them (and the distances) exactly
            scale = power_of_four_scale(np.abs(X).max())
            X = X / scale
            diagonal = np.diag(X).copy()
            squared = induced_sq_distances(X, diagonal, diagonal)
            warn_if_not_psd(X, diagonal, squared)
            distances = np.sqrt(np.maximum(squared, 0.0))
            neighbors = KNeighborsClassifier(
                n_neighbors=self.n_neighbors,
                weights=self.weights,
                algorithm="brute",
                metric="precomputed",
            ).fit(distances, y)
        self.kernel_scale_ = scale
        self.train_diagonal_ = diagonal * scale
        self.neighbors_ = neighbors
        self.classes_ = neighbors.classes_
        return self

    def predict(self, X, *, test_diagonal=None):
        """Predict class labels of test objects.

        Parameters
        ----------
        X : array-like of shape (n_test, n_train)
            Kernel between test objects (rows) and training objects.
        test_diagonal : array-like of shape (n_test,), default=None
            ``K_ii`` of the test objects. Needed for distance weights; with
            uniform weights it is optional and, if given, the exact
            distances are used.

        Returns
        -------
        y_pred : ndarray of shape (n_test,)
            Predicted class label of each test object (the majority, or
            weighted, vote of its neighbors).
        """
        distances = self._query_distances(X, test_diagonal)
        return self.neighbors_.predict(distances)

    def predict_proba(self, X, *, test_diagonal=None):
        """Class probabilities of test objects (neighbor vote shares).

        Parameters
        ----------
        X : array-like of shape (n_test, n_train)
            Kernel between test objects (rows) and training objects.
        test_diagonal : array-like of shape (n_test,), default=None
            ``K_ii`` of the test objects; see :meth:`predict`.

        Returns
        -------
        proba : ndarray of shape (n_test, n_classes)
            Columns ordered as ``classes_``.
        """
        distances = self._query_distances(X, test_diagonal)
        return self.neighbors_.predict_proba(distances)

    def _query_distances(self, X, test_diagonal):
        """Return what the neighbor search ranks.

        Distances, or a row-wise order-preserving substitute when ``K_ii`` is
        unknown.
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        if test_diagonal is not None:
            test_diagonal = self._check_test_diagonal(test_diagonal, len(X))
        # the training scale, unless the test kernel is so much larger that
        # its distances would overflow in it (a power of four again: exact)
        magnitude = max(np.abs(X).max(initial=0.0),
                        0.0 if test_diagonal is None else np.abs(test_diagonal).max())
        scale = self.kernel_scale_
        if magnitude > scale * 2.0**256:
            scale = power_of_four_scale(magnitude)
        X = X / scale
        if test_diagonal is not None:
            return kernel_distances(X, test_diagonal / scale, self.train_diagonal_ / scale)
        if self.weights != "uniform":
            raise ValueError(
                f"weights={self.weights!r} needs the distances themselves, which "
                "depend on the test objects' diagonal K_ii: pass test_diagonal, "
                "or use weights='uniform' (whose ranking does not need it). Under "
                "cross-validation (which hands over K[test][:, train] only), "
                "cross-validate object ids through megkernel.KernelDistances and "
                "scikit-learn's KNeighborsClassifier(metric='precomputed') instead."
            )
        ranking = self.train_diagonal_[None, :] / scale - 2.0 * X
        return ranking - ranking.min(axis=1, keepdims=True)

    @staticmethod
    def _check_test_diagonal(test_diagonal, n_test):
        test_diagonal = np.asarray(test_diagonal, dtype=float)
        if test_diagonal.shape != (n_test,):
            raise ValueError(
                f"test_diagonal must have shape ({n_test},), one K_ii per test "
                f"object, got shape {test_diagonal.shape}."
            )
        if not np.all(np.isfinite(test_diagonal)):
            raise ValueError("test_diagonal contains NaN or infinite entries.")
        return test_diagonal
