"""DefiniteBoostMetric's fit, end to end: arrays and options in, a record out.

DefiniteBoost's Bregman projections (the solver entry point
:func:`~megkernel._solvers.definiteboost_fit.fit_from_labels`) in low-rank
mode over the centred training points, from a prior that is the Euclidean
metric or, from labels (or from pairs whose similar pairs' components stand in
for classes), MEGMetric's soft-neighbour metric when its validated gain is
real (:func:`~megkernel._solvers.metric_meg_fit.fit_meg_metric`). The number
of greedy sweeps is validated by the one loop of
:mod:`megkernel._solvers.holdout`, each fold scored along one run
(:class:`SweepPath`) and against the Euclidean metric on the same held-out
points: a gain is real only over both the prior and the Euclidean metric,
and a metric that scores significantly worse than the Euclidean one there
gives way to it.
"""

from __future__ import annotations

import queue
import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from .._numerics.seeding import derived_seed
from .._numerics.state import ExponentState
from .._numerics.threads import blas_threads
from .._numerics.validation import check_pair_labels
from .._warnings import NoImprovementWarning, warn_user
from .definiteboost import fit_pair_constraints, pair_thresholds, satisfiable_pairs
from .definiteboost_fit import fit_from_labels
from .definiteboost_rules import nothing_learned_message
from .holdout import (
    MAX_PASSES,
    doubling_checkpoints,
    resolve_n_folds,
    validate_length,
)
from .metric_meg import metric_components, whiten
from .metric_meg_fit import MEGMetricFit, MEGMetricOptions, fit_meg_metric, pair_kinds
from .metric_pairs import N_NEIGHBORS, component_codes, label_candidates
from .metric_soft_neighbors import MAX_POINTS as SOFT_NEIGHBORS_MAX_POINTS
from .metric_soft_neighbors import SoftNeighborAscent, prior_temperature
from .metric_validation import PAIR_CLASSES, SOFT_PAIRS

__all__ = ["DefiniteBoostMetricFit", "DefiniteBoostMetricOptions", "SweepPath",
           "fit_definiteboost_metric"]

@dataclass(frozen=True)
class DefiniteBoostMetricOptions:
    """DefiniteBoostMetric's options, as its parameters (:class:`megkernel.DefiniteBoostMetric`)."""

    gamma: object = "auto"
    gamma_dissimilar: object = "auto"
    slack: object = None
    max_iter: object = "auto"
    tol: float = 1e-2
    projection: str = "approximate"
    n_folds: object = "auto"
    n_constraints: object = None
    n_neighbors: int = N_NEIGHBORS
    init: object = "auto"
    random_state: object = None
    method: str = "auto"


@dataclass
class DefiniteBoostMetricFit:
    """What :func:`fit_definiteboost_metric` returns.

    ``components`` maps ``x - mean`` to the embedding; ``prior`` is the
    soft-neighbour fit tried as the prior (a :class:`MEGMetricFit` over the
    centred points, or ``None``) and ``init`` the prior used; ``log`` the
    projections' record (``None`` when the validation kept the prior);
    ``loss`` and ``prior_loss`` the share of the pairs violating their
    threshold under the learned metric and under the prior.
    """

    mean: np.ndarray
    components: np.ndarray
    gamma: float
    gamma_dissimilar: float
    n_iter: int
    init: str
    prior: MEGMetricFit | None
    validation: dict | None
    log: dict | None
    pairs: np.ndarray
    signs: np.ndarray
    from_labels: str | None
    loss: float
    prior_loss: float


class _Stop(BaseException):
    """Ends a fold's paused run from inside its callback (never an error of the run)."""


