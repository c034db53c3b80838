"""The metric learners' common ground.

The base transformer, pair-input classification (with threshold
calibration) and input validators; the pairs made from labels are in
:mod:`megkernel.metric._pairs`.

The estimators are in :mod:`megkernel.metric.meg` and
:mod:`megkernel.metric.definiteboost`; how long they learn, in
:mod:`megkernel._solvers.holdout`.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    _fit_context,
)
from sklearn.metrics import roc_auc_score
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from .._engines import UPDATE_METHOD_CONSTRAINT
from .._numerics.limits import MAX_TRACE, MIN_TRACE
from .._numerics.validation import check_pair_indices, check_pair_labels, in_scale_range
from .._pair_estimator import check_class_labels, transactional
from .._progress import detail as progress_detail
from .._solvers.metric_pairs import resolve_from_labels
from .._solvers.metric_soft_neighbors import MAX_POINTS as SOFT_NEIGHBORS_MAX_POINTS
from .._warnings import warn_user
from ._pairs import draw_pairs, neighbor_pairs

__all__ = ["draw_pairs", "neighbor_pairs"]  # re-exported from ._pairs

#: Range of the features' total sum of squares (the kernel's trace) within
#: which squared distances, targets and squared losses stay finite.
_MIN_TRACE, _MAX_TRACE = MIN_TRACE, MAX_TRACE


class _FeatureMetric(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Shared fitting from labels or pairs and the inductive transform."""

    _parameter_constraints: dict = {
        "gamma": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "gamma_dissimilar": [Interval(Real, 0, None, closed="neither"),
                             StrOptions({"auto"})],
        "n_constraints": [Interval(Integral, 1, None, closed="left"), None],
        "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        "from_labels": [StrOptions({"auto", "soft-neighbors", "neighbors", "random"})],
        "random_state": ["random_state"],
        "method": [UPDATE_METHOD_CONSTRAINT],
        "verbose": ["verbose"],
    }

    @_fit_context(prefer_skip_nested_validation=True)
    @transactional
    def fit(self, X, y):
        """Learn from class labels.

        As ``from_labels`` says: ``"neighbors"``, each point's neighbourhood
        pairs (:func:`neighbor_pairs`), its ``n_neighbors`` nearest points of
        its own class (similar) and of the other classes (dissimilar), in the
        Euclidean metric of ``X``; ``"random"``, ``n_constraints`` random
        similar and as many dissimilar pairs (:func:`draw_pairs`,
        metric-learn's ``*_Supervised`` sampling) -- both fitted as by
        :meth:`fit_pairs`; ``"soft-neighbors"`` (MEGMetric), MEG on the
        stochastic-neighbour objective of the labels themselves; ``"auto"``,
        the learner's choice (validated for MEGMetric). The classes are the
        validation's labels.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training points.
        y : array-like of shape (n_samples,)
            Class labels.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        check_class_labels(y)  # a missing label or a mix of kinds, named
        X, y = validate_data(self, X, y, ensure_min_samples=2, dtype=float)
        check_classification_targets(y)
        n_classes = np.unique(y).size
        if n_classes < 2:
            raise ValueError(f"y must hold at least 2 classes, got {n_classes}.")
        kinds = self._from_labels()
        if "soft-neighbors" in kinds and len(X) > SOFT_NEIGHBORS_MAX_POINTS:
            if len(kinds) == 1:
                raise ValueError(
                    f"from_labels='soft-neighbors' takes at most "
                    f"{SOFT_NEIGHBORS_MAX_POINTS} training points (its n x n neighbour "
                    f"probabilities), got {len(X)}; use from_labels='neighbors' or "
                    "'random', or 'auto' (which then leaves it out).")
            kinds = tuple(kind for kind in kinds if kind != "soft-neighbors")
        trace = _check_trace(X - X.mean(axis=0))
        return self._commit(self._solve(X, trace, labels=y, kinds=kinds))

    def _from_labels(self):
        """``from_labels`` resolved: the kinds to make (several: validation chooses).

        ``"auto"``: the learner's ``_FROM_LABELS_AUTO``.
        """
        return resolve_from_labels(self.from_labels, self.n_constraints,
                                   self._FROM_LABELS_AUTO)

    @_fit_context(prefer_skip_nested_validation=True)
    @transactional
    def fit_pairs(self, X, pairs, pair_labels):
        """Learn from explicit pairs of training points.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training points (the objects).
        pairs : array-like of int, shape (n_pairs, 2)
            Row indices into ``X``.
        pair_labels : array-like of shape (n_pairs,)
            ``+1`` / ``1`` / ``True`` similar, ``-1`` / ``0`` / ``False``
            dissimilar.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        X = validate_data(self, X, ensure_min_samples=2, dtype=float)
        pairs = check_pair_indices(pairs, len(X), name="pairs", min_pairs=1)
        # one check of pair labels for fit, fit_pairs and partial_fit
        pair_labels = check_pair_labels(pair_labels, pairs, name="pair_labels")
        return self._fit_pairs(X, pairs, pair_labels.astype(int))

    def _fit_pairs(self, X, pairs, pair_labels):
        """Fit from validated points and pairs: the trace checked, one solver call, commit."""
        trace = _check_trace(X - X.mean(axis=0))
        return self._commit(self._solve(X, trace, pairs, pair_labels))

    def _commit(self, result):
        """Set the fitted attributes of a solver's result; warn if the pairs are met worse.

        Not after MEG on the stochastic-neighbour objective: its pairs (the
        neighbourhoods) are only reported on, and that ascent never lowers
        its own objective.
        """
        self.mean_, self.components_ = result.mean, result.components
        self.pairs_, self.pair_labels_ = result.pairs, result.signs
        self.from_labels_, self.validation_ = result.from_labels, result.validation
        self.gamma_, self.gamma_dissimilar_ = result.gamma, result.gamma_dissimilar
        self.n_iter_ = result.n_iter
        self._commit_learner(result)
        loss, prior_loss = result.loss, result.prior_loss
        setattr(self, f"{self._loss_name}_", loss)
        setattr(self, f"prior_{self._loss_name}_", prior_loss)
        name = type(self).__name__
        if loss > prior_loss * (1 + 1e-9) and self.from_labels_ != "soft-neighbors":
            warn_user(
                f"{name}: the learned metric meets the pairs worse than its prior "
                f"({self._loss_name}_ {loss:.4g} > {prior_loss:.4g}); the "
                "thresholds may be jointly "
                "infeasible (see the module docs of megkernel.metric).",
                UserWarning)
        if self.verbose:
            progress_detail(f"[{name}] {self._fit_summary()}; rank "
                            f"{self.components_.shape[0]}: {self._loss_name} "
                            f"{loss:.4g} (prior {prior_loss:.4g})")
        return self

    @property
    def constraint_loss_(self):
        """Deprecated alias of ``pair_mse_`` or ``violated_fraction_``.

        ``pair_mse_`` for MEGMetric, ``violated_fraction_`` for
        DefiniteBoostMetric.
        """
        return self._deprecated_loss(f"{self._loss_name}_", "constraint_loss_")

    @property
    def prior_constraint_loss_(self):
        """Deprecated alias of ``prior_pair_mse_`` or ``prior_violated_fraction_``."""
        return self._deprecated_loss(f"prior_{self._loss_name}_", "prior_constraint_loss_")

    def _deprecated_loss(self, name, old_name):
        check_is_fitted(self, "components_")
        warn_user(
            f"{old_name} is deprecated since megkernel 0.2 (it meant a different "
            f"loss in each metric learner) and will be removed in 0.3; use {name}.",
            FutureWarning)
        return getattr(self, name)

    def transform(self, X):
        """Embed points: Euclidean distances there are the learned ones.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Points with the training features.

        Returns
        -------
        X_new : ndarray of shape (n_samples, rank)
            ``(X - mean_) @ components_.T``.
        """
        check_is_fitted(self, "components_")
        X = validate_data(self, X, reset=False, dtype=float)
        return (X - self.mean_) @ self.components_.T

    def get_mahalanobis_matrix(self):
        """Return the Mahalanobis matrix of the learned metric.

        Returns
        -------
        A : ndarray of shape (n_features, n_features)
            ``components_.T @ components_``, so that
            ``d(x, x')^2 = (x - x')^T A (x - x')``.
        """
        check_is_fitted(self, "components_")
        return self.components_.T @ self.components_

    def pair_sq_distances(self, X, pairs):
        """Learned squared distances between rows ``pairs[:, 0]`` and ``pairs[:, 1]`` of ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Points with the training features.
        pairs : array-like of int, shape (n_pairs, 2)
            Row indices into ``X``.

        Returns
        -------
        sq_distances : ndarray of shape (n_pairs,)
            The learned squared distance of each pair.
        """
        Z = self.transform(X)
        pairs = check_pair_indices(pairs, len(Z), name="pairs")
        return np.sum((Z[pairs[:, 0]] - Z[pairs[:, 1]]) ** 2, axis=1)

    def pair_distances(self, X, pairs):
        """Return squared distances: deprecated alias of :meth:`pair_sq_distances`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Points with the training features.
        pairs : array-like of int, shape (n_pairs, 2)
            Row indices into ``X``.

        Returns
        -------
        sq_distances : ndarray of shape (n_pairs,)
            The learned squared distance of each pair (a ``FutureWarning``
            says that the name is deprecated).
        """
        warn_user("pair_distances is deprecated since megkernel 0.2 (it returns "
                  "squared distances) and will be removed in 0.3; use "
                  "pair_sq_distances.", FutureWarning)
        return self.pair_sq_distances(X, pairs)

    @property
    def _n_features_out(self):
        """Columns of :meth:`transform` (``get_feature_names_out``, ``set_output``)."""
        return self.components_.shape[0]

    @property
    def n_components_(self):
        """Dimension of the embedding (the rank of the centered training features)."""
        check_is_fitted(self, "components_")
        return self.components_.shape[0]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        return tags


