"""DefiniteBoostMetric: a metric from DefiniteBoost's Bregman projection.

The estimator of :mod:`megkernel.metric` over
:class:`megkernel.DefiniteBoostKernel` in low-rank mode; the validated number
of greedy sweeps comes from the one loop of
:mod:`megkernel._solvers.holdout`.
"""

from __future__ import annotations

import math
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions

from .._numerics.seeding import derived_seed
from .._numerics.state import ExponentState
from .._progress import detail as progress_detail
from .._solvers.definiteboost import (
    fit_pair_constraints,
    pair_thresholds,
    satisfiable_pairs,
)
from .._solvers.holdout import (
    MAX_PASSES,
    doubling_checkpoints,
    pair_components,
    resolve_n_folds,
    validate_length,
)
from .._solvers.metric_soft_neighbors import MAX_POINTS as SOFT_NEIGHBORS_MAX_POINTS
from ..definiteboost_kernel import DefiniteBoostKernel
from ._base import _FeatureMetric, _PairInput
from ._pairs import _ClassPairs
from .meg import MEGMetric

__all__ = ["DefiniteBoostMetric", "DefiniteBoostPairMetric"]

#: A fold's first run goes this far (in sweeps); a longer length asked for
#: later runs again from the prior to ``_LOOKAHEAD`` times that length.
_FIRST_HORIZON, _LOOKAHEAD = 4.0, 4.0

#: DefiniteBoostMetric's default slack: no constraint may scale the metric by
#: more than a factor of two.
_LOG_2 = math.log(2)


