"""Object-level estimators: ``X`` holds object ids, the kernel comes from elsewhere.

:class:`KernelDistances` turns object ids into their distances to the fitted
objects under a kernel, given or learned from side information (distance
examples or pair constraints). As the first step of a Pipeline it feeds
scikit-learn's own ``KNeighborsClassifier(metric="precomputed")``, so the
paper's whole evaluation is one ``GridSearchCV`` over the kernel learner's
parameters and ``n_neighbors``, with the splits over the objects::

    pipe = Pipeline([
        ("distances", KernelDistances(learner=MEGKernelRegressor(), pairs=pairs,
                                      targets=sq_distances)),
        ("knn", KNeighborsClassifier(metric="precomputed")),
    ])
    GridSearchCV(pipe, {"distances__learner__learning_rate": [0.5, 5.0],
                        "knn__n_neighbors": [1, 3]},
                 cv=ShuffleSplit(10, test_size=0.5)).fit(object_ids, labels)

The labels never reach the kernel learner: it sees only ``pairs`` and
``targets``. Its kernel does not depend on the split either, so it is learned
once per parameter setting and reused by every split (an in-process cache
keyed by the learner's class, parameters and data).
"""

from __future__ import annotations

from collections import OrderedDict

import joblib
import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin, clone
from sklearn.utils.validation import check_is_fitted

from ._numerics.spectral import check_symmetric, induced_sq_distances
from ._pair_estimator import ObjectIndex
from .neighbors import kernel_to_distances

__all__ = ["KernelDistances"]

_UNKNOWN_HINT = ("The kernel covers objects_ only: give the learner objects=[...] "
                 "listing every object, or a kernel over all of them.")

#: Kernels kept by the learned-kernel cache (most recently used).
CACHE_SIZE = 16

_cache = OrderedDict()
_cache_stats = {"hits": 0, "misses": 0}


def _learned_kernel(learner, pairs, targets):
    """``(kernel, objects)`` of ``learner`` fitted on the side information,
    from the cache when the same learner was fitted on the same data."""
    key = joblib.hash((type(learner).__qualname__, learner.get_params(deep=True),
                       pairs, targets))
    if key in _cache:
        _cache.move_to_end(key)
        _cache_stats["hits"] += 1
        return _cache[key]
    _cache_stats["misses"] += 1
    model = clone(learner)
    model = model.fit(pairs) if targets is None else model.fit(pairs, targets)
    entry = (model.kernel_, np.asarray(model.objects_))
    _cache[key] = entry
    while len(_cache) > CACHE_SIZE:
        _cache.popitem(last=False)
    return entry


def cache_info():
    """Hits and misses of the learned-kernel cache (this process)."""
    return dict(_cache_stats, size=len(_cache))


def clear_cache():
    """Forget the learned kernels (this process)."""
    _cache.clear()
    _cache_stats.update(hits=0, misses=0)


def _ids(X):
    """Object ids from ``X``: 1-D, a single column, or a Series / DataFrame."""
    values = np.asarray(X, dtype=object)
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.ndim != 1:
        raise ValueError("X must hold one object id per row (a 1-D array or a single "
                         f"column), got shape {values.shape}.")
    if len(values) == 0:
        raise ValueError("X holds no object ids.")
    return values


