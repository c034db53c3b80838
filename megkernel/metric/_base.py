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

* :class:`MEGMetric` learns with a one-sided square loss (a similar pair
  counts while farther than ``gamma``, a dissimilar one while nearer than
  ``gamma_dissimilar``, the median squared distance): an unreachable target
  only leaves a loss, never a failure;
* :class:`DefiniteBoostMetric` asks for thresholds the trace allows on
  average (``0.1 D`` and ``D``) and bounds what a constraint may cost
  (``slack``), the always-feasible soft-margin problem.

Both choose how long to learn by cross-validation over the training points
(``n_epochs="auto"``, ``max_iter="auto"``) and keep the Euclidean metric
unless learning gains clearly on held-out points. Both report how well the
learned metric meets the pairs
(``pair_mse_`` for MEG, ``violated_fraction_`` for DefiniteBoost) against the
Euclidean prior (``prior_pair_mse_``, ``prior_violated_fraction_``) and warn
when it is worse: a degraded metric
is never silent.
"""

from __future__ import annotations

import math
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    _fit_context,
)
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import roc_auc_score
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from ._numerics.spectral import check_symmetric
from ._numerics.state import ExponentState
from ._numerics.validation import check_pair_indices
from ._pair_estimator import transactional
from ._solvers.definiteboost import (
    check_pair_signs,
    fit_pair_constraints,
    pair_thresholds,
    satisfiable_pairs,
)
from ._solvers.metric_meg import (
    HeldOutScorer,
    MetricExponent,
    choose_checkpoint,
    divergence_to,
    mean_range_learning_rate,
    normalised_loss,
    one_sided_residuals,
    online_bound,
    online_trials,
    pair_components,
    run_batches,
    validate_epochs,
    validation_folds,
    whiten,
)
from ._warnings import warn_user
from .definiteboost_kernel import DefiniteBoostKernel

__all__ = [
    "MEGMetric",
    "DefiniteBoostMetric",
    "MEGPairMetric",
    "DefiniteBoostPairMetric",
    "draw_pairs",
]

_QUANTILE_POINTS = 1000

#: Lengths of DefiniteBoostMetric's validated runs, in sweeps (greedy steps
#: per pair).
_SWEEPS = (0.0, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0)

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
        trace = _check_trace(centred)
        self.components_ = self._learn(centred, trace, pairs, pair_labels)
        self.pairs_, self.pair_labels_ = pairs, pair_labels
        self._report(centred)
        return self

    def _report(self, centred):
        """The learner's loss on the pairs, before and after; warn if worse."""
        a, b = self.pairs_.T
        prior = np.sum((centred[a] - centred[b]) ** 2, axis=1)
        embedded = centred @ self.components_.T
        learned = np.sum((embedded[a] - embedded[b]) ** 2, axis=1)
        loss, prior_loss = self._constraint_loss(learned), self._constraint_loss(prior)
        setattr(self, f"{self._loss_name}_", loss)
        setattr(self, f"prior_{self._loss_name}_", prior_loss)
        name = type(self).__name__
        if loss > prior_loss * (1 + 1e-9):
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
    r"""Metric learned with MEG from similar / dissimilar pairs, in batch or on-line.

    The metric lives in the whitened coordinates of the centred training
    points (``z = S^-1 V^T (x - mean)``, see :mod:`megkernel.metric`): a
    density matrix ``M`` with the Euclidean metric ``S^2 / tau`` as prior,
    and ``d^2(x, x') = tau (z - z')^T M (z - z')``. Each pair is an MEG trial
    (eqs. 2-4) with instance ``u u^T``, ``u = z - z'``, and target
    ``gamma`` (similar) or ``gamma_dissimilar`` (dissimilar).

    With the default one-sided loss a similar pair counts only when farther
    than ``gamma`` and a dissimilar one only when nearer than
    ``gamma_dissimilar``; a pair that meets its target makes no update. It
    keeps the square loss's relative loss bound (derivation:
    the README, "The one-sided loss and its bound"), and is the loss of the k-NN goal: only the
    order of distances matters.

    :meth:`fit` runs mini-batch epochs (one eigendecomposition per batch)
    for a length chosen by cross-validation over the training points;
    :meth:`partial_fit` learns from a stream of pairs of points, one MEG
    update per pair at the bound's rate, and keeps the cumulative loss that
    :meth:`online_bound` sets beside its bound.

    Parameters
    ----------
    gamma : float or "auto", default="auto"
        Target squared distance of similar pairs, in the units of the
        squared Euclidean distance of ``X``. ``"auto"``: 0 (a similar pair's
        loss is its squared distance).
    gamma_dissimilar : float or "auto", default="auto"
        Target of dissimilar pairs. ``"auto"``: the median squared distance
        between distinct training points. (The trace fixes the mean squared
        distance: every dissimilar pair can be at least as far as a typical
        pair, not all beyond a high quantile.)
    loss : {"one-sided", "square"}, default="one-sided"
        ``"square"``: every pair's error counts (the paper's loss).
    learning_rate : float or "auto", default="auto"
        MEG's ``eta`` (trace-one units) for :meth:`fit`. ``"auto"``: Lemma
        3.2's rate ``2 / rho^2`` at the mean instance range ``rho`` (mean of
        ``||u||^2`` over the pairs).
    n_epochs : int, float or "auto", default="auto"
        Passes over the pairs in :meth:`fit` (fractions allowed; 0 keeps the
        Euclidean metric). ``"auto"``: the best of 0, 1/8, 1/4, ..., 16 by
        ``n_folds``-fold cross-validation over the training points (see
        :attr:`validation_`).
    batch_size : int or "auto", default="auto"
        Pairs per MEG update in :meth:`fit` (1: on-line MEG). ``"auto"``:
        ``max(50, 2 rank)``, so that a batch's products (``O(b rank^2)``)
        cost about one eigendecomposition (``O(rank^3)``).
    n_folds : int, default=2
        Folds of the validation for ``n_epochs="auto"``.
    shuffle : bool, default=True
        Draw a new order of the pairs for each epoch.
    n_constraints : int, default=None
        Pairs of each kind drawn by :meth:`fit`; ``None``: ``20 * n_classes**2``.
    random_state : int, RandomState instance or None, default=None
        Seed for drawing the pairs, the folds and the order of the pairs.
    method : {"auto", "eigh", "rank-one"}, default="auto"
        Deprecated and ignored: the metric is learned in its own
        ``rank x rank`` space, one eigendecomposition per batch.
    verbose : int, default=0

    Attributes
    ----------
    components_ : ndarray of shape (rank, n_features)
        ``transform(X) = (X - mean_) @ components_.T``.
    mean_ : ndarray of shape (n_features,)
    gamma_, gamma_dissimilar_ : float
        Targets used.
    learning_rate_ : float
    n_epochs_ : float
        Epochs run by :meth:`fit`.
    validation_ : dict or None
        ``n_epochs="auto"``: ``"score"`` (``"knn"``: mean relative 1-NN margin
        of held-out points, the similar pairs' connected components standing
        in for classes; ``"auc"``: ROC AUC of held-out pairs, when the
        components cannot), ``"checkpoints"`` and their mean ``"scores"``.
    pairs_, pair_labels_ : ndarray
        The fitted pairs (row indices of the training ``X``) and labels.
    pair_mse_, prior_pair_mse_ : float
        Mean of the pairs' counted squared errors against their targets
        under the learned and under the Euclidean metric (a warning says
        when the first is larger).
    n_pairs_seen_ : int
        Pairs learned on-line by :meth:`partial_fit`.
    online_loss_ : float
        Sum of the on-line trials' losses (squared distance units squared).
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
        "gamma": [Interval(Real, 0, None, closed="left"), StrOptions({"auto"})],
        "loss": [StrOptions({"one-sided", "square"})],
        "learning_rate": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "n_epochs": [Interval(Real, 0, None, closed="left"), StrOptions({"auto"})],
        "batch_size": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "n_folds": [Interval(Integral, 2, None, closed="left")],
        "shuffle": ["boolean"],
    }

    def __init__(self, *, gamma="auto", gamma_dissimilar="auto", loss="one-sided",
                 learning_rate="auto", n_epochs="auto", batch_size="auto", n_folds=2,
                 shuffle=True, n_constraints=None, random_state=None, method="auto",
                 verbose=0):
        self.gamma = gamma
        self.gamma_dissimilar = gamma_dissimilar
        self.loss = loss
        self.learning_rate = learning_rate
        self.n_epochs = n_epochs
        self.batch_size = batch_size
        self.n_folds = n_folds
        self.shuffle = shuffle
        self.n_constraints = n_constraints
        self.random_state = random_state
        self.method = method
        self.verbose = verbose

    # -- batch -----------------------------------------------------------------

    def _learn(self, centred, trace, pairs, pair_labels):
        if self.method != "auto":
            warn_user("MEGMetric's method is deprecated since megkernel 0.3 and ignored "
                      "(the metric is learned in its rank x rank space); it will be "
                      "removed in 0.4.", FutureWarning)
        seed = check_random_state(self.random_state).randint(np.iinfo(np.int32).max)
        rng = np.random.default_rng(seed)
        self._start_space(centred, rng)
        diffs = self._pair_diffs(self.coordinates_, pairs)
        targets, sides = self._targets_and_sides(pair_labels)
        self.learning_rate_ = (mean_range_learning_rate(diffs)
                               if self.learning_rate == "auto" else float(self.learning_rate))
        prior = self.scales_**2 / self.trace_
        batch_size = (max(50, 2 * len(prior)) if self.batch_size == "auto"
                      else self.batch_size)
        self.validation_ = None
        if self.n_epochs == "auto":
            epochs, self.validation_ = validate_epochs(
                self.coordinates_, pairs, targets, sides, pair_labels, prior,
                learning_rate=self.learning_rate_, batch_size=batch_size, rng=rng,
                n_folds=self.n_folds)
        else:
            epochs = float(self.n_epochs)
        exponent = MetricExponent.from_prior(prior)
        run_batches(exponent, diffs, targets, sides, learning_rate=self.learning_rate_,
                    n_seen=0, n_more=int(round(epochs * len(diffs))),
                    batch_size=batch_size, rng=rng if self.shuffle else None)
        self.n_epochs_ = epochs
        self._set_online_start(exponent, float(np.einsum("ij,ij->i", diffs, diffs).max()))
        if self.verbose:
            print(f"[MEGMetric] {epochs:g} epochs at learning rate {self.learning_rate_:.4g}"
                  + (f" ({self.validation_['score']} validation)" if self.validation_ else ""))
        return self._components()

    def _start_space(self, centred, rng):
        """Whitened coordinates and targets of the training points."""
        self.coordinates_, self.scales_, self.directions_, self.trace_ = whiten(centred)
        self.gamma_, self.gamma_dissimilar_ = self._targets(centred, rng)

    def _targets(self, centred, rng):
        gamma = 0.0 if self.gamma == "auto" else float(self.gamma)
        if self.gamma_dissimilar != "auto":
            return gamma, float(self.gamma_dissimilar)
        (median,) = _pair_sq_distance_quantiles(centred, (0.5,), rng)
        return gamma, float(median)

    def _targets_and_sides(self, signs):
        targets = np.where(signs > 0, self.gamma_, self.gamma_dissimilar_) / self.trace_
        sides = np.where(signs > 0, 1.0, -1.0) if self.loss == "one-sided" else np.zeros(
            len(signs))
        return targets, sides

    @staticmethod
    def _pair_diffs(coordinates, pairs):
        return coordinates[pairs[:, 0]] - coordinates[pairs[:, 1]]

    def _whiten_points(self, points):
        return ((points - self.mean_) @ self.directions_.T) / self.scales_

    def _components(self):
        exponent = self.exponent_
        root = exponent.eigvecs * np.sqrt(exponent.weights * self.trace_)
        return root.T @ (self.directions_ / self.scales_[:, None])

    def _set_online_start(self, exponent, largest_range):
        self.exponent_ = exponent
        self.online_start_ = exponent.density()
        self.online_start_log_ = exponent.log_density()
        self.online_range_ = largest_range
        self.online_start_range_ = largest_range
        self.n_pairs_seen_ = 0
        self.online_loss_ = 0.0
        self.online_normalised_loss_ = 0.0

    def _constraint_loss(self, sq_distances):
        targets, sides = self._targets_and_sides(self.pair_labels_)
        residuals = one_sided_residuals(sq_distances, targets * self.trace_, sides)
        return float(np.mean(residuals**2))

    # -- on-line ---------------------------------------------------------------

    @_fit_context(prefer_skip_nested_validation=True)
    @transactional
    def partial_fit(self, X, y):
        """Learn on-line from labelled pairs of points, one MEG update per pair.

        After :meth:`fit`, the metric goes on learning in the training
        points' whitened coordinates (parts of new points outside their span
        are ignored, as by :meth:`transform`). Without a previous fit, the
        first call's distinct points set the coordinates, the Euclidean
        prior and the targets. Each pair is one trial at Lemma 3.1's rate
        ``1 / rho_t^2`` (``c = 2``), ``rho_t`` the largest instance range
        seen so far; see :meth:`online_bound`.

        A chunk of labelled points (2-D ``X``, class labels ``y``) is turned
        into pairs as by :meth:`fit` (``n_constraints`` of each kind, drawn
        within the chunk) and learned in the same way.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2, n_features) or (n_samples, n_features)
            The two points of each pair, in the order they arrive; or points.
        y : array-like of shape (n_pairs,) or (n_samples,)
            Pair labels, ``+1`` / ``1`` / ``True`` similar, ``-1`` / ``0`` /
            ``False`` dissimilar; or the points' class labels.

        Returns
        -------
        self : object
        """
        first = not hasattr(self, "exponent_")
        if np.ndim(X) == 2:
            pairs_of_points, signs = self._chunk_pairs(X, y, reset=first)
        else:
            pairs_of_points = _check_pairs_of_points(
                X, None if first else self.n_features_in_)
            signs = _pair_labels(y, len(pairs_of_points))
        if first:
            self._start_online(pairs_of_points)
        diffs, ranges = self._stream_diffs(pairs_of_points)
        targets, sides = self._targets_and_sides(signs)
        ranges = np.maximum.accumulate(np.r_[self.online_range_, ranges])[1:]
        exponent = self.exponent_.copy()
        losses = online_trials(exponent, diffs, targets, sides, ranges)
        self.exponent_ = exponent
        self.online_range_ = float(ranges[-1])
        self.n_pairs_seen_ += len(diffs)
        self.online_loss_ += float(losses.sum()) * self.trace_**2
        self.online_normalised_loss_ += normalised_loss(losses, ranges)
        self.components_ = self._components()
        return self

    def _chunk_pairs(self, X, y, *, reset):
        """Pairs of points drawn from a chunk of labelled points."""
        X, y = validate_data(self, X, y, reset=reset, ensure_min_samples=2, dtype=float)
        check_classification_targets(y)
        n_classes = np.unique(y).size
        if n_classes < 2:
            raise ValueError(f"y must hold at least 2 classes, got {n_classes}.")
        seed = None if self.random_state is None else check_random_state(
            self.random_state).randint(np.iinfo(np.int32).max) + getattr(
            self, "n_pairs_seen_", 0)
        pairs, signs = draw_pairs(y, self.n_constraints or 20 * n_classes**2,
                                  random_state=seed)
        return X[pairs], signs.astype(float)

    def _start_online(self, pairs_of_points):
        n_features = pairs_of_points.shape[2]
        points = np.unique(pairs_of_points.reshape(-1, n_features), axis=0)
        if len(points) < 2:
            raise ValueError("The first pairs of partial_fit hold fewer than 2 distinct "
                             "points: they cannot set the metric's coordinates.")
        self.n_features_in_ = n_features
        self.mean_ = points.mean(axis=0)
        centred = points - self.mean_
        _check_trace(centred)
        seed = check_random_state(self.random_state).randint(np.iinfo(np.int32).max)
        self._start_space(centred, np.random.default_rng(seed))
        self.learning_rate_ = None
        self.n_epochs_ = 0.0
        self.validation_ = None
        self._set_online_start(MetricExponent.from_prior(self.scales_**2 / self.trace_),
                               0.0)

    def _stream_diffs(self, pairs_of_points):
        """Whitened differences of the pairs and their ranges ``||u||^2``.

        Raises before any state changes when a pair lies so far outside the
        coordinates' scale that its squared distance (in X's units) or its
        squared loss would leave double precision.
        """
        with np.errstate(all="ignore"):
            diffs = (self._whiten_points(pairs_of_points[:, 0])
                     - self._whiten_points(pairs_of_points[:, 1]))
            ranges = np.einsum("ij,ij->i", diffs, diffs)
            sq_distances = ranges * self.trace_
        limit = _MAX_TRACE
        if not (np.all(np.isfinite(ranges)) and np.all(sq_distances < limit)
                and np.all(ranges < limit)):
            worst = int(np.argmax(np.where(np.isfinite(sq_distances), sq_distances,
                                           np.inf)))
            raise ValueError(
                f"Pair {worst} lies far outside the scale of the metric's points: its "
                f"squared Euclidean distance is {sq_distances[worst]:.3g} (limit "
                f"{limit:g}), where its squared loss would leave double precision. "
                "Rescale X as the points the metric was fitted on.")
        return diffs, ranges

    def online_bound(self, X, y, *, comparator=None):
        """The on-line loss beside its relative loss bound.

        For the stream of pairs given to :meth:`partial_fit` since the last
        :meth:`fit` (all of them, in the same order), and any comparator
        metric ``U`` in the same coordinates (a density matrix)::

            sum_t loss_t / rho_t^2 <= 2 sum_t loss_U,t / rho_t^2 + Delta(U, M_start)

        with ``M_start`` the metric before the stream (the Euclidean prior,
        or the fitted one) and ``Delta`` the von Neumann divergence (eq. 1);
        losses in trace-one units. Derivation: the README, "The one-sided loss and its bound".

        Parameters
        ----------
        X, y : the stream, as given to :meth:`partial_fit`.
        comparator : ndarray of shape (rank, rank) or None
            ``None``: the metric learned so far (hindsight's comparator).

        Returns
        -------
        dict
            ``"loss"`` (the left side), ``"bound"`` (the right side),
            ``"comparator_loss"`` and ``"divergence"``.
        """
        check_is_fitted(self, "exponent_")
        pairs_of_points = _check_pairs_of_points(X, self.n_features_in_)
        signs = _pair_labels(y, len(pairs_of_points))
        if len(pairs_of_points) != self.n_pairs_seen_:
            raise ValueError(f"Give the whole stream: partial_fit saw {self.n_pairs_seen_} "
                             f"pairs since the last fit, got {len(pairs_of_points)}.")
        diffs, ranges = self._stream_diffs(pairs_of_points)
        targets, sides = self._targets_and_sides(signs)
        ranges = np.maximum.accumulate(np.r_[self.online_start_range_, ranges])[1:]
        if comparator is None:
            U = self.exponent_.density()
            divergence = self.exponent_.divergence_from(self.online_start_log_)
        else:
            U = check_symmetric(comparator, name="comparator")
            if U.shape != self.online_start_.shape:
                raise ValueError(f"comparator must have shape {self.online_start_.shape}, "
                                 f"got {U.shape}.")
            if np.linalg.eigvalsh(U)[0] < -1e-12 * np.abs(U).max() or np.trace(U) <= 0:
                raise ValueError("comparator must be positive semidefinite and nonzero.")
            U = U / np.trace(U)
            divergence = divergence_to(U, self.online_start_log_)
        projected = np.einsum("ij,jk,ik->i", diffs, U, diffs)
        comparator_losses = one_sided_residuals(projected, targets, sides) ** 2
        return {"loss": self.online_normalised_loss_,
                "bound": online_bound(comparator_losses, ranges, divergence),
                "comparator_loss": normalised_loss(comparator_losses, ranges),
                "divergence": divergence}


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
    max_iter : int or "auto", default="auto"
        Greedy projections. ``"auto"``: ``round(s * n_pairs)`` for the best
        number of sweeps ``s`` of 0, 1/8, 1/4, 1/2, 1, 2, 4 by ``n_folds``-fold
        cross-validation over the training points, as :class:`MEGMetric`'s
        ``n_epochs`` (see :attr:`validation_`); a run that converges earlier
        stops there.
    tol : float, default=1e-2
    projection : {"approximate", "exact"}, default="approximate"
    n_folds : int, default=2
        Folds of the validation for ``max_iter="auto"``.
    n_constraints : int, default=None
        Pairs of each kind drawn by :meth:`fit`; ``None``: ``20 * n_classes**2``.
    random_state : int, RandomState instance or None, default=None
        Seed for drawing the pairs and the validation's folds.
    method : {"auto", "eigh", "rank-one"}, default="auto"
    verbose : int, default=0

    Attributes
    ----------
    components_ : ndarray of shape (rank, n_features)
    mean_ : ndarray of shape (n_features,)
    gamma_, gamma_dissimilar_ : float
    kernel_estimator_ : DefiniteBoostKernel or None
        The fitted projection (iterations, dual objective, dropped pairs);
        ``None`` when the validation kept the Euclidean metric.
    n_iter_ : int
        Projections made (0 when the validation kept the Euclidean metric).
    validation_ : dict or None
        ``max_iter="auto"``: ``"score"``, ``"checkpoints"`` (sweeps), their
        mean ``"scores"``, ``"gain_is_real"`` and ``"n_repeats"``.
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
        "max_iter": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "n_folds": [Interval(Integral, 2, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "projection": [StrOptions({"approximate", "exact"})],
    }

    def __init__(self, *, gamma="auto", gamma_dissimilar="auto", slack=_LOG_2,
                 max_iter="auto", tol=1e-2, projection="approximate", n_folds=2,
                 n_constraints=None,
                 random_state=None, method="auto", verbose=0):
        self.gamma = gamma
        self.gamma_dissimilar = gamma_dissimilar
        self.slack = slack
        self.max_iter = max_iter
        self.n_folds = n_folds
        self.tol = tol
        self.projection = projection
        self.n_constraints = n_constraints
        self.random_state = random_state
        self.method = method
        self.verbose = verbose

    def _learn(self, centred, trace, pairs, pair_labels):
        self.validation_ = None
        max_iter = self.max_iter
        if max_iter == "auto":
            max_iter = self._validated_max_iter(centred, trace, pairs, pair_labels)
            if max_iter == 0:  # the Euclidean metric earned its place
                return self._keep_euclidean(centred, trace, pairs, pair_labels)
        with warnings.catch_warnings():
            if self.max_iter == "auto":  # stopping early is the validated choice
                warnings.simplefilter("ignore", ConvergenceWarning)
            estimator = DefiniteBoostKernel(
                init_factor=centred, trace=trace, gamma=self.gamma,
                gamma_dissimilar=self.gamma_dissimilar, slack=self.slack,
                max_iter=max_iter, tol=self.tol, projection=self.projection,
                method=self.method).fit(pairs, pair_labels)
        self.gamma_ = estimator.gamma_
        self.gamma_dissimilar_ = estimator.gamma_dissimilar_
        self.n_iter_ = estimator.n_iter_
        self.kernel_estimator_ = estimator
        return np.linalg.lstsq(centred, estimator.kernel_factor_, rcond=None)[0].T

    def _validated_max_iter(self, centred, trace, pairs, signs):
        """Greedy steps by cross-validation over the training points."""
        seed = check_random_state(self.random_state).randint(np.iinfo(np.int32).max)
        rng = np.random.default_rng(seed)
        labels = pair_components(len(centred), pairs, signs)
        masks, n_repeats = validation_folds(len(centred), pairs, labels,
                                            n_folds=self.n_folds, rng=rng)
        scorers = [HeldOutScorer(mask, pairs, signs, labels, rng) for mask in masks]
        scorers = [scorer for scorer in scorers if scorer.usable]
        sweeps = _SWEEPS
        if not scorers:
            return int(round(sweeps[-1] * len(pairs)))
        items = [[] for _ in sweeps]
        for scorer in scorers:
            for row, item in zip(items, self._fold_path(centred, trace, pairs, signs,
                                                        scorer, sweeps)):
                row.append(item)
        best, scores, real = choose_checkpoint(sweeps, items, n_repeats=n_repeats)
        self.validation_ = {"score": "knn" if labels is not None else "auc",
                            "checkpoints": list(sweeps), "scores": scores,
                            "gain_is_real": real, "n_repeats": n_repeats}
        return 0 if best == 0 else max(1, int(round(best * len(pairs))))

    def _fold_path(self, centred, trace, pairs, signs, scorer, sweeps):
        """One fold's scores after each number of sweeps (0: the prior)."""
        state = ExponentState.from_factor(centred, name="X")
        fold_pairs, fold_signs = pairs[scorer.train], signs[scorer.train]
        steps = [int(round(s * len(fold_pairs))) for s in sweeps]
        found = {0: scorer.score(state.factor())}

        def callback(t, record):
            if t in steps and t not in found:
                found[t] = scorer.score(state.factor())

        with warnings.catch_warnings():  # the final fit warns, not its folds
            warnings.simplefilter("ignore")
            fit_pair_constraints(
                state, fold_pairs, fold_signs, gamma=self.gamma,
                gamma_dissimilar=self.gamma_dissimilar, trace=trace, slack=self.slack,
                projection=self.projection, max_iter=max(steps[-1], 1), tol=self.tol,
                method=self.method, callback=callback)
        final = scorer.score(state.factor())  # converged early: it stays there
        return [found.get(step, final) for step in steps]

    def _keep_euclidean(self, centred, trace, pairs, signs):
        state = ExponentState.from_factor(centred, name="X")
        thresholds, self.gamma_, self.gamma_dissimilar_ = pair_thresholds(
            state, signs, gamma=self.gamma, gamma_dissimilar=self.gamma_dissimilar,
            trace=trace)
        satisfiable_pairs(state, pairs, signs, thresholds, trace)  # warns
        self.n_iter_ = 0
        self.kernel_estimator_ = None
        return np.linalg.svd(centred, full_matrices=False)[2][:state.size]

    def _constraint_loss(self, sq_distances):
        met = np.where(self.pair_labels_ > 0, sq_distances <= self.gamma_,
                       sq_distances >= self.gamma_dissimilar_)
        return float(1.0 - met.mean())


def _check_trace(centred):
    """The centred features' sum of squares, if squared distances stay finite."""
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
        pairs_of_points = _check_pairs_of_points(X, None if reset else self.n_features_in_)
        if reset:
            self.n_features_in_ = pairs_of_points.shape[2]
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
