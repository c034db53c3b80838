"""MEGMetric: a metric learned with MEG from similar / dissimilar pairs.

The estimator of :mod:`megkernel.metric` (see its docs for the coordinates and the loss):
it validates, makes one call of the solver :func:`megkernel._solvers.metric_meg_fit.fit_meg_metric`
(the MEG arithmetic, the validated kind and number of epochs) and commits its result;
:meth:`MEGMetric.partial_fit` runs the on-line trials of :mod:`megkernel._solvers.metric_meg`.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.base import _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from .._numerics.seeding import derived_generator, derived_seed
from .._numerics.spectral import check_symmetric
from .._numerics.validation import check_pair_labels
from .._pair_estimator import check_class_labels, transactional
from .._solvers.holdout import MAX_PASSES
from .._solvers.metric_meg import (
    MetricExponent,
    divergence_to,
    metric_components,
    normalised_loss,
    one_sided_residuals,
    online_bound,
    online_trials,
    targets_and_sides,
)
from .._solvers.metric_meg_fit import MEGMetricOptions, fit_meg_metric, metric_space
from .._solvers.metric_pairs import pairs_from_labels
from .._warnings import warn_user
from ._base import _MAX_TRACE, _check_pairs_of_points, _check_trace, _FeatureMetric

__all__ = ["MEGMetric"]


class MEGMetric(_FeatureMetric):
    r"""Metric learned with MEG from similar / dissimilar pairs, in batch or on-line.

    The metric lives in the whitened coordinates of the centered training
    points (``z = S^-1 V^T (x - mean)``, see :mod:`megkernel.metric`): a
    density matrix ``M`` with the Euclidean metric ``S^2 / tau`` as prior,
    and ``d^2(x, x') = tau (z - z')^T M (z - z')``. Each pair is an MEG trial
    (eqs. 2-4) with instance ``u u^T``, ``u = z - z'``, and target
    ``gamma`` (similar) or ``gamma_dissimilar`` (dissimilar).

    With the default one-sided loss a similar pair counts only when farther
    than ``gamma`` and a dissimilar one only when nearer than
    ``gamma_dissimilar``; a pair that meets its target makes no update. It
    keeps the square loss's relative loss bound (Lemma 3.1 of the paper;
    derivation in ``docs/user_guide/metrics.rst``, "The one-sided loss and
    its bound"), and is the loss of the k-NN goal: only the order of
    distances matters.

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
        between distinct training points. The trace fixes the mean squared
        distance: every dissimilar pair can be at least as far as a typical
        pair, not all beyond a high quantile.
    loss : {"one-sided", "square"}, default="one-sided"
        ``"square"``: every pair's error counts (the paper's loss).
    learning_rate : float or "auto", default="auto"
        MEG's ``eta`` (trace-one units) for :meth:`fit`. ``"auto"``: Lemma
        3.2's rate ``2 / rho^2`` at the mean instance range ``rho`` (mean of
        ``||u||^2`` over the pairs).
    n_epochs : int, float or "auto", default="auto"
        Passes over the pairs in :meth:`fit` (fractions allowed; 0 keeps the
        Euclidean metric). ``"auto"``: chosen by ``n_folds``-fold
        cross-validation over the training points among 0, 1/8, 1/4, 1/2,
        1, 2, ... epochs, going on while a longer run's validated gain is
        real and still grows at least as the square root of the epochs (no
        fixed cap but ``max_iter``; see :attr:`validation_` and
        :mod:`megkernel._solvers.holdout`); with MEG's pair loss, the final
        run on every pair is longer, by the pairs over a fold's or as far
        as the folds' held-out 1-NN margins held the choice, whichever is
        less; only where the folds scored 1-NN margins and a fold held at
        least half the pairs (five folds, about 64 %: 1.56 times; not with
        two or three folds).
    max_iter : int, default=1000
        Safety net of ``n_epochs="auto"``: at most this many epochs, with a
        :class:`~sklearn.exceptions.ConvergenceWarning` when the validated
        score still improved there.
    batch_size : int or "auto", default="auto"
        Pairs per MEG update in :meth:`fit` (1: on-line MEG). ``"auto"``:
        ``max(50, 2 rank)``, so that a batch's products (``O(b rank^2)``)
        cost about one eigendecomposition (``O(rank^3)``).
    n_folds : int or "auto", default="auto"
        Folds of the validation for ``n_epochs="auto"``; ``"auto"``: 5 below 600
        training points, else 2. Small data sets repeat their folds until the
        fold models together learn from 600 points, so that the choice rests
        on enough held-out points; five folds cost more than repeated halves
        (see the benchmarks page) but each learns from most of the data,
        where a half validates the length that suits half the data.
        From labels (:meth:`fit`) the classes are the folds' labels; random pairs
        are drawn again in each fold, as many as the final fit's (which then runs
        ``n / n_f`` times the validated length); neighbourhood pairs: the fold's own.
    shuffle : bool, default=True
        Draw a new order of the pairs for each epoch (given pairs start from
        an order of their content: the row order of the pair table changes
        nothing). ``False``: the order of the pairs is the order of the
        updates.
    from_labels : {"auto", "soft-neighbors", "neighbors", "random"}, default="auto"
        What :meth:`fit` learns from class labels. ``"soft-neighbors"``: MEG
        ascent of the stochastic-neighbour objective (NCA's: each point's
        probability that a neighbour drawn by softmax of the learned
        distances is of its class; :mod:`megkernel._solvers.metric_soft_neighbors`),
        ``n_epochs`` counting its iterations; ``"neighbors"``: the pairs of
        each point's ``n_neighbors`` nearest points of its class (similar)
        and of the others (dissimilar), :func:`~megkernel.neighbor_pairs`;
        ``"random"``: ``n_constraints`` random pairs of each kind
        (:func:`~megkernel.draw_pairs`, metric-learn's sampling).
        ``"auto"``: ``"random"`` if ``n_constraints`` is set; else
        ``"soft-neighbors"`` if its validated gain is real, otherwise the
        higher held-out 1-NN accuracy of it and random pairs (same folds;
        ``n_epochs`` fixed: soft neighbours; above 4000 points: random).
        See ``from_labels_`` and the user guide ("Learning from labels").
    n_neighbors : int, default=5
        Neighbours of each kind per point for ``from_labels="neighbors"``
        (scikit-learn's default ``k``).
    temperature : float or "auto", default="auto"
        Temperature ``T`` of the soft-neighbour objective, in units of the
        training points' mean squared distance to their nearest neighbour
        under the Euclidean metric (smaller: a sharper soft 1-NN, for
        classes that are local rather than globally separated). ``"auto"``:
        with ``n_epochs="auto"``, the one of 1 and 1/2 whose validated
        fit has the higher held-out 1-NN accuracy on the same folds
        (:data:`~megkernel._solvers.metric_soft_neighbors.TEMPERATURES`);
        else 1.
    n_constraints : int, default=None
        Pairs of each kind for ``from_labels="random"``; ``None``:
        ``20 * n_classes**2``.
    random_state : int, RandomState instance or None, default=None
        Seed for drawing the pairs, the folds and the order of the pairs.
    method : {"auto", "eigh", "rank-one"}, default="auto"
        Deprecated and ignored: the metric is learned in its own
        ``rank x rank`` space, one eigendecomposition per batch.
    verbose : int, default=0
        Nonzero: a line on stderr after fitting, saying what was learned
        and for how long, and how well the metric meets the pairs against
        its prior.
    preprocessor : array-like, callable or None, default=None
        The preprocessor of metric-learn: with one, points may be given as
        1-D indicators and pairs as (n_pairs, 2) indicators, resolved as
        ``preprocessor[indices]`` (an array of shape (n_samples,
        n_features), indexed by integers) or ``preprocessor(indicators)`` (a
        callable of a 1-D array of indicators -- indices, names, paths --
        returning one point per indicator; called once per column of pairs).

    Attributes
    ----------
    components_ : ndarray of shape (rank, n_features)
        ``transform(X) = (X - mean_) @ components_.T``.
    n_components_ : int
        ``rank``, the dimension of the embedding (the rank of the centered
        training features).
    mean_ : ndarray of shape (n_features,)
        Mean of the training points (of the first pairs' distinct points
        when :meth:`partial_fit` starts).
    coordinates_ : ndarray of shape (n_samples, rank)
        Whitened coordinates ``z`` of the training points: ``U`` of the
        centered features' SVD ``U S V^T`` (module :mod:`megkernel.metric`).
    scales_ : ndarray of shape (rank,)
        Their singular values ``S``.
    directions_ : ndarray of shape (rank, n_features)
        ``V^T``: ``z(x) = (x - mean_) @ directions_.T / scales_``.
    trace_ : float
        ``tau = ||X - mean_||_F^2 = sum(scales_**2)``, the unit of the metric
        in trace-one units (``d^2(x, x') = tau (z - z')^T M (z - z')``).
    exponent_ : MetricExponent
        The learned metric's exponent ``log M`` (rank x rank, ``M`` of trace
        one) with its eigendecomposition: the state :meth:`partial_fit`
        continues from.
    gamma_, gamma_dissimilar_ : float
        Targets used.
    learning_rate_ : float
    n_epochs_ : float
        Epochs run by :meth:`fit`.
    n_iter_ : int
        Passes over the pairs begun by :meth:`fit`, ``ceil(n_epochs_)`` (the
        unit of ``max_iter``).
    validation_ : dict or None
        ``n_epochs="auto"``: ``"score"`` (``"knn"``: mean relative 1-NN margin
        of held-out points, the similar pairs' connected components standing
        in for classes; ``"auc"``: ROC AUC of held-out pairs, when the
        components cannot), ``"checkpoints"``, mean ``"scores"``, ``"gain_is_real"``,
        ``"within_noise"`` (the best length's gain did not clear the noise of
        all the lengths compared, those of kinds validated before it included:
        the prior kept), ``"looks"`` (the lengths compared), ``"n_folds"``,
        ``"n_repeats"``, ``"stopped"`` (``"patience"``, ``"out_of_reach"``:
        the next length could not be chosen, ``"max_length"``), ``"length_scale"``
        (the final length over the chosen one, with MEG's pair loss:
        ``min(pair_ratio, held_to / chosen)`` where the folds scored 1-NN
        margins and ``pair_ratio`` is at most 2, else 1),
        ``"pair_ratio"`` (the pairs over a fold's mean), ``"held_to"`` (the
        longest length up to which no checkpoint scored significantly below
        the choice; both absent where no fold was usable); with several kinds to choose
        from (``from_labels="auto"``, or given pairs: ``"soft-pairs"`` their
        soft-neighbour objective, ``"pair-classes"`` that of the classes
        rebuilt from the similar pairs' components, ``"pairs"`` MEG's pair
        loss), ``"from_labels"``: each kind validated and its (held-out 1-NN
        accuracy or pair AUC, score) at its chosen length, and ``"kept"``:
        the kind learned; with a soft-neighbour
        objective, ``"temperature"`` (the one learned) and ``"temperatures"``
        (each one's (accuracy, score) at its chosen length).
    pairs_, pair_labels_ : ndarray
        The fitted pairs (row indices of the training ``X``) and labels.
    from_labels_ : str or None
        What was learned from labels (``"soft-neighbors"``, ``"neighbors"``,
        ``"random"``); after :meth:`fit_pairs` ``None``: the pairs, learned
        as pairs (``validation_["from_labels"]`` says by which objective).
    temperature_ : float or None
        The soft-neighbour temperature used (units of ``temperature``; from
        given pairs, of each point's nearest partner); ``None`` when the
        metric was learned by the pair loss.
    soft_neighbor_objective_ : tuple of float or None
        With ``"soft-neighbors"``: the objective (mean probability of a
        same-class soft neighbour over the training points; from given pairs,
        of a similar partner drawn among each paired point's partners) under
        the Euclidean prior and learned; else ``None``.
    pair_mse_, prior_pair_mse_ : float
        Mean of the pairs' counted squared errors against their targets
        under the learned and under the Euclidean metric (a warning says
        when the first is larger).
    n_pairs_seen_ : int
        Pairs learned on-line by :meth:`partial_fit`.
    online_loss_ : float
        Sum of the on-line trials' losses (squared distance units squared).
    online_normalised_loss_ : float
        ``sum_t loss_t / rho_t^2`` over the on-line trials (trace-one units):
        the left side of :meth:`online_bound`.
    online_range_ : float
        ``rho``, the largest instance range ``||z - z'||^2`` seen so far (the
        learning rate of a trial is ``1 / rho_t^2``).
    online_start_, online_start_log_ : ndarray of shape (rank, rank)
        ``M_start``, the metric (trace one) before the on-line stream, and its
        logarithm: the start of :meth:`online_bound`'s divergence.
    online_start_range_ : float
        ``rho`` before the stream (the largest range of :meth:`fit`'s pairs;
        0 when :meth:`partial_fit` starts without a fit).
    constraint_loss_, prior_constraint_loss_ : float
        Deprecated aliases of ``pair_mse_`` and ``prior_pair_mse_`` (a
        ``FutureWarning``; removed in 0.3).
    preprocessor_ : array-like, callable or None
        The preprocessor used (metric-learn's attribute).
    n_features_in_ : int

    See Also
    --------
    MEGPairMetric : The same learner, from labeled pairs of points.
    DefiniteBoostMetric : A metric from DefiniteBoost's Bregman projections.
    MEGKernelRegressor : MEG on a kernel over a fixed set of objects.

    Examples
    --------
    >>> from sklearn.datasets import load_wine
    >>> from megkernel import MEGMetric
    >>> X, y = load_wine(return_X_y=True)
    >>> MEGMetric(random_state=0).fit(X, y).transform(X).shape
    (178, 13)
    """

    _loss_name = "pair_mse"
    _FROM_LABELS_AUTO = ("soft-neighbors", "random")

    _parameter_constraints: dict = {
        **_FeatureMetric._parameter_constraints,
        "gamma": [Interval(Real, 0, None, closed="left"), StrOptions({"auto"})],
        "loss": [StrOptions({"one-sided", "square"})],
        "learning_rate": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "n_epochs": [Interval(Real, 0, None, closed="left"), StrOptions({"auto"})],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "n_folds": [Interval(Integral, 2, None, closed="left"), StrOptions({"auto"})],
        "shuffle": ["boolean"],
        "temperature": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
    }

    def __init__(self, *, gamma="auto", gamma_dissimilar="auto", loss="one-sided",
                 learning_rate="auto", n_epochs="auto", max_iter=MAX_PASSES,
                 batch_size="auto", n_folds="auto", shuffle=True, from_labels="auto",
                 n_neighbors=5, temperature="auto", n_constraints=None,
                 random_state=None, method="auto", verbose=0, preprocessor=None):
        self.gamma = gamma
        self.gamma_dissimilar = gamma_dissimilar
        self.loss = loss
        self.learning_rate = learning_rate
        self.n_epochs = n_epochs
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.n_folds = n_folds
        self.shuffle = shuffle
        self.from_labels = from_labels
        self.n_neighbors = n_neighbors
        self.temperature = temperature
        self.n_constraints = n_constraints
        self.random_state = random_state
        self.method = method
        self.verbose = verbose
        self.preprocessor = preprocessor

    # -- batch -----------------------------------------------------------------

    def _solve(self, X, trace, pairs=None, signs=None, *, labels=None, kinds=()):
        """Make the one solver call of a batch fit (:func:`fit_meg_metric`)."""
        self._check_thresholds(trace)
        if self.method != "auto":
            warn_user("MEGMetric's method is deprecated since megkernel 0.2 and ignored "
                      "(the metric is learned in its rank x rank space); it will be "
                      "removed in 0.3.", FutureWarning)
        return fit_meg_metric(X, pairs, signs, labels=labels, kinds=kinds,
                              options=self._options())

    def _check_thresholds(self, trace):
        """Refuse a given threshold whose squared loss would leave double precision.

        Losses are squared both in the user's units and in trace-one units
        (the threshold over ``trace``): each must stay within ``MAX_TRACE``.
        """
        for name in ("gamma", "gamma_dissimilar"):
            value = getattr(self, name)
            if isinstance(value, str) or max(value, value / trace) <= _MAX_TRACE:
                continue
            raise ValueError(
                f"{name}={value:g} is out of range: MEGMetric squares each pair's error "
                f"against it, so it may be at most {_MAX_TRACE:g} and at most "
                f"{_MAX_TRACE:g} times the training points' centred sum of squares "
                f"({trace:.3g}; no squared distance between them exceeds "
                f"{2.0 * trace:.3g}). Give a smaller {name}, or rescale X.")

    def _options(self):
        return MEGMetricOptions(
            gamma=self.gamma, gamma_dissimilar=self.gamma_dissimilar, loss=self.loss,
            learning_rate=self.learning_rate, n_epochs=self.n_epochs,
            max_iter=self.max_iter, batch_size=self.batch_size, n_folds=self.n_folds,
            shuffle=self.shuffle, temperature=self.temperature,
            n_constraints=self.n_constraints, n_neighbors=self.n_neighbors,
            random_state=self.random_state)

    def _commit_learner(self, result):
        self.coordinates_, self.scales_ = result.coordinates, result.scales
        self.directions_, self.trace_ = result.directions, result.trace
        self.learning_rate_, self.n_epochs_ = result.learning_rate, result.n_epochs
        self.temperature_ = result.temperature
        self.soft_neighbor_objective_ = result.soft_neighbor_objective
        self._set_online_start(result.exponent, result.largest_range)

    def _fit_summary(self):
        epochs = self.n_epochs_
        what = (f"soft-neighbour objective, {epochs:g} iterations"
                if self.soft_neighbor_objective_ is not None else
                f"{self.from_labels_ or 'given'} pairs, {epochs:g} epochs at learning rate "
                f"{self.learning_rate_:.4g}")
        return what + (f" ({self.validation_['score']} validation)" if self.validation_
                       else "")

    def _targets_and_sides(self, signs):
        return targets_and_sides(signs, self.gamma_, self.gamma_dissimilar_, self.trace_,
                                 self.loss)

    def _whiten_points(self, points):
        return ((points - self.mean_) @ self.directions_.T) / self.scales_

    def _set_online_start(self, exponent, largest_range):
        self.exponent_ = exponent
        self.online_start_ = exponent.density()
        self.online_start_log_ = exponent.log_density()
        self.online_range_ = self.online_start_range_ = largest_range
        self.n_pairs_seen_, self.online_loss_, self.online_normalised_loss_ = 0, 0.0, 0.0

    # -- on-line ---------------------------------------------------------------

    @_fit_context(prefer_skip_nested_validation=True)
    @transactional
    def partial_fit(self, X, y):
        """Learn on-line from labeled pairs of points, one MEG update per pair.

        After :meth:`fit`, the metric goes on learning in the training
        points' whitened coordinates (parts of new points outside their span
        are ignored, as by :meth:`transform`). Without a previous fit, the
        first call's distinct points set the coordinates (a warning if they
        span fewer dimensions than the features), the prior and the targets.
        Each pair is one trial at Lemma 3.1's rate ``1 / rho_t^2`` (``c =
        2``), ``rho_t`` the largest instance range seen so far; see
        :meth:`online_bound`.

        A chunk of labeled points (2-D ``X``, class labels ``y``) is turned
        into pairs as by :meth:`fit` (by ``from_labels``, within the chunk;
        ``"auto"``, with no validation on-line: neighbourhood pairs unless
        ``n_constraints`` is set) and learned in the same way.

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2, n_features) or (n_samples, n_features)
            The two points of each pair, in the order they arrive; or points
            (with ``preprocessor``, also their 1-D indices).
        y : array-like of shape (n_pairs,) or (n_samples,)
            Pair labels, ``+1`` / ``1`` / ``True`` similar, ``-1`` / ``0`` /
            ``False`` dissimilar; or the points' class labels.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        first = not hasattr(self, "exponent_")
        X = self._online_input(X)
        if np.ndim(X) == 2:
            pairs_of_points, signs = self._chunk_pairs(X, y, reset=first)
        else:
            pairs_of_points = _check_pairs_of_points(
                X, None if first else self.n_features_in_)
            signs = check_pair_labels(y, len(pairs_of_points), name="y")
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
        self.components_ = metric_components(exponent, self.scales_, self.directions_,
                                             self.trace_)
        return self

    def _online_input(self, X):
        """:meth:`partial_fit`'s ``X`` with a preprocessor's 1-D indices resolved to points."""
        return self._points(X)

    def _chunk_pairs(self, X, y, *, reset):
        """Pairs of points drawn from a chunk of labeled points."""
        check_class_labels(y)  # a missing label or a mix of kinds, named as by fit
        # scikit-learn finds an infinity by summing X (+inf - inf: a RuntimeWarning)
        with np.errstate(invalid="ignore", over="ignore"):
            X, y = validate_data(self, X, y, reset=reset, ensure_min_samples=2, dtype=float)
        check_classification_targets(y)
        n_classes = np.unique(y).size
        if n_classes < 2:
            raise ValueError(f"y must hold at least 2 classes, got {n_classes}.")
        seed = None if self.random_state is None else derived_seed(
            self.random_state) + getattr(self, "n_pairs_seen_", 0)
        pairs, signs, _ = pairs_from_labels(X, y, self._from_labels()[0], self.n_constraints,
                                            n_neighbors=self.n_neighbors, random_state=seed)
        return X[pairs], signs.astype(float)

    def _start_online(self, pairs_of_points):
        n_features = pairs_of_points.shape[2]
        points = np.unique(pairs_of_points.reshape(-1, n_features), axis=0)
        if len(points) < 2:
            raise ValueError("The first pairs of partial_fit hold fewer than 2 distinct "
                             "points: they cannot set the metric's coordinates.")
        self.n_features_in_ = n_features
        self._check_thresholds(_check_trace(points))
        self.mean_ = points.mean(axis=0)
        centred = points - self.mean_
        (self.coordinates_, self.scales_, self.directions_, self.trace_, self.gamma_,
         self.gamma_dissimilar_) = metric_space(centred, self.gamma, self.gamma_dissimilar,
                                                derived_generator(self.random_state))
        if len(self.scales_) < n_features and len(points) <= n_features:  # too few points
            warn_user(f"The first pairs of partial_fit span {len(self.scales_)} of the "
                      f"{n_features} feature dimensions: the metric is learned within that "
                      "span only. Call fit on points first, or start with pairs whose "
                      "points span every feature.", UserWarning)
        self.learning_rate_, self.n_epochs_, self.n_iter_, self.validation_ = None, 0.0, 0, None
        self._set_online_start(MetricExponent.from_prior(self.scales_**2 / self.trace_),
                               0.0)

    def _stream_diffs(self, pairs_of_points):
        """Whitened differences of the pairs and their ranges ``||u||^2``.

        Raises before any state changes when a pair is so far outside the
        coordinates' scale that its squared distance or loss leaves doubles.
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
        """Set the on-line loss beside its relative loss bound.

        For the stream of pairs given to :meth:`partial_fit` since the last
        :meth:`fit` (all of them, in the same order), and any comparator
        metric ``U`` in the same coordinates (a density matrix)::

            sum_t loss_t / rho_t^2 <= 2 sum_t loss_U,t / rho_t^2 + Delta(U, M_start)

        with ``M_start`` the metric before the stream (the Euclidean prior,
        or the fitted one) and ``Delta`` the von Neumann divergence (eq. 1);
        losses in trace-one units. Derivation: Lemma 3.1 of the paper with
        one-sided losses, in ``docs/user_guide/metrics.rst``, "The one-sided
        loss and its bound".

        Parameters
        ----------
        X : array-like of shape (n_pairs, 2, n_features)
            The stream's pairs of points, as given to :meth:`partial_fit`.
        y : array-like of shape (n_pairs,)
            Their pair labels, as given to :meth:`partial_fit`.
        comparator : ndarray of shape (rank, rank) or None, default=None
            ``None``: the metric learned so far (hindsight's comparator).

        Returns
        -------
        dict
            ``"loss"`` (the left side), ``"bound"`` (the right side),
            ``"comparator_loss"`` and ``"divergence"``.
        """
        check_is_fitted(self, "exponent_")
        pairs_of_points = _check_pairs_of_points(X, self.n_features_in_)
        signs = check_pair_labels(y, len(pairs_of_points), name="y")
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
