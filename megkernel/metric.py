"""Learned metrics on features: MEG and DefiniteBoost as transformers.

The objects are the training points, the prior is the linear kernel of the
centred features ``X = U Sigma V^T`` (``W_1 = X X^T / ||X||_F^2``, the
Euclidean metric), and the kernel is learned in low-rank mode inside its
range: ``W = P M P^T = X A X^T`` with ``A = V Sigma^-1 M Sigma^-1 V^T``. So
it extends to new points, ``k(x, x') = tau phi(x)^T M phi(x')`` with
``phi(x) = Sigma^-1 V^T (x - mean)`` and ``tau = ||X||_F^2``, and
:meth:`transform` gives ``sqrt(tau) phi(x) M^{1/2}`` (up to a rotation),
whose Euclidean distances are the learned ones. Before learning they are
the Euclidean distances of the centred features (``M = S``).

The trace constraint fixes the mean squared distance between distinct
training points at ``D = 2 ||X||_F^2 / (n - 1)`` for every learned metric:
a metric can only trade distances against each other. Thresholds that ask
every dissimilar pair to be far beyond ``D`` (ITML's 95% quantile) cannot
all hold; each learner here has a default that allows for that:

* :class:`MEGMetric` regresses squared distances on targets (square loss:
  an unreachable target only leaves a loss, never a failure);
* :class:`DefiniteBoostMetric` asks for thresholds the trace allows on
  average (``0.1 D`` and ``D``) and bounds what a constraint may cost
  (``slack``), the always-feasible soft-margin problem.

Both report how well the learned metric meets the pairs
(``pair_mse_`` for MEG, ``violated_fraction_`` for DefiniteBoost) against the
Euclidean prior (``prior_pair_mse_``, ``prior_violated_fraction_``) and warn
when it is worse: a degraded metric
is never silent.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    _fit_context,
)
from sklearn.metrics import roc_auc_score
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from ._numerics.validation import check_pair_indices
from ._pair_estimator import transactional
from ._solvers.definiteboost import check_pair_signs
from ._warnings import warn_user
from .definiteboost_kernel import DefiniteBoostKernel
from .meg_regressor import MEGKernelRegressor

__all__ = [
    "MEGMetric",
    "DefiniteBoostMetric",
    "MEGPairMetric",
    "DefiniteBoostPairMetric",
    "draw_pairs",
]

_QUANTILE_POINTS = 1000

#: DefiniteBoostMetric's default slack: no constraint may scale the metric by
#: more than a factor of two.
_LOG_2 = math.log(2)

#: Range of the features' total sum of squares (the kernel's trace) within
#: which squared distances, targets and squared losses stay finite.
_MIN_TRACE, _MAX_TRACE = 1e-100, 1e100


def draw_pairs(labels, n_constraints, *, random_state=None, max_rounds=10):
    """Random similar and dissimilar pairs from class labels.

    As metric-learn's ``*_Supervised`` learners: an anchor drawn uniformly,
    its partner uniformly among the other points of its class (similar) or
    of the other classes (dissimilar); repeated pairs are redrawn, at most
    ``max_rounds`` times.

    Parameters
    ----------
    labels : array-like of shape (n_samples,)
    n_constraints : int
        Number of pairs of each kind.
    random_state : int, RandomState instance or None, default=None
    max_rounds : int, default=10

    Returns
    -------
    pairs : ndarray of shape (n_pairs, 2)
        Similar pairs first, then dissimilar ones.
    pair_labels : ndarray of shape (n_pairs,)
        ``+1`` similar, ``-1`` dissimilar.
    """
    labels = np.asarray(labels)
    rng = check_random_state(random_state)
    kinds = []
    for same in (True, False):
        found = {}
        for _ in range(max_rounds):
            missing = n_constraints - len(found)
            if missing <= 0:
                break
            for a in rng.randint(len(labels), size=missing):
                mask = labels == labels[a] if same else labels != labels[a]
                mask[a] = False
                choices = np.flatnonzero(mask)
                if choices.size:
                    b = int(choices[rng.randint(choices.size)])
                    found.setdefault((min(a, b), max(a, b)), (a, b))
        kind = "similar" if same else "dissimilar"
        if len(found) < n_constraints:
            warn_user(f"Only {len(found)} distinct {kind} pairs could be drawn "
                      f"(asked for {n_constraints}).", UserWarning)
        kinds.append(np.array(list(found.values()), dtype=np.intp).reshape(-1, 2)
                     [:n_constraints])
    pair_labels = np.r_[np.ones(len(kinds[0]), int), -np.ones(len(kinds[1]), int)]
    return np.vstack(kinds), pair_labels


class _FeatureMetric(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Shared fitting from labels or pairs and the inductive transform."""

    _parameter_constraints: dict = {
        "gamma": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "gamma_dissimilar": [Interval(Real, 0, None, closed="neither"),
                             StrOptions({"auto"})],
        "n_constraints": [Interval(Integral, 1, None, closed="left"), None],
        "random_state": ["random_state"],
        "method": [StrOptions({"auto", "eigh", "rank-one"})],
        "verbose": ["verbose"],
    }

    @_fit_context(prefer_skip_nested_validation=True)
    @transactional
    def fit(self, X, y):
        """Learn from pairs drawn from class labels.

        ``n_constraints`` similar (same class) and as many dissimilar
        (different classes) pairs of training points are drawn as by
        :func:`draw_pairs`, then fitted as by :meth:`fit_pairs`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Class labels.

        Returns
        -------
        self : object
        """
        X, y = validate_data(self, X, y, ensure_min_samples=2, dtype=float)
        check_classification_targets(y)
        n_classes = np.unique(y).size
        if n_classes < 2:
            raise ValueError(f"y must hold at least 2 classes, got {n_classes}.")
        n_constraints = self.n_constraints or 20 * n_classes**2
        pairs, pair_labels = draw_pairs(y, n_constraints, random_state=self.random_state)
        return self._fit_pairs(X, pairs, pair_labels)

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
            ``+1`` similar, ``-1`` dissimilar.

        Returns
        -------
        self : object
        """
        X = validate_data(self, X, ensure_min_samples=2, dtype=float)
        pairs = check_pair_indices(pairs, len(X), name="pairs")
        pair_labels = np.asarray(pair_labels)
        if pair_labels.shape != (len(pairs),):
            raise ValueError(f"pair_labels must have shape ({len(pairs)},), "
                             f"got {pair_labels.shape}.")
        if not set(np.unique(pair_labels).tolist()) <= {1, -1}:
            raise ValueError("pair_labels must hold +1 (similar) or -1 (dissimilar).")
        return self._fit_pairs(X, pairs, pair_labels.astype(int))

    def _fit_pairs(self, X, pairs, pair_labels):
        self.mean_ = X.mean(axis=0)
        centred = X - self.mean_
        largest = float(np.abs(centred).max())
        if largest == 0:
            raise ValueError("X has no variance: every training point is the same.")
        with np.errstate(over="ignore", under="ignore"):
            trace = float(np.sum(centred * centred))
        if not _MIN_TRACE < trace < _MAX_TRACE:
            raise ValueError(
                f"X's scale is out of range: the centred features reach {largest:.3g} "
                f"and their sum of squares is {trace:.3g}, outside "
                f"({_MIN_TRACE:g}, {_MAX_TRACE:g}) where squared distances and their "
                "squared errors stay in double precision. Rescale X, e.g. with "
                "StandardScaler.")
        estimator = self._kernel_estimator(centred, trace, pairs, pair_labels)
        self.kernel_estimator_ = estimator
        self.components_ = np.linalg.lstsq(centred, estimator.kernel_factor_,
                                           rcond=None)[0].T
        self.pairs_, self.pair_labels_ = pairs, pair_labels
        self._report(centred, trace)
        return self

    def _report(self, centred, trace):
        """The learner's loss on the pairs, before and after; warn if worse."""
        a, b = self.pairs_.T
        prior = np.sum((centred[a] - centred[b]) ** 2, axis=1)
        learned = self.kernel_estimator_.state_.pair_sq_distances(a, b) * trace
        loss, prior_loss = self._constraint_loss(learned), self._constraint_loss(prior)
        setattr(self, f"{self._loss_name}_", loss)
        setattr(self, f"prior_{self._loss_name}_", prior_loss)
        name = type(self).__name__
        if loss > prior_loss:
            warn_user(
                f"{name}: the learned metric meets the pairs worse than the Euclidean "
                f"prior ({self._loss_name}_ {loss:.4g} > {prior_loss:.4g}); the "
                "thresholds may be jointly "
                "infeasible (see the module docs of megkernel.metric).",
                UserWarning)
        if self.verbose:
            print(f"[{name}] rank {self.components_.shape[0]}: {self._loss_name} "
                  f"{loss:.4g} (Euclidean prior {prior_loss:.4g})")

    @property
    def constraint_loss_(self):
        """Deprecated alias of ``pair_mse_`` (MEGMetric) or
        ``violated_fraction_`` (DefiniteBoostMetric)."""
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

        Returns
        -------
        X_new : ndarray of shape (n_samples, rank)
            ``(X - mean_) @ components_.T``.
        """
        check_is_fitted(self, "components_")
        X = validate_data(self, X, reset=False, dtype=float)
        return (X - self.mean_) @ self.components_.T

    def get_mahalanobis_matrix(self):
        """``A = components_.T @ components_``: ``d(x, x')^2 = (x - x')^T A (x - x')``."""
        check_is_fitted(self, "components_")
        return self.components_.T @ self.components_

    def pair_sq_distances(self, X, pairs):
        """Learned squared distances between rows ``pairs[:, 0]`` and ``pairs[:, 1]`` of ``X``."""
        Z = self.transform(X)
        pairs = check_pair_indices(pairs, len(Z), name="pairs")
        return np.sum((Z[pairs[:, 0]] - Z[pairs[:, 1]]) ** 2, axis=1)

    def pair_distances(self, X, pairs):
        """Deprecated alias of :meth:`pair_sq_distances` (squared distances)."""
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
        """Dimension of the embedding (the rank of the centred training features)."""
        check_is_fitted(self, "components_")
        return self.components_.shape[0]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        return tags


class MEGMetric(_FeatureMetric):
    r"""Metric learned on-line with MEG from similar / dissimilar pairs.

    Each pair is an on-line trial of :class:`MEGKernelRegressor` in
    low-rank mode over the training points (prior: the Euclidean metric of
    the centred features), with target squared distance ``gamma`` for a
    similar pair and ``gamma_dissimilar`` for a dissimilar one. The square
    loss is the slack: targets that cannot all be met leave a loss, and the
    metric is the on-line compromise between them.

    Parameters
    ----------
    gamma : float or "auto", default="auto"
        Target squared distance of similar pairs, in the units of the
        squared Euclidean distance of ``X``. ``"auto"``: the 5% quantile of
        the squared distances between distinct training points (ITML's
        lower bound, in squared units).
    gamma_dissimilar : float or "auto", default="auto"
        Target of dissimilar pairs. ``"auto"``: the 95% quantile.
    learning_rate : float or "auto", default="auto"
        MEG's ``eta`` (trace-one units). ``"auto"``: Lemma 3.2's realizable
        rate ``2 / rho^2``, ``rho`` the largest ``||P[a] - P[b]||^2`` over the
        pairs (the instance range in the prior's range).
    n_epochs : int, default=1
        Passes over the pairs.
    n_constraints : int, default=None
        Pairs of each kind drawn by :meth:`fit`; ``None``: ``20 * n_classes**2``.
    random_state : int, RandomState instance or None, default=None
        Seed for drawing the pairs, the trial order and the quantiles.
    method : {"auto", "eigh", "rank-one"}, default="auto"
        Engine of the trials.
    verbose : int, default=0

    Attributes
    ----------
    components_ : ndarray of shape (rank, n_features)
        ``transform(X) = (X - mean_) @ components_.T``.
    mean_ : ndarray of shape (n_features,)
    gamma_, gamma_dissimilar_ : float
        Targets used.
    learning_rate_ : float
    kernel_estimator_ : MEGKernelRegressor
        The fitted learner over the training points (losses, state).
    pairs_, pair_labels_ : ndarray
        The fitted pairs (row indices of the training ``X``) and labels.
    pair_mse_, prior_pair_mse_ : float
        Mean squared error of the squared distances of the pairs against
        their targets under the learned and under the Euclidean metric (a
        warning says when the first is larger).
    n_features_in_ : int

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from megkernel import MEGMetric
    >>> X, y = load_iris(return_X_y=True)
    >>> MEGMetric(random_state=0).fit(X, y).transform(X).shape
    (150, 4)
    """

    _loss_name = "pair_mse"

    _parameter_constraints: dict = {
        **_FeatureMetric._parameter_constraints,
        "learning_rate": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "n_epochs": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(self, *, gamma="auto", gamma_dissimilar="auto", learning_rate="auto",
                 n_epochs=1, n_constraints=None, random_state=None, method="auto",
                 verbose=0):
        self.gamma = gamma
        self.gamma_dissimilar = gamma_dissimilar
        self.learning_rate = learning_rate
        self.n_epochs = n_epochs
        self.n_constraints = n_constraints
        self.random_state = random_state
        self.method = method
        self.verbose = verbose

    def _kernel_estimator(self, centred, trace, pairs, pair_labels):
        rng = check_random_state(self.random_state)
        self.gamma_, self.gamma_dissimilar_ = self._targets(centred, rng)
        targets = np.where(pair_labels > 0, self.gamma_, self.gamma_dissimilar_)
        estimator = MEGKernelRegressor(
            init_factor=centred, trace=trace, learning_rate=self.learning_rate,
            n_epochs=self.n_epochs, shuffle=True, random_state=rng, method=self.method,
        ).fit(pairs, targets)
        self.learning_rate_ = estimator.learning_rate_
        return estimator

    def _constraint_loss(self, sq_distances):
        targets = np.where(self.pair_labels_ > 0, self.gamma_, self.gamma_dissimilar_)
        return float(np.mean((sq_distances - targets) ** 2))

    def _targets(self, centred, rng):
        if self.gamma != "auto" and self.gamma_dissimilar != "auto":
            return float(self.gamma), float(self.gamma_dissimilar)
        low, high = _pair_sq_distance_quantiles(centred, (0.05, 0.95), rng)
        return (low if self.gamma == "auto" else float(self.gamma),
                high if self.gamma_dissimilar == "auto" else float(self.gamma_dissimilar))


class DefiniteBoostMetric(_FeatureMetric):
    r"""Metric from DefiniteBoost's Bregman projection with soft constraints.

    :class:`DefiniteBoostKernel` in low-rank mode over the training points
    (prior: the Euclidean metric of the centred features) with similar
    pairs ``d^2 <= gamma`` and dissimilar pairs ``d^2 >= gamma_dissimilar``.
    Hard constraints from labels are usually jointly infeasible (classes
    overlap, and the trace fixes the mean squared distance ``D``), and
    without slack the projection then degrades the metric. The defaults
    ask what the trace allows on average (``gamma = 0.1 D``, the paper's
    ``0.2 / d`` for the identity prior, and ``gamma_dissimilar = D``) and
    make the constraints soft: with ``slack = log 2`` no single constraint
    may stretch or shrink the metric along its own direction by more than
    a factor of two.

    Parameters
    ----------
    gamma : float or "auto", default="auto"
        Threshold of similar pairs on the squared distance (units of the
        squared Euclidean distance of ``X``). ``"auto"``: ``0.1 D`` with
        ``D = 2 ||X - mean||_F^2 / (n - 1)`` the mean squared distance
        between distinct training points.
    gamma_dissimilar : float or "auto", default="auto"
        Threshold of dissimilar pairs; ``"auto"``: ``D``. Pairs that can
        never reach it are dropped with a warning.
    slack : float or None, default=log(2)
        Cap ``c`` of :class:`DefiniteBoostKernel`'s soft constraints, in
        nats; ``None``: hard constraints (may degrade; warned).
    max_iter : int, default=5000
    tol : float, default=1e-2
    projection : {"approximate", "exact"}, default="approximate"
    n_constraints : int, default=None
        Pairs of each kind drawn by :meth:`fit`; ``None``: ``20 * n_classes**2``.
    random_state : int, RandomState instance or None, default=None
        Seed for drawing the pairs.
    method : {"auto", "eigh", "rank-one"}, default="auto"
    verbose : int, default=0

    Attributes
    ----------
    components_ : ndarray of shape (rank, n_features)
    mean_ : ndarray of shape (n_features,)
    gamma_, gamma_dissimilar_ : float
    kernel_estimator_ : DefiniteBoostKernel
        The fitted projection (iterations, dual objective, dropped pairs).
    n_iter_ : int
        Projections made.
    pairs_, pair_labels_ : ndarray
    violated_fraction_, prior_violated_fraction_ : float
        Share of the pairs violating their threshold under the learned and
        under the Euclidean metric (a warning says when the first is larger).
    n_features_in_ : int

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from megkernel import DefiniteBoostMetric
    >>> X, y = load_iris(return_X_y=True)
    >>> DefiniteBoostMetric(random_state=0).fit(X, y).transform(X).shape
    (150, 4)
    """

    _loss_name = "violated_fraction"

    _parameter_constraints: dict = {
        **_FeatureMetric._parameter_constraints,
        "slack": [Interval(Real, 0, None, closed="neither"), None],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "projection": [StrOptions({"approximate", "exact"})],
    }

    def __init__(self, *, gamma="auto", gamma_dissimilar="auto", slack=_LOG_2,
                 max_iter=5000, tol=1e-2, projection="approximate", n_constraints=None,
                 random_state=None, method="auto", verbose=0):
        self.gamma = gamma
        self.gamma_dissimilar = gamma_dissimilar
        self.slack = slack
        self.max_iter = max_iter
        self.tol = tol
        self.projection = projection
        self.n_constraints = n_constraints
        self.random_state = random_state
        self.method = method
        self.verbose = verbose

    def _kernel_estimator(self, centred, trace, pairs, pair_labels):
        estimator = DefiniteBoostKernel(
            init_factor=centred, trace=trace, gamma=self.gamma,
            gamma_dissimilar=self.gamma_dissimilar, slack=self.slack,
            max_iter=self.max_iter, tol=self.tol, projection=self.projection,
            method=self.method,
        ).fit(pairs, pair_labels)
        self.gamma_ = estimator.gamma_
        self.gamma_dissimilar_ = estimator.gamma_dissimilar_
        self.n_iter_ = estimator.n_iter_
        return estimator

    def _constraint_loss(self, sq_distances):
        met = np.where(self.pair_labels_ > 0, sq_distances <= self.gamma_,
                       sq_distances >= self.gamma_dissimilar_)
        return float(1.0 - met.mean())


def _pair_sq_distance_quantiles(centred, quantiles, rng):
    """Quantiles of squared distances between distinct rows.

    Exact up to 1000 rows; beyond, those of all pairs of 1000 random rows.
    """
    if len(centred) > _QUANTILE_POINTS:
        centred = centred[rng.choice(len(centred), _QUANTILE_POINTS, replace=False)]
    sq_distances = euclidean_distances(centred, squared=True)
    return tuple(np.quantile(sq_distances[np.triu_indices(len(centred), k=1)], quantiles))


def _pair_labels(y, n_pairs):
    """Pair labels as +1 / -1 (distinct objects assumed: no self-pair check)."""
    return check_pair_signs(y, np.tile([0, 1], (n_pairs, 1)), name="y")


class _PairInput:
    """Pairs of points as ``X`` (shape (n_pairs, 2, n_features), metric-learn's
    convention) with pair labels as ``y``, so that scikit-learn's
    cross-validation splits the pairs: ``fit``, ``decision_function``,
    ``predict``, ``score`` (ROC AUC) and ``calibrate_threshold`` on pairs;
    ``transform`` embeds single points as for the supervised learner."""

    @_fit_context(prefer_skip_nested_validation=True)
    @transactional
    def fit(self, X, y):
        """Learn from labelled pairs of points, then calibrate ``threshold_``.

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
        """
        pairs_of_points = self._check_pairs(X, reset=True)
        n_pairs, _, n_features = pairs_of_points.shape
        points, inverse = np.unique(pairs_of_points.reshape(-1, n_features), axis=0,
                                    return_inverse=True)
        pairs = inverse.reshape(n_pairs, 2)
        signs = check_pair_signs(y, pairs, name="y").astype(int)
        if len(points) < 2:
            raise ValueError("The pairs hold fewer than 2 distinct points.")
        self._fit_pairs(points, pairs, signs)
        self.classes_ = np.array([-1, 1])
        return self.calibrate_threshold(X, y)

    def _check_pairs(self, X, *, reset):
        pairs_of_points = np.asarray(X, dtype=float)
        if pairs_of_points.ndim != 3 or pairs_of_points.shape[1] != 2:
            raise ValueError("X must hold pairs of points, shape (n_pairs, 2, n_features), "
                             f"got shape {pairs_of_points.shape}.")
        if len(pairs_of_points) == 0:
            raise ValueError("X holds no pairs.")
        if not np.all(np.isfinite(pairs_of_points)):
            raise ValueError("X contains NaN or infinite values.")
        n_features = pairs_of_points.shape[2]
        if reset:
            self.n_features_in_ = n_features
        elif n_features != self.n_features_in_:
            raise ValueError(f"X has {n_features} features per point, but "
                             f"{type(self).__name__} was fitted with {self.n_features_in_}.")
        return pairs_of_points

    def pair_score(self, X):
        """Learned squared distances of pairs of points, shape (n_pairs,)."""
        check_is_fitted(self, "components_")
        pairs_of_points = self._check_pairs(X, reset=False)
        difference = (pairs_of_points[:, 0] - pairs_of_points[:, 1]) @ self.components_.T
        return np.einsum("ij,ij->i", difference, difference)

    def decision_function(self, X):
        """``threshold_ - squared distance``: positive for pairs called similar."""
        return self.threshold_ - self.pair_score(X)

    def predict(self, X):
        """``+1`` (similar) where the squared distance is ``<= threshold_``, else ``-1``."""
        return np.where(self.decision_function(X) >= 0, 1, -1)

    def score(self, X, y):
        """ROC AUC of :meth:`decision_function` on labelled pairs (metric-learn's)."""
        signs = _pair_labels(y, len(np.asarray(X)))
        return float(roc_auc_score(signs, self.decision_function(X)))

    def calibrate_threshold(self, X, y, *, strategy="accuracy"):
        """Set ``threshold_`` to the squared distance that best separates the pairs.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2, n_features)
        y : array-like of shape (n_pairs,)
            Pair labels.
        strategy : {"accuracy"}, default="accuracy"
            Maximise the accuracy of :meth:`predict` on ``(X, y)``; ties go
            to the midpoint between neighbouring distances.

        Returns
        -------
        self : object
        """
        if strategy != "accuracy":
            raise ValueError(f"strategy must be 'accuracy', got {strategy!r}.")
        distances = self.pair_score(X)
        signs = _pair_labels(y, len(distances))
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


class MEGPairMetric(_PairInput, MEGMetric):
    """:class:`MEGMetric` learned from labelled pairs of points.

    ``X`` holds pairs of points, shape (n_pairs, 2, n_features), and ``y``
    their labels, as metric-learn's pair learners (``ITML``): scikit-learn's
    ``GridSearchCV`` / ``cross_val_score`` then split the pairs. The distinct
    points of the pairs are the objects; :meth:`transform` embeds any point.
    After fitting, ``threshold_`` is calibrated on the training pairs
    (:meth:`calibrate_threshold`); :meth:`score` is the ROC AUC.

    Parameters are those of :class:`MEGMetric` (``n_constraints`` unused).

    Examples
    --------
    >>> import numpy as np
    >>> from megkernel import MEGPairMetric
    >>> rng = np.random.default_rng(0)
    >>> points = rng.normal(size=(40, 3))
    >>> labels = (points[:, 0] > 0).astype(int)
    >>> a, b = rng.integers(0, 40, (2, 200))
    >>> pairs = np.stack([points[a], points[b]], axis=1)
    >>> model = MEGPairMetric(random_state=0).fit(pairs, labels[a] == labels[b])
    >>> model.predict(pairs[:3]).shape
    (3,)
    """


class DefiniteBoostPairMetric(_PairInput, DefiniteBoostMetric):
    """:class:`DefiniteBoostMetric` learned from labelled pairs of points.

    As :class:`MEGPairMetric`: ``X`` of shape (n_pairs, 2, n_features),
    ``y`` the pair labels; ``threshold_`` calibrated on the training pairs,
    :meth:`score` the ROC AUC.
    """
