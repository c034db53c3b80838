"""DefiniteBoostMetric: a metric from DefiniteBoost's Bregman projection.

The estimator of :mod:`megkernel.metric`: it validates, makes one call of
the solver :func:`megkernel._solvers.metric_definiteboost.fit_definiteboost_metric`
(DefiniteBoost's projections in low-rank mode, the prior and the validated
number of greedy sweeps) and commits its result.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from .._solvers.metric_definiteboost import (
    DefiniteBoostMetricOptions,
    fit_definiteboost_metric,
)
from ._base import _FeatureMetric, _PairInput

__all__ = ["DefiniteBoostMetric", "DefiniteBoostPairMetric"]

#: DefiniteBoostMetric's default slack: no constraint may scale the metric by
#: more than a factor of two.
_LOG_2 = math.log(2)


class DefiniteBoostMetric(_FeatureMetric):
    r"""Metric from DefiniteBoost's Bregman projection with soft constraints.

    :class:`DefiniteBoostKernel` in low-rank mode over the training points
    (prior: the Euclidean metric of the centered features, or from labels
    the soft-neighbour metric, see ``init``) with similar
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
        Greedy projections. ``"auto"``: ``round(s * n_pairs)`` for the number
        of sweeps ``s`` chosen by ``n_folds``-fold cross-validation over the
        training points among 0, 1/8, 1/4, 1/2, 1, 2, ... sweeps, going on
        while the validated score improves, by the same loop and rule as
        :class:`MEGMetric`'s ``n_epochs`` (see :attr:`validation_` and
        :mod:`megkernel._solvers.holdout`; safety net: 1000 sweeps,
        with a :class:`~sklearn.exceptions.ConvergenceWarning`), except that
        the folds already stop at half a sweep where no later checkpoint can
        replace the choice (a sweep costs as much as all the checkpoints
        before it); a run that converges earlier stops there.
    tol : float, default=1e-2
        Margin of the constraints, relative to ``gamma``: passed to
        :class:`DefiniteBoostKernel`, which stops when every constraint
        holds within ``tol * gamma / 2``.
    projection : {"approximate", "exact"}, default="approximate"
        Step of each projection: eq. 13's approximate step, or the exact
        projection (as :class:`DefiniteBoostKernel`).
    n_folds : int or "auto", default="auto"
        Folds of the validation for ``max_iter="auto"``; ``"auto"``: 5 below 600
        training points, else 2. Small data sets repeat their folds until the
        fold models together learn from 600 points, so that the choice rests
        on enough held-out points; five folds cost more than repeated halves
        (see the benchmarks page) but each learns from most of the data,
        where a half validates the length that suits half the data.
        From labels (:meth:`fit`) the classes are the folds' labels; random pairs
        are drawn again in each fold, as many as the final fit's (which then runs
        ``n / n_f`` times the validated length); neighbourhood pairs: the fold's own.
    from_labels : {"auto", "random", "neighbors"}, default="auto"
        The pairs :meth:`fit` makes from labels (``"auto"``: ``"random"``):
        ``n_constraints`` random
        pairs of each kind (:func:`~megkernel.draw_pairs`), or each point's
        ``n_neighbors`` nearest of its class and of the others
        (:func:`~megkernel.neighbor_pairs`). Random by default: hard
        constraints that push a neighbourhood's nearest other-class points
        out to ``gamma_dissimilar`` (the mean squared distance) bend the
        metric more than the 1-NN vote gains, where MEGMetric's one-sided
        loss, which stops at the target, gains (see the benchmarks page).
    n_neighbors : int, default=5
        Neighbours of each kind per point for ``from_labels="neighbors"``.
    n_constraints : int, default=None
        Pairs of each kind for ``from_labels="random"``; ``None``:
        ``20 * n_classes**2``.
    init : str or array-like of shape (n_components, n_features), default="auto"
        The prior the projections start from: ``"auto"``, ``"euclidean"``,
        or metric-learn's options:
        ``"identity"`` is ``"euclidean"``; ``"covariance"``, the Mahalanobis
        metric of the training points' inverse covariance; ``"random"``, a
        random linear map (drawn from ``random_state``); an array, the linear
        map ``L`` of the prior metric ``||L (x - x')||``. ``"euclidean"``: the
        Euclidean metric of the centred features (the paper's identity
        prior). ``"auto"``: from labels (:meth:`fit`, at most 4000 points),
        :class:`MEGMetric`'s soft-neighbour metric of the same labels
        (``from_labels="soft-neighbors"``, its length validated by its own
        folds) when its held-out gain over the Euclidean metric is real,
        else the Euclidean metric; from given pairs (:meth:`fit_pairs`)
        :class:`MEGMetric`'s soft-neighbour fit of the pairs when its
        validated gain is real: the pairs' own objective (each point's
        stochastic neighbour among the points it is paired with;
        ``init_="soft-pairs"``) or, where it validates better by more than
        noise, that of the classes rebuilt from the similar pairs'
        connected components (``init_="pair-classes"``); else the
        Euclidean metric. (The
        sweeps' validation refits that prior on each fold's training points,
        so a fold scores it on labels it has not seen.)
        DefiniteBoost is the metric closest to its prior that meets the
        constraints; pair constraints cannot express classes that differ by
        radius or by several clusters each, where the soft-neighbour
        objective learns, so starting from its metric carries that gain
        over (the benchmarks page compares both priors). See ``init_``.
    random_state : int, RandomState instance or None, default=None
        Seed for drawing the pairs and the validation's folds.
    method : {"auto", "eigh", "rank-one"}, default="auto"
        Engine of each projection (:class:`DefiniteBoostKernel`'s); same
        result up to round-off.
    verbose : int, default=0
        Nonzero: lines on stderr after fitting, naming the prior chosen and
        how well the metric meets the pairs against its prior.
    preprocessor : array-like, callable or None, default=None
        The preprocessor of metric-learn: with one, points may be given as
        1-D indicators and pairs as (n_pairs, 2) indicators, resolved as
        ``preprocessor[indices]`` (an array of shape (n_samples,
        n_features), indexed by integers) or ``preprocessor(indicators)`` (a
        callable of a 1-D array of indicators -- indices, names, paths --
        returning one point per indicator; called once per column of pairs).

    Attributes
    ----------
    init_ : str
        The prior used: ``"soft-neighbors"`` (from labels), ``"soft-pairs"``
        or ``"pair-classes"`` (from given pairs: their own objective, or the
        classes rebuilt from their components), ``"euclidean"``,
        ``"covariance"``, ``"random"`` or ``"given"`` (an array).
    prior_components_ : ndarray of shape (rank, n_features) or None
        The soft-neighbour metric tried as the prior (``init="auto"``: of the
        labels, or of the given pairs' own objective):
        ``(X - mean_) @ prior_components_.T`` embeds points under it
        (used only when ``init_`` says so); ``None`` when none was tried.
    prior_n_iter_ : int or None
        Ascent iterations of that soft-neighbour metric.
    prior_temperature_ : float or None
        Its temperature (the units of :class:`MEGMetric`'s ``temperature``).
    prior_validation_ : dict or None
        Its validation (as :class:`MEGMetric`'s ``validation_``): whether its
        held-out gain over the Euclidean metric was real.
    components_ : ndarray of shape (rank, n_features)
        ``transform(X) = (X - mean_) @ components_.T``.
    n_components_ : int
        ``rank``, the dimension of the embedding (the rank of the centered
        training features).
    mean_ : ndarray of shape (n_features,)
        Mean of the training points.
    gamma_, gamma_dissimilar_ : float
        Thresholds used on the squared distances (similar pairs below
        ``gamma_``, dissimilar ones above ``gamma_dissimilar_``).
    converged_ : bool or None
        Whether every constraint holds within ``tol`` (``None`` when the
        validation kept the prior).
    dropped_constraints_ : ndarray of int
        Rows of ``pairs_`` dropped as unsatisfiable (dissimilar pairs that
        can never reach ``gamma_dissimilar_``).
    dual_objective_ : float or None
        The projections' dual objective (``None`` when the prior was kept).
    n_iter_ : int
        Projections made (0 when the validation kept the prior).
    validation_ : dict or None
        ``max_iter="auto"``: ``"score"``, ``"checkpoints"`` (sweeps), their
        mean ``"scores"``, ``"gain_is_real"``, ``"within_noise"`` (as in
        :class:`MEGMetric`), ``"n_folds"``, ``"n_repeats"``,
        ``"stopped"`` (``"patience"``, ``"out_of_reach"`` or ``"max_length"``) and
        ``"length_scale"`` (the sweeps run over the chosen ones, see ``n_folds``).
    pairs_, pair_labels_ : ndarray
        The fitted pairs (row indices of the training ``X``) and labels.
    from_labels_ : str or None
        The kind of pairs learned from labels (``"random"`` or
        ``"neighbors"``); ``None`` after :meth:`fit_pairs`.
    violated_fraction_, prior_violated_fraction_ : float
        Share of the pairs violating their threshold under the learned
        metric and under its prior (a warning says when the first is
        larger).
    constraint_loss_, prior_constraint_loss_ : float
        Deprecated aliases of ``violated_fraction_`` and
        ``prior_violated_fraction_`` (a ``FutureWarning``; removed in 0.3).
    preprocessor_ : array-like, callable or None
        The preprocessor used (metric-learn's attribute).
    n_features_in_ : int

    See Also
    --------
    DefiniteBoostPairMetric : The same learner, from labeled pairs of points.
    MEGMetric : A metric learned with MEG updates.
    DefiniteBoostKernel : DefiniteBoost on a kernel over a fixed set of objects.

    Examples
    --------
    >>> from sklearn.datasets import load_wine
    >>> from megkernel import DefiniteBoostMetric
    >>> X, y = load_wine(return_X_y=True)
    >>> DefiniteBoostMetric(random_state=0).fit(X, y).transform(X).shape
    (178, 13)
    """

    _loss_name = "violated_fraction"
    _FROM_LABELS_AUTO = ("random",)

    _parameter_constraints: dict = {
        **_FeatureMetric._parameter_constraints,
        "slack": [Interval(Real, 0, None, closed="neither"), None],
        "max_iter": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "n_folds": [Interval(Integral, 2, None, closed="left"), StrOptions({"auto"})],
        "tol": [Interval(Real, 0, None, closed="left")],
        "projection": [StrOptions({"approximate", "exact"})],
        "from_labels": [StrOptions({"auto", "neighbors", "random"})],  # pairs only
        "init": [StrOptions({"auto", "euclidean", "identity", "covariance", "random"}),
                 "array-like"],
    }

    def __init__(self, *, gamma="auto", gamma_dissimilar="auto", slack=_LOG_2,
                 max_iter="auto", tol=1e-2, projection="approximate", n_folds="auto",
                 from_labels="auto", n_neighbors=5, n_constraints=None, init="auto",
                 random_state=None, method="auto", verbose=0, preprocessor=None):
        self.gamma = gamma
        self.gamma_dissimilar = gamma_dissimilar
        self.slack = slack
        self.max_iter = max_iter
        self.n_folds = n_folds
        self.tol = tol
        self.projection = projection
        self.from_labels = from_labels
        self.n_neighbors = n_neighbors
        self.n_constraints = n_constraints
        self.init = init
        self.random_state = random_state
        self.method = method
        self.verbose = verbose
        self.preprocessor = preprocessor

    def _solve(self, X, trace, pairs=None, signs=None, *, labels=None, kinds=()):
        """Make the one solver call of a batch fit (:func:`fit_definiteboost_metric`)."""
        if not isinstance(self.init, str):  # a linear map L: (k, n_features), finite
            linear = np.asarray(self.init, dtype=float)
            if linear.ndim != 2 or linear.shape[1] != X.shape[1] or len(linear) == 0:
                raise ValueError(f"init as an array is the prior's linear map, of shape "
                                 f"(n_components, {X.shape[1]}) for X's {X.shape[1]} "
                                 f"features; got shape {linear.shape}.")
            if not np.all(np.isfinite(linear)):
                raise ValueError("init contains NaN or infinite values.")
        if len(X) == 2 and self.gamma_dissimilar == "auto" and (
                signs is None or np.any(signs < 0)):  # from labels: a dissimilar pair
            # the mean squared distance D = 2 trace / (n - 1) is 2 trace, the most
            # the trace allows: the pair already is as far as it can be
            raise ValueError(
                f"{type(self).__name__}'s gamma_dissimilar='auto' is the mean squared "
                "distance between distinct training points; with 2 training points "
                f"that is their own squared distance, {2.0 * trace:.4g}, the largest "
                "the metric's fixed trace allows, so no dissimilar pair can be held "
                f"beyond it. Give gamma_dissimilar below {2.0 * trace:.4g}, or train "
                "on at least 3 points.")
        options = DefiniteBoostMetricOptions(
            gamma=self.gamma, gamma_dissimilar=self.gamma_dissimilar, slack=self.slack,
            max_iter=self.max_iter, tol=self.tol, projection=self.projection,
            n_folds=self.n_folds, n_constraints=self.n_constraints,
            n_neighbors=self.n_neighbors, init=self.init, random_state=self.random_state,
            method=self.method)
        return fit_definiteboost_metric(X, pairs, signs, trace=trace, labels=labels,
                                        kinds=kinds, options=options)

    def _commit_learner(self, result):
        self.init_ = result.init
        prior = result.prior
        self.prior_components_ = None if prior is None else prior.components
        self.prior_n_iter_ = None if prior is None else prior.n_iter
        self.prior_temperature_ = None if prior is None else prior.temperature
        self.prior_validation_ = None if prior is None else prior.validation
        log = result.log
        self.converged_ = None if log is None else bool(log["converged"])
        self.dropped_constraints_ = (np.zeros(0, dtype=np.intp) if log is None
                                     else np.asarray(log["dropped"]))
        self.dual_objective_ = None if log is None else log["dual_objective"]

    def _fit_summary(self):
        done = f"{self.n_iter_} projections"
        if self.prior_components_ is None:  # no soft-neighbour prior tried
            return done
        if self.init_ != "euclidean":
            prior = (f"the soft-neighbour metric ({self.prior_n_iter_:g} iterations; its "
                     "validated gain is real)")
        else:
            prior = "the Euclidean metric (the soft-neighbour metric showed no real gain)"
        return f"prior: {prior}; {done}"


class DefiniteBoostPairMetric(_PairInput, DefiniteBoostMetric):
    """:class:`DefiniteBoostMetric` learned from labeled pairs of points.

    As :class:`MEGPairMetric`: ``X`` of shape (n_pairs, 2, n_features),
    ``y`` the pair labels; ``threshold_`` calibrated on the training pairs,
    :meth:`score` the ROC AUC.

    Parameters
    ----------
    gamma : float or "auto", default="auto"
        Threshold of similar pairs, as in :class:`DefiniteBoostMetric`.
    gamma_dissimilar : float or "auto", default="auto"
        Threshold of dissimilar pairs, as in :class:`DefiniteBoostMetric`.
    slack : float or None, default=log(2)
        Cap of the soft constraints, as in :class:`DefiniteBoostMetric`.
    max_iter : int or "auto", default="auto"
        Greedy projections, as in :class:`DefiniteBoostMetric`; ``"auto"``
        validates them on folds of the pairs' points.
    tol : float, default=1e-2
        Margin of the constraints, as in :class:`DefiniteBoostMetric`.
    projection : {"approximate", "exact"}, default="approximate"
        Step of each projection, as in :class:`DefiniteBoostMetric`.
    n_folds : int or "auto", default="auto"
        Folds of the validation, as in :class:`DefiniteBoostMetric`.
    from_labels : {"auto", "random", "neighbors"}, default="auto"
        Unused: the pairs are given.
    n_neighbors : int, default=5
        Unused: the pairs are given.
    n_constraints : int, default=None
        Unused: the pairs are given.
    init : str or array-like of shape (n_components, n_features), default="auto"
        The prior, as in :meth:`~DefiniteBoostMetric.fit_pairs`: with
        ``"auto"``, the pairs' own soft-neighbour metric, or that of the
        classes rebuilt from their similar pairs' components where it
        validates better by more than noise, when its validated gain is
        real; else the Euclidean metric.
    random_state : int, RandomState instance or None, default=None
        Seed for the validation's folds.
    method : {"auto", "eigh", "rank-one"}, default="auto"
        Engine of each projection, as in :class:`DefiniteBoostMetric`.
    verbose : int, default=0
        As in :class:`DefiniteBoostMetric`.
    preprocessor : array-like, callable or None, default=None
        As in :class:`DefiniteBoostMetric`: pairs may be given as (n_pairs, 2) indices.

    Attributes
    ----------
    threshold_ : float
        The squared distance up to which a pair is predicted similar,
        calibrated on the training pairs (:meth:`calibrate_threshold`).
    classes_ : ndarray of shape (2,)
        The pair labels, ``[-1, 1]``.
    pairs_, pair_labels_ : ndarray
        The fitted pairs (row indices of the pairs' distinct points, in
        sorted order) and their labels.
    components_, n_components_, mean_, gamma_, gamma_dissimilar_ : ndarray, int or float
        As in :class:`DefiniteBoostMetric`, over the pairs' distinct points.
    n_iter_, validation_, converged_, dropped_constraints_, dual_objective_ : object
        As in :class:`DefiniteBoostMetric`.
    from_labels_ : None
        As in :class:`DefiniteBoostMetric` (``None``: learned from pairs).
    init_, prior_components_, prior_n_iter_, prior_temperature_, prior_validation_ : object
        As in :class:`DefiniteBoostMetric` after :meth:`~DefiniteBoostMetric.fit_pairs`.
    violated_fraction_, prior_violated_fraction_ : float
        As in :class:`DefiniteBoostMetric`.
    constraint_loss_, prior_constraint_loss_ : float
        Deprecated aliases, as in :class:`DefiniteBoostMetric`.
    preprocessor_ : array-like, callable or None
        The preprocessor used (metric-learn's attribute).
    n_features_in_ : int

    See Also
    --------
    DefiniteBoostMetric : The same learner, from points and class labels or index pairs.
    MEGPairMetric : MEG's metric from labeled pairs of points.

    Examples
    --------
    >>> import numpy as np
    >>> from megkernel import DefiniteBoostPairMetric
    >>> rng = np.random.default_rng(0)
    >>> points = rng.normal(size=(40, 3))
    >>> labels = (points[:, 0] > 0).astype(int)
    >>> a, b = rng.integers(0, 40, (2, 200))
    >>> pairs = np.stack([points[a], points[b]], axis=1)
    >>> model = DefiniteBoostPairMetric(gamma_dissimilar=1.0, random_state=0)
    >>> model.fit(pairs, labels[a] == labels[b]).predict(pairs[:3]).shape
    (3,)
    """