class KernelDistances(TransformerMixin, BaseEstimator):
    """Object ids -> distances to the fitted objects under a kernel.

    Give either a fixed ``kernel`` or a kernel ``learner`` with its side
    information (``pairs`` and ``targets``). :meth:`fit` remembers the ids it
    is given (the training objects of a split); :meth:`transform` returns, for
    each id, its distances ``sqrt(K_ii + K_jj - 2 K_ij)`` to them: the input of
    ``KNeighborsClassifier(metric="precomputed")`` (or any estimator taking
    precomputed distances), with the test objects' own ``K_ii`` included, so
    ``weights="distance"`` works under cross-validation.

    Parameters
    ----------
    kernel : array-like of shape (n_objects, n_objects), default=None
        A fixed symmetric PSD kernel over the objects.
    learner : estimator, default=None
        A kernel learner with ``kernel_`` and ``objects_`` after ``fit``
        (:class:`~megkernel.MEGKernelRegressor`,
        :class:`~megkernel.DefiniteBoostKernel`); cloned, never fitted in place.
        Its parameters are searchable as ``learner__<name>``.
    pairs : array-like of shape (n_pairs, 2), default=None
        The learner's training pairs (ids or indices), e.g. a DataFrame's two
        id columns.
    targets : array-like of shape (n_pairs,), default=None
        The learner's targets: squared distances (MEG) or pair labels
        (DefiniteBoost; ``None``: all similar).
    objects : array-like of shape (n_objects,), default=None
        Ids of ``kernel``'s rows (default ``0..n-1``). With a ``learner``, its
        ``objects_`` are used.
    squared : bool, default=False
        Return squared distances.

    Attributes
    ----------
    kernel_ : ndarray of shape (n_objects, n_objects)
        The kernel (given, or learned from the side information).
    objects_ : ndarray of shape (n_objects,)
        Ids of its rows.
    fit_objects_ : ndarray of shape (n_fit,)
        The ids given to :meth:`fit` (the columns of :meth:`transform`).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.neighbors import KNeighborsClassifier
    >>> from sklearn.pipeline import make_pipeline
    >>> from megkernel import KernelDistances
    >>> points = np.array([[0.0], [0.1], [1.0], [1.1]])
    >>> pipe = make_pipeline(KernelDistances(kernel=points @ points.T + 1.0,
    ...                                      objects=["a", "b", "c", "d"]),
    ...                      KNeighborsClassifier(1, metric="precomputed"))
    >>> pipe.fit(["a", "c"], [0, 1]).predict(["b", "d"])
    array([0, 1])
    """

    def __init__(self, *, kernel=None, learner=None, pairs=None, targets=None,
                 objects=None, squared=False):
        self.kernel = kernel
        self.learner = learner
        self.pairs = pairs
        self.targets = targets
        self.objects = objects
        self.squared = squared

    def fit(self, X, y=None):
        """Remember the objects ``X`` (learning the kernel if there is a learner).

        Parameters
        ----------
        X : array-like of shape (n_objects_fit,) or (n_objects_fit, 1)
            Object ids.
        y : ignored
            Labels never reach the kernel learner.

        Returns
        -------
        self : object
        """
        kernel, objects = self._kernel()
        index = ObjectIndex(objects)
        fit_objects = _ids(X)
        rows = index.rows(fit_objects, hint=_UNKNOWN_HINT)
        self.kernel_, self.objects_ = kernel, objects
        self._index, self._fit_rows = index, rows
        self.fit_objects_ = fit_objects
        self.n_features_in_ = 1
        return self

    def transform(self, X):
        """Distances from the objects ``X`` to the fitted objects.

        Parameters
        ----------
        X : array-like of shape (n_query,) or (n_query, 1)
            Object ids.

        Returns
        -------
        D : ndarray of shape (n_query, n_objects_fit)
        """
        check_is_fitted(self, "kernel_")
        rows = self._index.rows(_ids(X), hint=_UNKNOWN_HINT)
        diagonal = np.diag(self.kernel_)
        squared = np.maximum(induced_sq_distances(
            self.kernel_[np.ix_(rows, self._fit_rows)], diagonal[rows],
            diagonal[self._fit_rows]), 0.0)
        return squared if self.squared else np.sqrt(squared)

    def get_feature_names_out(self, input_features=None):
        """``distance_to_<id>`` for each fitted object."""
        check_is_fitted(self, "kernel_")
        return np.asarray([f"distance_to_{obj}" for obj in self.fit_objects_.tolist()],
                          dtype=object)

    def distances(self):
        """All pairwise distances of the kernel (``objects_`` order)."""
        check_is_fitted(self, "kernel_")
        return kernel_to_distances(self.kernel_, squared=self.squared)

    def _kernel(self):
        if (self.kernel is None) == (self.learner is None):
            raise ValueError("Give either kernel (a fixed kernel) or learner (with pairs "
                             "and targets), not both and not neither.")
        if self.kernel is not None:
            kernel = check_symmetric(self.kernel, name="kernel")
            objects = (np.arange(len(kernel)) if self.objects is None
                       else np.asarray(self.objects))
            if len(objects) != len(kernel):
                raise ValueError(f"objects has {len(objects)} ids for a kernel over "
                                 f"{len(kernel)} objects.")
            return kernel, objects
        if self.pairs is None:
            raise ValueError("A learner needs its side information: pairs (and targets).")
        return _learned_kernel(self.learner, self.pairs, self.targets)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.one_d_array = True
        tags.requires_fit = True
        return tags