class SweepPath:
    """One fold of DefiniteBoostMetric's validation.

    The greedy projections on the fold's training pairs, scored after each
    number of sweeps (see :mod:`megkernel._solvers.holdout`).

    One run per fold, paused at each checkpoint: the projections' multipliers
    live inside the solver, so the run goes on in a thread of its own that
    waits in its callback until the loop asks for the next checkpoint (only
    one side runs at a time). A fold is thus never run again from the prior
    nor past the last checkpoint the loop asks for; :meth:`close` ends a run
    the loop no longer needs. A run that converges earlier stays there; one
    whose arithmetic overflows scores as the prior from there on.
    """

    def __init__(self, scorer, start, trace, checkpoints, options):
        self.scorer, self.options = scorer, options
        self.start, self.trace = start, trace
        self.pairs, self.signs = scorer.train_pairs, scorer.train_signs
        self.steps = sorted({scorer.steps(s) for s in checkpoints} - {0})
        self.scores = {0: None}  # by projections made; 0: the prior, scored when asked
        self.after = None  # the score from the end of the run on (converged or overflowed)
        self.n_runs = 0
        self._thread, self._wanted = None, 0
        self._orders, self._events = queue.SimpleQueue(), queue.SimpleQueue()

    def score_at(self, sweeps):
        step = self.scorer.steps(sweeps)
        if self.scores[0] is None:
            self.scores[0] = self.scorer.score(self.start)
        if step in self.scores:
            return self.scores[step]
        if self.after is not None:
            return self.after
        self._wanted = step
        # the filters and the BLAS pin are the process's: the run's too (only the
        # main thread pins the BLAS, the run's thread meets the pin set here)
        with warnings.catch_warnings(), blas_threads(self.start.shape[1]):
            warnings.simplefilter("ignore")  # the final fit warns, not its folds
            if self._thread is None:
                self.n_runs += 1
                self._thread = threading.Thread(target=self._run, daemon=True)
                self._thread.start()
            else:
                self._orders.put(True)
            event = self._events.get()  # the run works meanwhile
        if isinstance(event, BaseException):
            raise event
        return self.scores.get(step, self.after)

    def close(self):
        """End the fold's run if it waits for a checkpoint the loop will not ask for."""
        if self._thread is not None and self._thread.is_alive() and self.after is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._orders.put(False)
                self._thread.join()

    def _pause(self, t, record):
        self.scores[t] = self.scorer.score(self.state.factor())
        if t >= self._wanted:
            self._events.put("paused")
            if not self._orders.get():
                raise _Stop

    def _run(self):
        options = self.options
        self.state = ExponentState.from_factor(self.start, name="X")
        try:
            log = fit_pair_constraints(
                self.state, self.pairs, self.signs, gamma=options.gamma,
                gamma_dissimilar=options.gamma_dissimilar, trace=self.trace,
                slack=options.slack, projection=options.projection,
                max_iter=max(self.steps[-1], 1), tol=options.tol, method=options.method,
                callback=self._pause, callback_at=self.steps)
            self.after = self.scorer.score(self.state.factor())  # converged: it stays there
            del log
        except _Stop:
            return
        except ValueError:  # the arithmetic overflowed on the way: no better than the prior
            self.after = self.scores[0]
        except BaseException as error:  # the loop raises it where it waits
            self.after = self.scores[0]
            self._events.put(error)
            return
        self._events.put("done")