def _check_trace(centred):
    """Return the centered features' sum of squares, if squared distances stay finite."""
    largest = float(np.abs(centred).max())
    if largest == 0:
        raise ValueError("X has no variance: every training point is the same.")
    with np.errstate(over="ignore", under="ignore"):
        trace = float(np.sum(centred * centred))
    if not in_scale_range(trace):
        raise ValueError(
            f"X's scale is out of range: the centered features reach {largest:.3g} "
            f"and their sum of squares is {trace:.3g}, outside "
            f"({_MIN_TRACE:g}, {_MAX_TRACE:g}) where squared distances and their "
            "squared errors stay in double precision. Rescale X, e.g. with "
            "StandardScaler.")
    return trace


def _check_pairs_of_points(X, n_features=None):
    """Pairs of points as a float array of shape (n_pairs, 2, n_features)."""
    pairs_of_points = np.asarray(X, dtype=float)
    if pairs_of_points.ndim != 3 or pairs_of_points.shape[1] != 2:
        raise ValueError("X must hold pairs of points, shape (n_pairs, 2, n_features), "
                         f"got shape {pairs_of_points.shape}.")
    if len(pairs_of_points) == 0:
        raise ValueError("X holds no pairs.")
    if not np.all(np.isfinite(pairs_of_points)):
        raise ValueError("X contains NaN or infinite values.")
    if n_features is not None and pairs_of_points.shape[2] != n_features:
        raise ValueError(f"X has {pairs_of_points.shape[2]} features per point, but "
                         f"the metric was fitted with {n_features}.")
    return pairs_of_points


