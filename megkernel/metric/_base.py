"""The metric learners' common ground.

The base transformer, pair-input classification (with threshold
calibration) and input validators; the pairs made from labels are in
:mod:`megkernel.metric._pairs`.

The estimators are in :mod:`megkernel.metric.meg` and
:mod:`megkernel.metric.definiteboost`; how long they learn, in
:mod:`megkernel._solvers.holdout`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from numbers import Integral, Real

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    _fit_context,
)
from sklearn.metrics import roc_auc_score
from sklearn.utils import ClassifierTags
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
from .._warnings import NoImprovementWarning, warn_user
from ._pairs import draw_pairs, neighbor_pairs

__all__ = ["draw_pairs", "neighbor_pairs"]  # re-exported from ._pairs

#: Range of the features' total sum of squares (the kernel's trace) within
#: which squared distances, targets and squared losses stay finite.
_MIN_TRACE, _MAX_TRACE = MIN_TRACE, MAX_TRACE


def content_order_of_points(X, labels=None):
    """Return the order that sorts points (and their labels) by their content.

    By the squared distance from the points' mean (the mean of each column
    sorted, so that its bits do not depend on the row order), then the
    label, then the features lexicographically: the same points in any row
    order are put in one order, so draws over rows (random pairs, folds) and
    sums over them give the same fit; the first key is unchanged by a
    rotation or a shift of the features, so the fit of rotated points stays
    the rotated fit. Rows left tied are identical points of one label,
    which are interchangeable.
    """
    first = [] if labels is None else [np.unique(labels, return_inverse=True)[1].ravel()]
    # near the float range the squares overflow: inf (or NaN) keys tie, and the
    # features order those points, still by their content alone
    with np.errstate(over="ignore", invalid="ignore"):
        centre = np.sort(X, axis=0).mean(axis=0)
        first.append(((X - centre) ** 2).sum(axis=1))
    order = np.lexsort(first)
    ranked = np.column_stack(first)[order]
    if np.all(np.isfinite(ranked)) and np.all(np.any(ranked[1:] != ranked[:-1], axis=1)):
        return order  # no ties: the features need not be sorted (a pass per feature)
    return np.lexsort([X[:, j] for j in range(X.shape[1] - 1, -1, -1)] + first)


def _in_user_order(result, order):
    """Return a solver's result with its per-point fields back in the user's row order.

    ``pairs`` index the points (``order[pairs]``); ``coordinates``, where the
    result has them, are one row per point.
    """
    fields = {} if result.pairs is None else {
        "pairs": order[np.asarray(result.pairs, dtype=np.intp)]}
    if getattr(result, "coordinates", None) is not None:
        coordinates = np.empty_like(result.coordinates)
        coordinates[order] = result.coordinates
        fields["coordinates"] = coordinates
    return dataclasses.replace(result, **fields)


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
        "preprocessor": ["array-like", callable, None],
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
        X : array-like of shape (n_samples, n_features) or (n_samples,)
            Training points, or with ``preprocessor`` their indicators.
        y : array-like of shape (n_samples,)
            Class labels.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        check_class_labels(y)  # a missing label or a mix of kinds, named
        X = self._points(X)
        # scikit-learn finds an infinity by summing X (+inf - inf: a RuntimeWarning)
        with np.errstate(invalid="ignore", over="ignore"):
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
        # the same points in any row order give the same fit: the solver sees them
        # in an order of their content (its draws of pairs and folds go by row)
        order = content_order_of_points(X, y)
        X, y = X[order], y[order]
        trace = _check_trace(X)
        return self._commit(_in_user_order(self._solve(X, trace, labels=y, kinds=kinds),
                                           order), X)

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
        X : array-like of shape (n_samples, n_features) or (n_samples,)
            Training points (the objects), or with ``preprocessor`` their
            indicators.
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
        # scikit-learn finds an infinity by summing X (+inf - inf: a RuntimeWarning)
        with np.errstate(invalid="ignore", over="ignore"):
            X = validate_data(self, self._points(X), ensure_min_samples=2, dtype=float)
        pairs = check_pair_indices(pairs, len(X), name="pairs", min_pairs=1)
        # one check of pair labels for fit, fit_pairs and partial_fit
        pair_labels = check_pair_labels(pair_labels, pairs, name="pair_labels")
        return self._fit_pairs(X, pairs, pair_labels.astype(int))

    def _fit_pairs(self, X, pairs, pair_labels):
        """Fit from validated points and pairs: the trace checked, one solver call, commit.

        The points in an order of their content (the pairs renumbered), so that
        the row order of ``X`` changes nothing.
        """
        order = content_order_of_points(X)
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        X, pairs = X[order], rank[pairs]
        trace = _check_trace(X)
        return self._commit(_in_user_order(self._solve(X, trace, pairs, pair_labels), order),
                            X)

    def _commit(self, result, points):
        """Set the fitted attributes of a solver's result; warn if the pairs are met worse.

        ``points``: the training points, whose span a verdict without a gain names.

        Not after MEG on a stochastic-neighbour objective (the labels' or the
        given pairs'): it does not aim at the pairs' thresholds, which are
        only reported on, and that ascent never lowers its own objective.
        """
        self.mean_, self.components_ = result.mean, result.components
        self.preprocessor_ = self.preprocessor
        self.pairs_, self.pair_labels_ = result.pairs, result.signs
        self.from_labels_, self.validation_ = result.from_labels, result.validation
        self.gamma_, self.gamma_dissimilar_ = result.gamma, result.gamma_dissimilar
        self.n_iter_ = result.n_iter
        self._commit_learner(result)
        loss, prior_loss = result.loss, result.prior_loss
        setattr(self, f"{self._loss_name}_", loss)
        setattr(self, f"prior_{self._loss_name}_", prior_loss)
        name = type(self).__name__
        if loss > prior_loss * (1 + 1e-9) and getattr(
                result, "soft_neighbor_objective", None) is None:
            warn_user(
                f"{name}: the learned metric meets the pairs worse than its prior "
                f"({self._loss_name}_ {loss:.4g} > {prior_loss:.4g}); the "
                "thresholds may be jointly "
                "infeasible (see the module docs of megkernel.metric).",
                UserWarning)
        if self.validation_ is not None and not self.validation_["gain_is_real"]:
            prior_is_euclidean = getattr(self, "init_", "euclidean") == "euclidean"
            message = _no_gain_message(self.validation_, prior_is_euclidean,
                                       rank=_span_rank(points))
            warn_user(f"{name}: {message}", NoImprovementWarning)
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

        As metric-learn's ``transform``: points (or, with a ``preprocessor``,
        1-D indices), for the pair learners too; pairs of points are refused.

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
        if getattr(X, "ndim", None) == 3 or (
                isinstance(X, list) and np.asarray(X).ndim == 3):  # pairs of points
            raise ValueError(
                f"transform embeds points, shape (n_samples, n_features); got an array of "
                f"shape {np.asarray(X).shape}, pairs of points. Embed their points "
                "(X.reshape(-1, n_features)), or measure the pairs with pair_distance. Before "
                "a k-NN classifier in a Pipeline, use a learner of points from class labels "
                "(MEGMetric, DefiniteBoostMetric: fit(X, y)), as metric-learn's *_Supervised "
                "learners.")
        # scikit-learn finds an infinity by summing X (+inf - inf: a RuntimeWarning)
        with np.errstate(invalid="ignore", over="ignore"):
            X = validate_data(self, self._points(X), reset=False, dtype=float)
        return (X - self.mean_) @ self.components_.T

    def _points(self, X):
        """Return ``X``, or the points its indices name through ``preprocessor``.

        With a preprocessor, a 1-D ``X`` holds indices (metric-learn's
        convention): an array preprocessor is indexed by them, a callable one
        is called with them. A 2-D ``X`` is taken as the points themselves.
        """
        if getattr(self, "preprocessor", None) is None or np.ndim(X) != 1:
            return X
        return _preprocessed(self.preprocessor, X, "X")

    def _pairs_of_points(self, pairs):
        """Return pairs as points, shape (n_pairs, 2, n_features), checked for the fit.

        ``pairs`` holds the two points of each pair, or, with ``preprocessor``,
        the two indices of each pair (shape (n_pairs, 2)).
        """
        if getattr(self, "preprocessor", None) is not None and np.ndim(pairs) == 2:
            pairs = _preprocessed(self.preprocessor, pairs, "pairs")
        return _check_pairs_of_points(pairs, getattr(self, "n_features_in_", None))

    def pair_distance(self, pairs):
        """Return the learned distance of each pair (metric-learn's ``pair_distance``).

        Parameters
        ----------
        pairs : array-like of shape (n_pairs, 2, n_features) or (n_pairs, 2)
            The two points of each pair, or with ``preprocessor`` the two
            indices of each pair.

        Returns
        -------
        distances : ndarray of shape (n_pairs,)
            ``||L (x - x')||`` with ``L = components_`` (not squared).
        """
        check_is_fitted(self, "components_")
        pairs_of_points = self._pairs_of_points(pairs)
        difference = (pairs_of_points[:, 0] - pairs_of_points[:, 1]) @ self.components_.T
        return np.sqrt(np.einsum("ij,ij->i", difference, difference))

    def pair_score(self, pairs):
        """Return the similarity score of each pair: minus its learned distance.

        metric-learn's sign convention: larger means more similar.

        Parameters
        ----------
        pairs : array-like of shape (n_pairs, 2, n_features) or (n_pairs, 2)
            The two points of each pair, or with ``preprocessor`` their indices.

        Returns
        -------
        scores : ndarray of shape (n_pairs,)
            ``-pair_distance(pairs)``.
        """
        return -self.pair_distance(pairs)

    def score_pairs(self, pairs):
        """Return the learned distance of each pair: deprecated, as in metric-learn.

        Parameters
        ----------
        pairs : array-like of shape (n_pairs, 2, n_features) or (n_pairs, 2)
            The two points of each pair, or with ``preprocessor`` their indices.

        Returns
        -------
        distances : ndarray of shape (n_pairs,)
            :meth:`pair_distance` (a ``FutureWarning`` says to use it, or
            :meth:`pair_score` for similarity scores).
        """
        warn_user("score_pairs is deprecated (as in metric-learn 0.7) and will be removed "
                  "in megkernel 0.3: use pair_score for similarity scores (larger: more "
                  "similar) or pair_distance for distances.", FutureWarning)
        return self.pair_distance(pairs)

    def get_metric(self):
        """Return the learned distance as a function of two points.

        The function is independent of the estimator (a later fit does not
        change it), as metric-learn's; usable as scikit-learn's ``metric=``.

        Returns
        -------
        metric_fun : callable
            ``metric_fun(u, v, squared=False)``: the learned distance between
            two points, 1-D (or rows of shape (1, n_features), as metric-learn's)
            (its square with ``squared=True``).
        """
        check_is_fitted(self, "components_")
        components_T = self.components_.T.copy()
        n_features = len(components_T)

        def metric_fun(u, v, squared=False):
            # as scipy's and metric-learn's validate_vector: a (1, d) row is a point
            u = np.atleast_1d(np.asarray(u, dtype=float).squeeze())
            v = np.atleast_1d(np.asarray(v, dtype=float).squeeze())
            if u.ndim != 1 or v.ndim != 1:
                raise ValueError(f"u and v must be 1-D points, got shapes {u.shape} "
                                 f"and {v.shape}.")
            if len(u) != n_features or len(v) != n_features:
                raise ValueError(f"u and v must have the {n_features} features the metric "
                                 f"was fitted with, got {len(u)} and {len(v)}.")
            difference = (u - v) @ components_T
            sq_distance = float(difference @ difference)
            return sq_distance if squared else float(np.sqrt(sq_distance))

        return metric_fun

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


def _calibration_params(calibration_params):
    """``fit``'s ``calibration_params`` as keyword arguments of ``calibrate_threshold``, checked."""
    if calibration_params is None:
        return {}
    if not isinstance(calibration_params, Mapping):
        raise ValueError("calibration_params must be a dict of calibrate_threshold's "
                         "arguments (strategy, min_rate, beta) or None, got "
                         f"{type(calibration_params).__name__}.")
    unknown = sorted(set(calibration_params) - {"strategy", "min_rate", "beta"}, key=str)
    if unknown:
        raise ValueError(f"calibration_params has unknown keys {unknown}: calibrate_threshold "
                         "takes strategy, min_rate and beta.")
    _check_calibration_params(**calibration_params)
    return dict(calibration_params)


def _check_calibration_params(strategy="accuracy", min_rate=None, beta=1.0):
    """Refuse calibration parameters metric-learn refuses (and NaN ones), naming them."""
    if strategy not in ("accuracy", "f_beta", "max_tpr", "max_tnr"):
        raise ValueError("strategy must be 'accuracy', 'f_beta', 'max_tpr' or 'max_tnr', "
                         f"got {strategy!r}.")
    if strategy in ("max_tpr", "max_tnr") and not (
            isinstance(min_rate, Real) and not isinstance(min_rate, bool)
            and 0 <= min_rate <= 1):
        raise ValueError(f"min_rate must be a number in [0, 1] for strategy={strategy!r}, "
                         f"got {min_rate!r}.")
    if strategy == "f_beta" and not (isinstance(beta, Real) and not isinstance(beta, bool)
                                     and math.isfinite(beta)):
        raise ValueError(f"beta must be a finite real number, got {beta!r}.")


def _cumulative_counts(distances, similar):
    """Candidate thresholds and the similar / dissimilar pairs at or below each.

    The cuts are every distinct distance and one below the smallest (nothing
    accepted), so that a threshold never splits equal distances.
    """
    order = np.argsort(distances, kind="stable")
    ordered, similar = distances[order], similar[order]
    last = np.r_[ordered[1:] != ordered[:-1], True]  # the last of each run of ties
    tp = np.cumsum(similar)[last]
    fp = np.cumsum(~similar)[last]
    return (np.r_[ordered[0] - 1.0, ordered[last]], np.r_[0, tp].astype(float),
            np.r_[0, fp].astype(float))


def _preprocessed(preprocessor, indices, name):
    """Return the points ``indices`` name, ``preprocessor[indices]`` or ``(indices)``.

    A callable is called as metric-learn calls it: with a 1-D array of
    indicators, once per column of index pairs, so that a loader written for
    metric-learn (one that iterates over its indicators) works unchanged.
    """
    if callable(preprocessor):
        indices = np.asarray(indices)
        if indices.ndim == 2:
            points = np.stack([_called(preprocessor, column, name)
                               for column in indices.T], axis=1)
        else:
            points = _called(preprocessor, indices, name)
    else:
        table = np.asarray(preprocessor)  # no copy of an array: only the rows named are
        indices = np.asarray(indices)     # converted, as metric-learn's ArrayIndexer
        if indices.dtype.kind not in "iu":
            raise ValueError(f"With an array preprocessor, {name} must hold integer indices "
                             f"into it, got dtype {indices.dtype}.")
        if indices.size and (indices.min() < -len(table) or indices.max() >= len(table)):
            raise ValueError(f"{name} holds indices outside the preprocessor's "
                             f"{len(table)} rows.")
        try:
            points = np.asarray(table[indices], dtype=float)
        except (TypeError, ValueError) as error:
            raise ValueError(f"The preprocessor's rows must be numbers: {error}.") from None
    if points.shape[:np.ndim(indices)] != np.shape(indices):
        raise ValueError(f"The preprocessor must give one point per index of {name}: "
                         f"{np.shape(indices)} indices gave shape {points.shape}.")
    return points


def _called(preprocessor, indicators, name):
    """Points of 1-D ``indicators`` from a callable preprocessor: one point per indicator."""
    points = np.asarray(preprocessor(indicators), dtype=float)
    if points.ndim != 2 or len(points) != len(indicators):
        raise ValueError(f"The preprocessor must give a 2-D array of one point per indicator "
                         f"of {name}: {len(indicators)} indicators gave shape {points.shape}.")
    return points


def _span_rank(points):
    """Return the number of dimensions the centred points span (numerically)."""
    centred = points - points.mean(axis=0)
    singular = np.linalg.svd(centred, compute_uv=False)
    return int(np.sum(singular > singular.max(initial=0.0) * max(centred.shape) * 1e-12))


def _no_gain_message(log, prior_is_euclidean=True, *, rank=None):
    """Say what a validation without a real gain kept, with its held-out scores.

    ``rank``: the dimensions the centred training points span; on one no
    metric of the fixed trace differs from the Euclidean one, whatever the
    data's signal.
    """
    what = {"knn": "1-NN margin of held-out points", "auc": "ROC AUC of held-out pairs"}[
        log["score"]]
    folds = f"{log['n_folds']} folds x {log['n_repeats']}"
    if log["chosen"] is None:
        return (f"no validation fold could be scored ({folds}: no held-out point with a "
                "labelled reference, or no held-out pair of each kind), so the length "
                "learned is a default one, without a verdict. Give more points or pairs, "
                "or fix the length (n_epochs / max_iter).")
    if rank == 1:
        return (f"X's centred training points span one dimension, where every metric of "
                f"the fixed trace is the Euclidean one: nothing can be learned, so the "
                f"Euclidean metric is kept ({what} {log['scores'][0]:.4g}, {folds}). "
                "A metric needs features that vary in more than one direction.")
    if log.get("fewer_right", False):
        chosen = log["checkpoints"].index(log["chosen"])
        accuracies = log.get("accuracies")
        shown = ("" if accuracies is None else
                 f"1-NN accuracy {accuracies[chosen]:.4g} against {accuracies[0]:.4g}, ")
        return (f"the learned metric's {what} rose over its prior's, but fewer held-out "
                f"points were right under it ({shown}{folds}): no real gain is claimed "
                "(validation_['gain_is_real'] is False).")
    if log.get("worse_than_reference", False):
        return (f"the learned metric scored worse than the Euclidean metric on held-out "
                f"data ({what} {log['scores'][log['checkpoints'].index(log['chosen'])]:.4g} "
                f"against {log['reference_score']:.4g}, {folds}), so the Euclidean "
                "metric is kept.")
    if log["chosen"] == 0 and prior_is_euclidean:
        learned = max(log["scores"][1:], default=log["scores"][0])
        return (f"no validated gain over the Euclidean metric beyond noise ({what}: "
                f"Euclidean {log['scores'][0]:.4g}, best learned {learned:.4g}, {folds}), "
                "so the Euclidean metric is kept; the data may carry no signal the "
                "metric can use.")
    chosen = log["scores"][log["checkpoints"].index(log["chosen"])]
    return (f"the learned metric's held-out {what} ({chosen:.4g}) is within noise of the "
            f"Euclidean metric's ({log['reference_score']:.4g}, {folds}): no real gain "
            "is claimed (validation_['gain_is_real'] is False).")


def _check_trace(points):
    """Return the centered points' sum of squares, if squared distances stay finite.

    Identical points are refused as such: their centred values need not be
    zero (the mean of copies of a value rounds), and would be a metric of
    rounding errors.
    """
    if np.all(points == points[0]):
        raise ValueError("X has no variance: every training point is the same.")
    centred = points - points.mean(axis=0)
    largest = float(np.abs(centred).max())
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
    try:
        pairs_of_points = np.asarray(X, dtype=float)
    except (TypeError, ValueError) as error:  # e.g. indicators without a preprocessor
        raise ValueError(f"X must hold pairs of points, numbers of shape (n_pairs, 2, "
                         f"n_features) ({error}); pairs of indices or names need a "
                         "preprocessor (the points or a callable that loads them).") from None
    if pairs_of_points.ndim != 3 or pairs_of_points.shape[1] != 2:
        hint = ""
        if pairs_of_points.ndim == 2 and pairs_of_points.shape[1] == 2:
            hint = ("; index pairs, shape (n_pairs, 2), need a preprocessor (the points or a "
                    "callable that loads them, e.g. preprocessor=X)")
        elif pairs_of_points.shape[:1] == (2,) and pairs_of_points.ndim == 2:
            hint = "; one pair of points is X[np.newaxis], shape (1, 2, n_features)"
        raise ValueError("X must hold pairs of points, shape (n_pairs, 2, n_features), "
                         f"got shape {pairs_of_points.shape}{hint}.")
    if len(pairs_of_points) == 0:
        raise ValueError("X holds no pairs.")
    if not np.all(np.isfinite(pairs_of_points)):
        raise ValueError("X contains NaN or infinite values.")
    if n_features is not None and pairs_of_points.shape[2] != n_features:
        raise ValueError(f"X has {pairs_of_points.shape[2]} features per point, but "
                         f"the metric was fitted with {n_features}.")
    return pairs_of_points


class _PairInput:
    """Pairs of points as ``X`` with pair labels as ``y`` (metric-learn's pair learners).

    ``X`` has shape (n_pairs, 2, n_features), or (n_pairs, 2) indices with a
    ``preprocessor``, so that scikit-learn's cross-validation splits the
    pairs: ``fit``, ``decision_function``, ``predict``, ``score`` (ROC AUC)
    and ``calibrate_threshold`` on pairs; ``transform`` embeds single points
    as for the supervised learner. As in metric-learn, ``threshold_`` is a
    distance (not squared), :meth:`decision_function` is
    :meth:`~_FeatureMetric.pair_score` (minus the distance, larger for more
    similar pairs) and a pair is predicted similar when its distance is at
    most ``threshold_``.
    """

    @_fit_context(prefer_skip_nested_validation=True)
    @transactional
    def fit(self, X, y, calibration_params=None):
        """Learn from labeled pairs of points, then calibrate ``threshold_``.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2, n_features) or (n_pairs, 2)
            The two points of each pair, or with ``preprocessor`` their indices.
        y : array-like of shape (n_pairs,)
            ``+1`` / ``1`` / ``True`` similar, ``-1`` / ``0`` / ``False``
            dissimilar.
        calibration_params : dict or None, default=None
            Keyword arguments of :meth:`calibrate_threshold` (``strategy``,
            ``min_rate``, ``beta``), checked before the fit; ``None``:
            the accuracy on the training pairs.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        calibration_params = _calibration_params(calibration_params)
        if hasattr(self, "n_features_in_"):  # a refit: the pairs may have other features
            del self.n_features_in_
        pairs_of_points = self._pairs_of_points(X)
        n_pairs, _, n_features = pairs_of_points.shape
        points, inverse = np.unique(pairs_of_points.reshape(-1, n_features), axis=0,
                                    return_inverse=True)
        pairs = inverse.reshape(n_pairs, 2)
        signs = check_pair_labels(y, len(pairs), name="y").astype(int)
        same = (pairs[:, 0] == pairs[:, 1]) & (signs < 0)
        if same.any():  # no metric can set two copies of a point apart
            warn_user(f"{int(same.sum())} dissimilar pairs join a point to itself (first: "
                      f"pair {int(np.argmax(same))}); no metric can set them apart, so the "
                      "metric is learned without them (they still count in the "
                      "threshold's calibration).", UserWarning)
        if len(points) < 2:
            raise ValueError("The pairs hold fewer than 2 distinct points.")
        if same.all():
            raise ValueError("Every pair is a dissimilar pair of a point with itself.")
        self._fit_pairs(points, pairs[~same], signs[~same])
        self.n_features_in_ = n_features
        self.classes_ = np.array([-1, 1])
        return self.calibrate_threshold(pairs_of_points, signs, **calibration_params)

    def decision_function(self, X):
        """Score pairs as metric-learn does: minus their learned distance.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2, n_features) or (n_pairs, 2)
            The two points of each pair, or with ``preprocessor`` their indices.

        Returns
        -------
        scores : ndarray of shape (n_pairs,)
            :meth:`pair_score`: larger for more similar pairs; a pair is
            predicted similar when ``-score <= threshold_``.
        """
        return self.pair_score(X)

    def predict(self, X):
        """Predict pair labels: similar where the learned distance is at most ``threshold_``.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2, n_features) or (n_pairs, 2)
            The two points of each pair, or with ``preprocessor`` their indices.

        Returns
        -------
        y_pred : ndarray of shape (n_pairs,)
            ``+1`` (similar) or ``-1``.
        """
        check_is_fitted(self, "components_")
        if "threshold_" not in vars(self):
            raise AttributeError("A threshold for this estimator has not been set: call "
                                 "its set_threshold or calibrate_threshold method.")
        return np.where(-self.decision_function(X) <= self.threshold_, 1, -1)

    def score(self, X, y):
        """ROC AUC of :meth:`decision_function` on labeled pairs (metric-learn's).

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2, n_features) or (n_pairs, 2)
            The two points of each pair, or with ``preprocessor`` their indices.
        y : array-like of shape (n_pairs,)
            Pair labels: ``+1`` / ``1`` / ``True`` similar, ``-1`` / ``0`` /
            ``False`` dissimilar.

        Returns
        -------
        score : float
            The area under the ROC curve, 1 for pairs perfectly ordered.
        """
        scores = self.decision_function(X)
        signs = check_pair_labels(y, len(scores), name="y")
        return float(roc_auc_score(signs, scores))

    def set_threshold(self, threshold):
        """Set ``threshold_``, the distance up to which a pair is predicted similar.

        Parameters
        ----------
        threshold : float
            A distance (not squared), as metric-learn's: a real number (a
            0-d array too), not NaN.

        Returns
        -------
        self : object
            The estimator.
        """
        check_is_fitted(self, "components_")
        value = threshold.item() if isinstance(threshold, np.ndarray) and threshold.ndim == 0 \
            else threshold
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real):
            raise ValueError(f"threshold must be a real number, got {type(threshold)}.")
        if math.isnan(value):  # any Real (a Fraction too), not numpy's isnan
            raise ValueError("threshold must be a real number, got NaN.")
        self.threshold_ = float(value)
        return self

    def calibrate_threshold(self, X, y, *, strategy="accuracy", min_rate=None, beta=1.0):
        """Set ``threshold_`` to the distance that best separates labeled pairs.

        The criteria of metric-learn's ``calibrate_threshold``, computed here
        from the sorted distances (ties between equal distances are never
        split).

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2, n_features) or (n_pairs, 2)
            The two points of each pair, or with ``preprocessor`` their indices.
        y : array-like of shape (n_pairs,)
            Pair labels.
        strategy : {"accuracy", "f_beta", "max_tpr", "max_tnr"}, default="accuracy"
            Maximise the accuracy of :meth:`predict` on ``(X, y)``; the
            F-beta score of the similar pairs; the true positive rate with a
            true negative rate of at least ``min_rate``; the true negative
            rate with a true positive rate of at least ``min_rate``. Ties go
            to the first (the smallest threshold).
        min_rate : float in [0, 1] or None, default=None
            For ``"max_tpr"`` and ``"max_tnr"``.
        beta : float, default=1.0
            For ``"f_beta"``.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        _check_calibration_params(strategy, min_rate, beta)
        # any Real (a Fraction too) as a float, which numpy's arithmetic takes
        beta = float(beta) if strategy == "f_beta" else beta
        min_rate = float(min_rate) if strategy in ("max_tpr", "max_tnr") else min_rate
        distances = self.pair_distance(X)
        signs = check_pair_labels(y, len(distances), name="y")
        cuts, tp, fp = _cumulative_counts(distances, signs > 0)
        n_pos, n_neg = tp[-1], fp[-1]
        tpr = tp / max(n_pos, 1)
        tnr = 1.0 - fp / max(n_neg, 1)
        if strategy == "accuracy":
            criterion = (tp + (n_neg - fp)) / len(distances)
        elif strategy == "f_beta":
            with np.errstate(divide="ignore", invalid="ignore"):
                precision = np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1), 0.0)
                f_beta = ((1 + beta**2) * precision * tpr) / (beta**2 * precision + tpr)
            criterion = np.nan_to_num(f_beta, nan=0.0)
        elif strategy == "max_tpr":
            criterion = np.where(tnr >= min_rate, tpr, -np.inf)
        else:
            criterion = np.where(tpr >= min_rate, tnr, -np.inf)
        if not np.any(np.isfinite(criterion)):  # max_tnr without a similar pair
            raise ValueError(f"No threshold reaches a true positive rate of min_rate={min_rate} "
                             f"for {strategy!r}: y holds no similar pair.")
        self.threshold_ = float(cuts[int(np.argmax(criterion))])
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.three_d_array = True
        # a classifier of pairs (metric-learn's pair learners are ClassifierMixin):
        # cross_val_score / GridSearchCV with an integer cv then stratify the pairs
        tags.estimator_type = "classifier"
        tags.classifier_tags = ClassifierTags(multi_class=False)
        return tags