def _soft_neighbor_fit(points, codes, options):
    """MEGMetric's soft-neighbour fit of labelled points (its warnings are not the user's)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit_meg_metric(points, labels=codes, kinds=("soft-neighbors",),
                              options=options)


def _linear_prior(centred, init, random_state):
    """Return the linear map ``L`` of a prior given by name or as an array (metric-learn's).

    ``"covariance"``: the inverse covariance's square root, ``sqrt(n - 1)
    S^-1 V^T`` of the centred points ``U S V^T`` (the Mahalanobis metric of
    the training points' covariance); ``"random"``: a standard normal
    ``d x d`` matrix drawn from ``random_state``; an array: ``L`` itself.
    """
    if not isinstance(init, str):
        return np.asarray(init, dtype=float)
    if init == "covariance":
        _, s, Vt = np.linalg.svd(centred, full_matrices=False)
        keep = s > s[0] * 1e-10
        return np.sqrt(max(len(centred) - 1, 1)) * Vt[keep] / s[keep, None]
    rng = np.random.default_rng(derived_seed(random_state))
    return rng.standard_normal((centred.shape[1], centred.shape[1]))


def _prior(centred, classes, options, pairs=None, signs=None):
    """Return the prior's embedding of the training points, ``init_``, the fit tried, ``L``.

    ``init="auto"`` from labels (and at most 4000 points): the soft-neighbour
    metric of MEGMetric when its validated gain is real, otherwise the
    centred points (the Euclidean metric); from given ``pairs`` (``classes``
    ``None``): the same with the pairs' own soft-neighbour objective (each
    point's stochastic neighbour among the points it is paired with, as
    MEGMetric learns them), ``init_`` ``"soft-pairs"``, or that of the
    classes rebuilt from their similar pairs' components where those stand
    in for classes and validate better by more than noise (MEGMetric's
    rule), ``init_`` ``"pair-classes"``; ``"euclidean"`` or
    ``"identity"``: the centred points; ``"covariance"``, ``"random"`` or an
    array: the centred points under the linear map ``L``
    (:func:`_linear_prior`, the last item; ``None`` for the others).
    """
    init = options.init
    if not isinstance(init, str) or init in ("covariance", "random"):
        linear = _linear_prior(centred, init, options.random_state)
        return centred @ linear.T, "given" if not isinstance(init, str) else init, None, linear
    meg_options = MEGMetricOptions(n_folds=options.n_folds,
                                   random_state=derived_seed(options.random_state))
    if classes is None:  # given pairs
        if init != "auto" or pairs is None or pair_kinds(centred, pairs, signs) is None:
            return centred, "euclidean", None, None
        with warnings.catch_warnings():  # its warnings are not the user's
            warnings.simplefilter("ignore")
            fit = fit_meg_metric(centred, pairs, signs, kinds=(SOFT_PAIRS, PAIR_CLASSES),
                                 options=meg_options)
        if not (fit.validation or {}).get("gain_is_real", False):
            return centred, "euclidean", fit, None
        kept = (fit.validation or {}).get("kept", SOFT_PAIRS)
        return centred @ fit.components.T, kept, fit, fit.components
    labelled = np.flatnonzero(classes.codes >= 0)
    if (init != "auto"
            or np.unique(classes.codes[labelled]).size < 2
            or not (resolve_n_folds(options.n_folds, len(labelled)) <= len(labelled)
                    <= SOFT_NEIGHBORS_MAX_POINTS)):
        return centred, "euclidean", None, None
    fit = _soft_neighbor_fit(centred[labelled], classes.codes[labelled], meg_options)
    if not (fit.validation or {}).get("gain_is_real", False):
        return centred, "euclidean", fit, None
    return centred @ fit.components.T, "soft-neighbors", fit, fit.components


def _fold_pairs_prior(centred, scorer, prior, init):
    """Return a validation fold's prior from given pairs, from its training pairs only.

    The soft-neighbour ascent of the fold's pairs (both ends among its
    training points): their own objective (``init`` ``"soft-pairs"``) or
    that of the classes rebuilt from their components (``"pair-classes"``),
    as long as the final prior, in the final prior's whitened space
    (whitening uses no pair label).
    """
    metric = prior.scales**2 / prior.trace
    if init == PAIR_CLASSES:
        ascent = SoftNeighborAscent.of_classes(
            prior.coordinates, component_codes(len(centred), scorer.train_pairs,
                                               scorer.train_signs),
            metric, prior.temperature)
    else:
        ascent = SoftNeighborAscent.of_pairs(
            prior.coordinates, scorer.train_pairs, scorer.train_signs, metric,
            prior.temperature)
    ascent.advance(int(prior.n_epochs))
    return centred @ metric_components(ascent.exponent, prior.scales, prior.directions,
                                       prior.trace).T


def _fold_prior(centred, classes, train, prior):
    """Return a validation fold's soft-neighbour prior, from its training points only.

    As long as the final prior (its validated iterations), so that the
    fold's checkpoint 0 scores the prior on labels it has not seen; the
    Euclidean metric where the fold's points hold one class.
    """
    train = train[classes.codes[train] >= 0]
    if np.unique(classes.codes[train]).size < 2:
        return centred
    # MEGMetric's soft-neighbour fit at a fixed length, without what only its report
    # needs (the neighbourhood pairs, the targets): the same ascent, the same map
    points = centred[train]
    coordinates, scales, directions, trace = whiten(points - points.mean(axis=0))
    start = scales**2 / trace
    ascent = SoftNeighborAscent(
        coordinates, classes.codes[train], start,
        prior.temperature * prior_temperature(coordinates, start)).advance(int(prior.n_epochs))
    return centred @ metric_components(ascent.exponent, scales, directions, trace).T


def _validated_max_iter(centred, start, init, prior, trace, pairs, signs, classes, *,
                        drew_pairs, options):
    """Greedy steps by cross-validation over the training points.

    Each fold starts from its own prior: the Euclidean metric, or the
    soft-neighbour metric refitted on the fold's training points alone
    (:func:`_fold_prior`; the final prior has seen the held-out labels).
    Given pairs (``drew_pairs`` False) are the folds' own, as without a
    soft-neighbour prior: the loop scores them by their components itself.

    Returns
    -------
    max_iter : int
    log : dict
    """
    seed = derived_seed(options.random_state)
    checkpoints = doubling_checkpoints(MAX_PASSES)

    paths = []

    def make_path(scorer):
        if init in (SOFT_PAIRS, PAIR_CLASSES):
            fold_start = _fold_pairs_prior(centred, scorer, prior, init)
        elif init == "soft-neighbors":
            fold_start = _fold_prior(centred, classes, scorer.references, prior)
        else:
            fold_start = start
        paths.append(SweepPath(scorer, fold_start, trace, checkpoints, options))
        return paths[-1]

    try:
        best, log = validate_length(len(centred), pairs, signs, make_path,
                                    checkpoints=checkpoints, n_folds=options.n_folds,
                                    rng=np.random.default_rng(seed),
                                    learner="DefiniteBoostMetric",
                                    safety_net=f"the sweeps ({MAX_PASSES})",
                                    classes=classes if drew_pairs else None,
                                    reference=lambda scorer: scorer.score(centred),
                                    early_prior=True)
    finally:  # the runs paused at a checkpoint the loop did not ask for
        for path in paths:
            path.close()
    if best is None:  # nothing to validate on: one sweep, as MEGMetric's pass
        best = 1.0
    return (0 if best == 0 else max(1, int(round(best * len(pairs))))), log


@contextmanager
def _no_progress(state, max_iter, n_constraints=None):
    yield None


def _project(start, trace, pairs, signs, max_iter, options):
    """DefiniteBoost's projections from the prior factor ``start``.

    Returns
    -------
    factor : ndarray of shape (n, rank)
        ``sqrt(trace) F`` of the learned kernel ``trace F F^T``.
    log : dict
        The run's record (:func:`fit_from_labels`).
    """
    signs = check_pair_labels(signs, pairs, name="y")
    state = ExponentState.from_factor(start, name="init_factor")
    state.check_separates(pairs[:, 0], pairs[:, 1], name="init_factor")
    result = fit_from_labels(
        pairs, signs, prior=state, trace=float(trace), gamma=options.gamma,
        gamma_dissimilar=options.gamma_dissimilar, max_iter=max_iter,
        validation_fraction=None, random_state=None, progress=_no_progress,
        slack=options.slack, projection=options.projection, corrective=False,
        tol=options.tol, method=options.method)
    if result.log["n_iter_total"] == 0:  # not an error, but never silent
        warn_user(nothing_learned_message(result.state, result.pairs, result.signs,
                                          result.trace, result.log), NoImprovementWarning)
    return np.sqrt(result.trace) * result.state.factor(), result.log


def _violated_fraction(embedded, pairs, signs, gamma, gamma_dissimilar):
    a, b = pairs.T
    sq_distances = np.sum((embedded[a] - embedded[b]) ** 2, axis=1)
    met = np.where(signs > 0, sq_distances <= gamma, sq_distances >= gamma_dissimilar)
    return float(1.0 - met.mean())


def fit_definiteboost_metric(X, pairs=None, signs=None, *, trace, labels=None, kinds=(),
                             options):
    """Fit DefiniteBoostMetric's metric from pairs of training points or class labels.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        Validated training points.
    pairs : ndarray of int, shape (n_pairs, 2), or None
        Given pairs (row indices of ``X``); ``None`` with ``labels``.
    signs : ndarray of shape (n_pairs,) or None
        Their labels, ``+1`` similar, ``-1`` dissimilar.
    trace : float
        ``||X - mean||_F^2``, the kernel's trace.
    labels : ndarray of shape (n_samples,) or None
        Class labels: the pairs are made from them (the one kind of ``kinds``).
    kinds : tuple of str
        From labels: ``("random",)`` or ``("neighbors",)``.
    options : DefiniteBoostMetricOptions
        The learner's options.

    Returns
    -------
    fit : DefiniteBoostMetricFit
        The learned metric and its record.
    """
    drew_pairs = labels is not None  # from labels: the pairs are its own
    if drew_pairs:
        (classes,) = label_candidates(X, labels, kinds, options.n_constraints,
                                      n_neighbors=options.n_neighbors,
                                      random_state=options.random_state)
        pairs, signs = classes.pairs, classes.signs
    mean = X.mean(axis=0)
    centred = X - mean
    if not drew_pairs:
        classes = None
    start, init, prior, linear = _prior(centred, classes, options, pairs, signs)
    validation, max_iter = None, options.max_iter
    if max_iter == "auto":
        max_iter, validation = _validated_max_iter(
            centred, start, init, prior, trace, pairs, signs, classes,
            drew_pairs=drew_pairs, options=options)
        if validation.get("worse_than_reference", False):  # held out: Euclidean is better
            start, init, max_iter, linear = centred, "euclidean", 0, None
    log = None
    with warnings.catch_warnings():
        if drew_pairs:  # pairs it drew itself: dropping some is no news
            warnings.filterwarnings("ignore", "Dropped", UserWarning)
        if max_iter == 0:  # the prior earned its place
            state = ExponentState.from_factor(start, name="X")
            thresholds, gamma, gamma_dissimilar = pair_thresholds(
                state, signs, gamma=options.gamma, gamma_dissimilar=options.gamma_dissimilar,
                trace=trace)
            satisfiable_pairs(state, pairs, signs, thresholds, trace)  # warns
            components = (linear.copy() if linear is not None
                          else np.linalg.svd(centred, full_matrices=False)[2][:state.size])
        else:
            if options.max_iter == "auto":  # stopping early is the validated choice
                warnings.simplefilter("ignore", ConvergenceWarning)
            factor, log = _project(start, trace, pairs, signs, max_iter, options)
            gamma, gamma_dissimilar = log["gamma"], log["gamma_dissimilar"]
            components = np.linalg.lstsq(centred, factor, rcond=None)[0].T
    thresholds = dict(pairs=pairs, signs=signs, gamma=gamma, gamma_dissimilar=gamma_dissimilar)
    return DefiniteBoostMetricFit(
        mean=mean, components=components, gamma=gamma, gamma_dissimilar=gamma_dissimilar,
        n_iter=0 if log is None else log["n_iter_total"], init=init, prior=prior,
        validation=validation, log=log, pairs=pairs, signs=signs,
        from_labels=classes.from_labels if drew_pairs else None,
        loss=_violated_fraction(centred @ components.T, **thresholds),
        prior_loss=_violated_fraction(start, **thresholds))