class _PairInput:
    """Pairs of points as ``X`` with pair labels as ``y``.

    ``X`` has shape (n_pairs, 2, n_features), metric-learn's convention, so
    that scikit-learn's cross-validation splits the pairs: ``fit``,
    ``decision_function``, ``predict``, ``score`` (ROC AUC) and
    ``calibrate_threshold`` on pairs; ``transform`` embeds single points as
    for the supervised learner.
    """

    @_fit_context(prefer_skip_nested_validation=True)
    @transactional
    def fit(self, X, y):
        """Learn from labeled pairs of points, then calibrate ``threshold_``.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2, n_features)
            The two points of each pair.
        y : array-like of shape (n_pairs,)
            ``+1`` / ``1`` / ``True`` similar, ``-1`` / ``0`` / ``False``
            dissimilar.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        pairs_of_points = self._check_pairs(X, reset=True)
        n_pairs, _, n_features = pairs_of_points.shape
        points, inverse = np.unique(pairs_of_points.reshape(-1, n_features), axis=0,
                                    return_inverse=True)
        pairs = inverse.reshape(n_pairs, 2)
        signs = check_pair_labels(y, pairs, name="y").astype(int)
        if len(points) < 2:
            raise ValueError("The pairs hold fewer than 2 distinct points.")
        self._fit_pairs(points, pairs, signs)
        self.classes_ = np.array([-1, 1])
        return self.calibrate_threshold(X, y)

    def _check_pairs(self, X, *, reset):
        pairs_of_points = _check_pairs_of_points(X, None if reset else self.n_features_in_)
        if reset:
            self.n_features_in_ = pairs_of_points.shape[2]
        return pairs_of_points

    def pair_score(self, X):
        """Learned squared distances of pairs of points.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2, n_features)
            The two points of each pair.

        Returns
        -------
        sq_distances : ndarray of shape (n_pairs,)
            The learned squared distance of each pair.
        """
        check_is_fitted(self, "components_")
        pairs_of_points = self._check_pairs(X, reset=False)
        difference = (pairs_of_points[:, 0] - pairs_of_points[:, 1]) @ self.components_.T
        return np.einsum("ij,ij->i", difference, difference)

    def decision_function(self, X):
        """Score pairs: ``threshold_`` minus their learned squared distance.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2, n_features)
            The two points of each pair.

        Returns
        -------
        scores : ndarray of shape (n_pairs,)
            Positive for the pairs called similar.
        """
        check_is_fitted(self, "threshold_")
        return self.threshold_ - self.pair_score(X)

    def predict(self, X):
        """Predict pair labels from the learned squared distances.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2, n_features)
            The two points of each pair.

        Returns
        -------
        y_pred : ndarray of shape (n_pairs,)
            ``+1`` (similar) where the squared distance is ``<= threshold_``,
            else ``-1``.
        """
        return np.where(self.decision_function(X) >= 0, 1, -1)

    def score(self, X, y):
        """ROC AUC of :meth:`decision_function` on labeled pairs (metric-learn's).

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2, n_features)
            The two points of each pair.
        y : array-like of shape (n_pairs,)
            Pair labels: ``+1`` / ``1`` / ``True`` similar, ``-1`` / ``0`` /
            ``False`` dissimilar.

        Returns
        -------
        score : float
            The area under the ROC curve, 1 for pairs perfectly ordered.
        """
        check_is_fitted(self, "threshold_")
        signs = check_pair_labels(y, len(np.asarray(X)), name="y")
        return float(roc_auc_score(signs, self.decision_function(X)))

    def calibrate_threshold(self, X, y, *, strategy="accuracy"):
        """Set ``threshold_`` to the squared distance that best separates the pairs.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2, n_features)
            The two points of each pair.
        y : array-like of shape (n_pairs,)
            Pair labels.
        strategy : {"accuracy"}, default="accuracy"
            Maximize the accuracy of :meth:`predict` on ``(X, y)``; ties go
            to the midpoint between neighboring distances.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        if strategy != "accuracy":
            raise ValueError(f"strategy must be 'accuracy', got {strategy!r}.")
        distances = self.pair_score(X)
        signs = check_pair_labels(y, len(distances), name="y")
        order = np.argsort(distances, kind="stable")
        ordered, similar = distances[order], signs[order] > 0
        # threshold between ordered[k - 1] and ordered[k]: the k closest are similar
        correct = (np.r_[0, np.cumsum(similar)]
                   + np.r_[np.cumsum((~similar)[::-1])[::-1], 0])
        k = int(np.argmax(correct))
        edges = np.r_[ordered[0] - 1.0, ordered, ordered[-1] + 1.0]
        self.threshold_ = float(0.5 * (edges[k] + edges[k + 1]))
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.three_d_array = True
        return tags