class _SweepPath:
    """One fold of DefiniteBoostMetric's validation.

    The greedy projections on the fold's training pairs, scored after each
    number of sweeps (see :mod:`megkernel._solvers.holdout`).

    A run cannot be resumed (its multipliers live inside the solver), so it
    is made ahead, to a horizon, and scored on its way at every checkpoint
    (a callback); a length beyond the horizon reruns from the prior to
    ``_LOOKAHEAD`` times it. A run that converges earlier stays there.
    """

    def __init__(self, scorer, learner, centred, trace, pairs, signs, checkpoints):
        self.scorer, self.learner = scorer, learner
        self.centred, self.trace, self.checkpoints = centred, trace, list(checkpoints)
        self.pairs, self.signs = scorer.train_pairs, scorer.train_signs
        self.scores, self.horizon, self.converged = {}, -1.0, False

    def score_at(self, sweeps):
        if sweeps not in self.scores:
            if self.converged or sweeps <= self.horizon:  # converged on the way
                return self.scores[max(self.scores)]
            horizon = max(_FIRST_HORIZON, _LOOKAHEAD * sweeps)
            self._run([s for s in self.checkpoints if s <= horizon] or [sweeps])
        return self.scores[sweeps]

    def _run(self, sweeps):
        learner, scorer = self.learner, self.scorer
        state = ExponentState.from_factor(self.centred, name="X")
        steps = [scorer.steps(s) for s in sweeps]
        found = {0: scorer.score(state.factor())}

        def callback(t, record):
            if t in steps and t not in found:
                found[t] = scorer.score(state.factor())

        try:
            with warnings.catch_warnings():  # the final fit warns, not its folds
                warnings.simplefilter("ignore")
                log = fit_pair_constraints(
                    state, self.pairs, self.signs, gamma=learner.gamma,
                    gamma_dissimilar=learner.gamma_dissimilar, trace=self.trace,
                    slack=learner.slack, projection=learner.projection,
                    max_iter=max(steps[-1], 1), tol=learner.tol, method=learner.method,
                    callback=callback, callback_at=steps)
        except ValueError:  # the arithmetic overflowed on the way: no better than the prior
            self.scores.update({s: found.get(step, found[0]) for s, step in zip(sweeps, steps)})
            self.horizon, self.converged = sweeps[-1], True
            return
        final = scorer.score(state.factor())  # converged early: it stays there
        self.scores.update({s: found.get(step, final) for s, step in zip(sweeps, steps)})
        self.horizon = sweeps[-1]
        self.converged = log["n_iter"] < steps[-1]


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
        with a :class:`~sklearn.exceptions.ConvergenceWarning`); a run that
        converges earlier stops there.
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
    init : {"auto", "euclidean"}, default="auto"
        The prior the projections start from. ``"euclidean"``: the
        Euclidean metric of the centred features (the paper's identity
        prior). ``"auto"``: from labels (:meth:`fit`, at most 4000 points),
        :class:`MEGMetric`'s soft-neighbour metric of the same labels
        (``from_labels="soft-neighbors"``, its length validated by its own
        folds) when its held-out gain over the Euclidean metric is real,
        else the Euclidean metric; from given pairs (:meth:`fit_pairs`) the
        same when their similar pairs' connected components stand in for
        classes (as :class:`MEGMetric` validates them), else the Euclidean
        metric. (The
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

    Attributes
    ----------
    init_ : str
        The prior used: ``"soft-neighbors"`` or ``"euclidean"``.
    prior_estimator_ : MEGMetric or None
        The soft-neighbour fit tried as the prior (``init="auto"`` from
        labels, or from given pairs whose components stand in for classes;
        its ``validation_`` says whether its gain was real), fitted on the
        centred training features ``X - mean_``.
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
    kernel_estimator_ : DefiniteBoostKernel or None
        The fitted projection (iterations, dual objective, dropped pairs);
        ``None`` when the validation kept the prior.
    n_iter_ : int
        Projections made (0 when the validation kept the prior).
    validation_ : dict or None
        ``max_iter="auto"``: ``"score"``, ``"checkpoints"`` (sweeps), their
        mean ``"scores"``, ``"gain_is_real"``, ``"n_folds"``, ``"n_repeats"``,
        ``"stopped"`` (``"patience"`` or ``"max_length"``) and
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
    n_features_in_ : int

    See Also
    --------
    DefiniteBoostPairMetric : The same learner, from labeled pairs of points.
    MEGMetric : A metric learned with MEG updates.
    DefiniteBoostKernel : DefiniteBoost on a kernel over a fixed set of objects.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from megkernel import DefiniteBoostMetric
    >>> X, y = load_iris(return_X_y=True)
    >>> DefiniteBoostMetric(random_state=0).fit(X, y).transform(X).shape
    (150, 4)
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
        "init": [StrOptions({"auto", "euclidean"})],
    }

    def __init__(self, *, gamma="auto", gamma_dissimilar="auto", slack=_LOG_2,
                 max_iter="auto", tol=1e-2, projection="approximate", n_folds="auto",
                 from_labels="auto", n_neighbors=5, n_constraints=None, init="auto",
                 random_state=None, method="auto", verbose=0):
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

    def _learn(self, centred, trace, pairs, pair_labels, classes=None):
        drew_pairs = bool(classes)  # from labels: the pairs are its own
        classes = (classes[0] if classes  # one kind of pairs: no choice
                   else self._pair_classes(centred, pairs, pair_labels))
        self.validation_ = None
        prior = self._prior_factor(centred, classes)
        if self.verbose and self.prior_estimator_ is not None:  # the prior tried
            progress_detail("[DefiniteBoostMetric] prior: " + (
                f"the soft-neighbour metric ({self.prior_estimator_.n_epochs_:g} "
                "iterations; its validated gain is real)" if self.init_ != "euclidean" else
                "the Euclidean metric (the soft-neighbour metric showed no real gain)"))
        max_iter = self.max_iter
        if max_iter == "auto":
            max_iter = self._validated_max_iter(centred, prior, trace, pairs, pair_labels,
                                                classes, drew_pairs=drew_pairs)
        with warnings.catch_warnings():
            if drew_pairs:  # pairs it drew itself: dropping some is no news
                warnings.filterwarnings("ignore", "Dropped", UserWarning)
            if max_iter == 0:  # the prior earned its place
                return self._keep_prior(prior, centred, trace, pairs, pair_labels)
            if self.max_iter == "auto":  # stopping early is the validated choice
                warnings.simplefilter("ignore", ConvergenceWarning)
            estimator = DefiniteBoostKernel(
                init_factor=prior, trace=trace, gamma=self.gamma,
                gamma_dissimilar=self.gamma_dissimilar, slack=self.slack,
                max_iter=max_iter, tol=self.tol, projection=self.projection,
                validation_fraction=None, method=self.method).fit(pairs, pair_labels)
        self.gamma_ = estimator.gamma_
        self.gamma_dissimilar_ = estimator.gamma_dissimilar_
        self.n_iter_ = estimator.n_iter_
        self.kernel_estimator_ = estimator
        return np.linalg.lstsq(centred, estimator.kernel_factor_, rcond=None)[0].T

    def _pair_classes(self, centred, pairs, signs):
        """Return the classes of given pairs for the soft-neighbour prior, or ``None``.

        Those of the similar pairs' connected components, where they stand in
        for classes (:func:`pair_components`, as :meth:`MEGMetric.fit_pairs`
        validates them) and their points span the training points' features
        (a prior learned on a lower-dimensional subset would drop the other
        directions for every point).
        """
        if self.init != "auto":
            return None
        components = pair_components(len(centred), pairs, signs)
        if components is None or (np.linalg.matrix_rank(centred[components >= 0])
                                  < np.linalg.matrix_rank(centred)):
            return None
        return _ClassPairs(None, "soft-neighbors", None, pairs, signs, codes=components)

    def _validated_max_iter(self, centred, prior, trace, pairs, signs, classes=None, *,
                            drew_pairs=True):
        """Greedy steps by cross-validation over the training points.

        Each fold starts from its own prior: the Euclidean metric, or the
        soft-neighbour metric refitted on the fold's training points alone
        (:meth:`_fold_prior`; the final prior has seen the held-out labels).
        Given pairs (``drew_pairs`` False) are the folds' own, as without a
        soft-neighbour prior: the loop scores them by their components itself.
        """
        seed = derived_seed(self.random_state)
        checkpoints = doubling_checkpoints(MAX_PASSES)

        def make_path(scorer):
            start = (prior if self.init_ == "euclidean"
                     else self._fold_prior(centred, classes, scorer.references))
            return _SweepPath(scorer, self, start, trace, pairs, signs, checkpoints)

        best, log = validate_length(len(centred), pairs, signs, make_path,
                                    checkpoints=checkpoints, n_folds=self.n_folds,
                                    rng=np.random.default_rng(seed),
                                    learner="DefiniteBoostMetric",
                                    safety_net=f"the sweeps ({MAX_PASSES})",
                                    classes=classes if drew_pairs else None)
        self.validation_ = log
        if best is None:  # nothing to validate on: one sweep, as MEGMetric's pass
            best = 1.0
        return 0 if best == 0 else max(1, int(round(best * len(pairs))))

    def _prior_factor(self, centred, classes):
        """Return the prior's embedding of the training points (``init``); set ``init_``.

        From labels with ``init="auto"`` (and at most 4000 points), the
        soft-neighbour metric of :class:`MEGMetric` when its validated gain
        is real; otherwise the centred points (the Euclidean metric).
        """
        self.init_, self.prior_estimator_ = "euclidean", None
        labelled = np.flatnonzero(classes.codes >= 0) if classes is not None else []
        if (self.init != "auto" or classes is None
                or np.unique(classes.codes[labelled]).size < 2
                or not (resolve_n_folds(self.n_folds, len(labelled)) <= len(labelled)
                        <= SOFT_NEIGHBORS_MAX_POINTS)):
            return centred
        with warnings.catch_warnings():  # its choice is reported in init_
            warnings.simplefilter("ignore")
            estimator = MEGMetric(from_labels="soft-neighbors", n_folds=self.n_folds,
                                  random_state=derived_seed(self.random_state)).fit(
                centred[labelled], classes.codes[labelled])
        self.prior_estimator_ = estimator
        if not (estimator.validation_ or {}).get("gain_is_real", False):
            return centred
        self.init_ = "soft-neighbors"
        return centred @ estimator.components_.T

    def _fold_prior(self, centred, classes, train):
        """Return a validation fold's soft-neighbour prior, from its training points only.

        As long as the final prior (its validated iterations), so that the
        fold's checkpoint 0 scores the prior on labels it has not seen; the
        Euclidean metric where the fold's points hold one class.
        """
        train = train[classes.codes[train] >= 0]
        if np.unique(classes.codes[train]).size < 2:
            return centred
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fold = MEGMetric(from_labels="soft-neighbors",
                             n_epochs=self.prior_estimator_.n_epochs_,
                             temperature=self.prior_estimator_.temperature_).fit(
                centred[train], classes.codes[train])
        return centred @ fold.components_.T

    def _prior_embedding(self, centred):
        if getattr(self, "init_", "euclidean") == "euclidean":
            return centred
        return centred @ self.prior_estimator_.components_.T

    def _keep_prior(self, prior, centred, trace, pairs, signs):
        state = ExponentState.from_factor(prior, name="X")
        thresholds, self.gamma_, self.gamma_dissimilar_ = pair_thresholds(
            state, signs, gamma=self.gamma, gamma_dissimilar=self.gamma_dissimilar,
            trace=trace)
        satisfiable_pairs(state, pairs, signs, thresholds, trace)  # warns
        self.n_iter_ = 0
        self.kernel_estimator_ = None
        if self.init_ != "euclidean":
            return self.prior_estimator_.components_.copy()
        return np.linalg.svd(centred, full_matrices=False)[2][:state.size]

    def _constraint_loss(self, sq_distances):
        met = np.where(self.pair_labels_ > 0, sq_distances <= self.gamma_,
                       sq_distances >= self.gamma_dissimilar_)
        return float(1.0 - met.mean())


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
    init : {"auto", "euclidean"}, default="auto"
        The prior, as in :meth:`~DefiniteBoostMetric.fit_pairs`: with
        ``"auto"``, the soft-neighbour metric of the similar pairs'
        components where those stand in for classes, else the Euclidean
        metric.
    random_state : int, RandomState instance or None, default=None
        Seed for the validation's folds.
    method : {"auto", "eigh", "rank-one"}, default="auto"
        Engine of each projection, as in :class:`DefiniteBoostMetric`.
    verbose : int, default=0
        As in :class:`DefiniteBoostMetric`.

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
    kernel_estimator_, n_iter_, validation_ : DefiniteBoostKernel, int or dict
        As in :class:`DefiniteBoostMetric`.
    from_labels_ : None
        As in :class:`DefiniteBoostMetric` (``None``: learned from pairs).
    init_, prior_estimator_ : str, MEGMetric or None
        As in :class:`DefiniteBoostMetric` after :meth:`~DefiniteBoostMetric.fit_pairs`.
    violated_fraction_, prior_violated_fraction_ : float
        As in :class:`DefiniteBoostMetric`.
    constraint_loss_, prior_constraint_loss_ : float
        Deprecated aliases, as in :class:`DefiniteBoostMetric`.
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
    >>> model = DefiniteBoostPairMetric(random_state=0).fit(pairs, labels[a] == labels[b])
    >>> model.predict(pairs[:3]).shape
    (3,)
    """
