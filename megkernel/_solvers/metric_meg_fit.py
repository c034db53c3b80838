"""MEGMetric's batch fit, end to end: arrays and options in, a :class:`MEGMetricFit` out.

The whitened coordinates of the training points and the targets
(:mod:`megkernel._solvers.metric_meg`), the pairs made from class labels
(:mod:`megkernel._solvers.metric_pairs`), the validated kind and length
(:mod:`megkernel._solvers.metric_validation`), then the final run: mini-batch
MEG over the pairs, or the MEG ascent of the stochastic-neighbour objective
(:mod:`megkernel._solvers.metric_soft_neighbors`); and the report of how well
the metric meets its pairs against the Euclidean prior.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from sklearn.metrics.pairwise import euclidean_distances

from .._numerics.seeding import derived_generator
from .._numerics.validation import check_n_trials
from .holdout import MAX_PASSES, pair_components
from .metric_meg import (
    MetricExponent,
    metric_components,
    one_sided_residuals,
    pair_diffs,
    resolve_learning_rate,
    run_batches,
    targets_and_sides,
    whiten,
)
from .metric_pairs import N_NEIGHBORS, label_candidates
from .metric_soft_neighbors import MAX_POINTS as SOFT_NEIGHBORS_MAX_POINTS
from .metric_soft_neighbors import TEMPERATURES, SoftNeighborAscent, prior_temperature
from .metric_validation import PAIR_CLASSES, SOFT_PAIRS, validate_kinds

__all__ = ["MEGMetricFit", "MEGMetricOptions", "content_order", "fit_meg_metric", "metric_space",
           "pair_kinds", "pair_sq_distance_quantiles"]

#: Rows up to which the median squared distance (``gamma_dissimilar="auto"``)
#: is exact; beyond, that of all pairs of this many random rows.
_QUANTILE_POINTS = 1000


@dataclass(frozen=True)
class MEGMetricOptions:
    """MEGMetric's options, as its parameters (see :class:`megkernel.MEGMetric`)."""

    gamma: object = "auto"
    gamma_dissimilar: object = "auto"
    loss: str = "one-sided"
    learning_rate: object = "auto"
    n_epochs: object = "auto"
    max_iter: int = MAX_PASSES
    batch_size: object = "auto"
    n_folds: object = "auto"
    shuffle: bool = True
    temperature: object = "auto"
    n_constraints: object = None
    n_neighbors: int = N_NEIGHBORS
    random_state: object = None

    def temperatures(self):
        """Return the soft-neighbour temperatures to validate (the first without validation)."""
        if self.temperature != "auto":
            return (float(self.temperature),)
        return TEMPERATURES if self.n_epochs == "auto" else (1.0,)


@dataclass
class MEGMetricFit:
    """What :func:`fit_meg_metric` returns (the estimator's fitted attributes).

    ``coordinates``, ``scales``, ``directions``, ``trace``: the whitened space;
    ``exponent`` the learned metric (a :class:`MetricExponent`) and
    ``components`` its linear map; ``largest_range`` the largest instance
    range of the fitted pairs (the on-line bound's start); ``loss`` and
    ``prior_loss`` the pairs' mean counted squared error under the learned
    metric and under the Euclidean prior.
    """

    mean: np.ndarray
    coordinates: np.ndarray
    scales: np.ndarray
    directions: np.ndarray
    trace: float
    gamma: float
    gamma_dissimilar: float
    exponent: MetricExponent
    components: np.ndarray
    learning_rate: float
    n_epochs: float
    n_iter: int
    validation: dict | None
    pairs: np.ndarray
    signs: np.ndarray
    from_labels: str | None
    temperature: float | None
    soft_neighbor_objective: tuple | None
    largest_range: float
    loss: float
    prior_loss: float


def content_order(X, pairs, signs):
    """Given pairs in an order of their content: the same for any row order or numbering.

    Each point of a pair is ranked by its features (lexicographically;
    identical points share their rank), and the pairs are sorted by label,
    then by the ranks of their lower and higher point: pairs left tied are
    the same pair of feature vectors, whose order changes nothing. MEG's pair loss takes the
    pairs in mini-batches of random order drawn over the rows: without this,
    the user's row order and numbering of the points would change the
    learned metric. (With ``shuffle=False`` the user's order is the order
    of the updates, as in the paper's on-line MEG, and is kept.)
    """
    points, local = np.unique(pairs, return_inverse=True)
    _, rank = np.unique(np.asarray(X)[points], axis=0, return_inverse=True)
    ranked = rank.reshape(-1)[local.reshape(-1)].reshape(np.shape(pairs))
    rows = np.lexsort((ranked.max(axis=1), ranked.min(axis=1), np.asarray(signs, dtype=float)))
    return pairs[rows], np.asarray(signs)[rows]


def pair_sq_distance_quantiles(centred, quantiles, rng):
    """Quantiles of squared distances between distinct rows.

    Exact up to 1000 rows; beyond, those of all pairs of 1000 random rows.
    """
    if len(centred) > _QUANTILE_POINTS:
        centred = centred[rng.choice(len(centred), _QUANTILE_POINTS, replace=False)]
    sq_distances = euclidean_distances(centred, squared=True)
    return tuple(np.quantile(sq_distances[np.triu_indices(len(centred), k=1)], quantiles))


def metric_space(centred, gamma, gamma_dissimilar, rng):
    """Whitened coordinates of centered training points and the targets.

    Returns
    -------
    coordinates, scales, directions, trace
        As :func:`~megkernel._solvers.metric_meg.whiten`.
    gamma, gamma_dissimilar : float
        ``"auto"``: 0, and the median squared distance between distinct
        training points.
    """
    coordinates, scales, directions, trace = whiten(centred)
    gamma = 0.0 if gamma == "auto" else float(gamma)
    if gamma_dissimilar == "auto":
        (gamma_dissimilar,) = pair_sq_distance_quantiles(centred, (0.5,), rng)
    return coordinates, scales, directions, trace, gamma, float(gamma_dissimilar)


def pair_kinds(coordinates, pairs, signs):
    """Return the kinds to validate for given pairs (``None``: their loss alone).

    The pairs' own soft-neighbour objective (each point's stochastic
    neighbour among the points it is paired with); then, where the similar
    pairs' connected components stand in for classes, the soft-neighbour
    objective of those classes (:func:`pair_classes`); then MEG's pair loss.
    Without both kinds of pair, or with more than
    :data:`~megkernel._solvers.metric_soft_neighbors.MAX_POINTS` points in
    pairs, the loss alone.
    """
    if (len(np.unique(signs)) < 2
            or np.unique(pairs).size > SOFT_NEIGHBORS_MAX_POINTS):
        return None
    if pair_classes(coordinates, pairs, signs) is None:
        return [SOFT_PAIRS, None]
    return [SOFT_PAIRS, PAIR_CLASSES, None]


def pair_classes(coordinates, pairs, signs):
    """Classes rebuilt from given pairs, where they stand in for classes, else ``None``.

    The similar pairs' connected components
    (:func:`~megkernel._solvers.holdout.pair_components`: no dissimilar pair
    inside one, at least two, most linked points in large ones) whose
    points span the training points' features (a metric learned on a
    lower-dimensional subset would drop the other directions for every
    point). Codes -1: points in no component.
    """
    codes = pair_components(len(coordinates), pairs, signs)
    if codes is None or (np.linalg.matrix_rank(coordinates[codes >= 0])
                         < np.linalg.matrix_rank(coordinates)):
        return None
    return codes


def _pair_loss(sq_distances, signs, gamma, gamma_dissimilar, trace, loss):
    targets, sides = targets_and_sides(signs, gamma, gamma_dissimilar, trace, loss)
    residuals = one_sided_residuals(sq_distances, targets * trace, sides)
    return float(np.mean(residuals**2))


def _sq_distances(embedded, pairs):
    a, b = pairs.T
    return np.sum((embedded[a] - embedded[b]) ** 2, axis=1)


def fit_meg_metric(X, pairs=None, signs=None, *, labels=None, kinds=(), options):
    """Fit MEGMetric's metric from pairs of training points or from class labels.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        Validated training points (finite, of a usable scale).
    pairs : ndarray of int, shape (n_pairs, 2), or None
        Given pairs (row indices of ``X``); ``None`` with ``labels``.
    signs : ndarray of shape (n_pairs,) or None
        Their labels, ``+1`` similar, ``-1`` dissimilar.
    labels : ndarray of shape (n_samples,) or None
        Class labels: the pairs are made from them, one candidate per kind
        of ``kinds`` (validated between them; the first without validation).
    kinds : tuple of str
        From labels: ``"soft-neighbors"``, ``"neighbors"``, ``"random"``.
        From pairs: only the kinds of :func:`pair_kinds` named here are
        validated, e.g. ``("soft-pairs", "pair-classes")``: the pairs'
        soft-neighbour objectives without MEG's pair loss beside them.
    options : MEGMetricOptions
        The learner's options.

    Returns
    -------
    fit : MEGMetricFit
        The learned metric and its record.
    """
    candidates = None
    given = None
    if labels is None and pairs is not None and options.shuffle:
        given = (pairs, signs)  # the user's table, as given, for the record
        pairs, signs = content_order(X, pairs, signs)  # shuffle=False: their order is meant
    if labels is not None:
        candidates = label_candidates(X, labels, kinds, options.n_constraints,
                                      n_neighbors=options.n_neighbors,
                                      random_state=options.random_state)
        pairs, signs = candidates[0].pairs, candidates[0].signs
    mean = X.mean(axis=0)
    centred = X - mean
    rng = derived_generator(options.random_state)
    coordinates, scales, directions, trace, gamma, gamma_dissimilar = metric_space(
        centred, options.gamma, options.gamma_dissimilar, rng)
    prior = scales**2 / trace
    batch_size = (max(50, 2 * len(prior)) if options.batch_size == "auto"
                  else options.batch_size)
    validation = None
    from_labels = candidates[0].from_labels if candidates else None
    kept = candidates[0] if candidates else None
    if candidates is None and options.n_epochs == "auto":  # given pairs
        candidates = pair_kinds(coordinates, pairs, signs)
        if candidates is not None and kinds:  # those asked for only
            candidates = [kind for kind in candidates if kind in kinds]
    if options.n_epochs == "auto":
        epochs, validation, rng, (pairs, signs, kept) = validate_kinds(
            coordinates, prior, pairs, signs, candidates or [None], gamma=gamma,
            gamma_dissimilar=gamma_dissimilar, trace=trace, loss=options.loss,
            learning_rate=options.learning_rate, batch_size=batch_size, rng=rng,
            n_folds=options.n_folds, max_iter=options.max_iter,
            temperatures=options.temperatures())
        if candidates is not None and len(candidates) > 1:
            from_labels = None if kept is None or isinstance(kept, str) else kept.from_labels
    diffs = pair_diffs(coordinates, pairs)
    targets, sides = targets_and_sides(signs, gamma, gamma_dissimilar, trace, options.loss)
    learning_rate = resolve_learning_rate(diffs, options.learning_rate)
    if options.n_epochs != "auto":
        epochs = float(options.n_epochs)
        check_n_trials(epochs, len(diffs))  # before the first trial, with the numbers
    temperature = objective = None
    if from_labels == "soft-neighbors" or kept in (SOFT_PAIRS, PAIR_CLASSES):  # the ascent
        temperature = (validation or {}).get("temperature", options.temperatures()[0])
        if kept == SOFT_PAIRS:  # the given pairs' own objective
            ascent = SoftNeighborAscent.of_pairs(coordinates, pairs, signs, prior,
                                                 temperature)
        elif kept == PAIR_CLASSES:  # the classes rebuilt from them
            ascent = SoftNeighborAscent.of_classes(
                coordinates, pair_classes(coordinates, pairs, signs), prior, temperature)
        else:
            codes = next(c.codes for c in candidates
                         if c is not None and c.from_labels == "soft-neighbors")
            ascent = SoftNeighborAscent(coordinates, codes, prior,
                                        temperature * prior_temperature(coordinates, prior))
        ascent.advance(int(epochs))
        exponent, n_iter = ascent.exponent, ascent.n_iter
        objective = (ascent.objectives[0], ascent.objective)
    else:
        exponent = MetricExponent.from_prior(prior)
        run_batches(exponent, diffs, targets, sides, learning_rate=learning_rate,
                    n_seen=0, n_more=int(round(epochs * len(diffs))),
                    batch_size=batch_size, rng=rng if options.shuffle else None)
        n_iter = int(math.ceil(epochs))
    components = metric_components(exponent, scales, directions, trace)
    if given is not None:
        pairs, signs = given
    measure = dict(signs=signs, gamma=gamma, gamma_dissimilar=gamma_dissimilar, trace=trace,
                   loss=options.loss)
    return MEGMetricFit(
        mean=mean, coordinates=coordinates, scales=scales, directions=directions,
        trace=trace, gamma=gamma, gamma_dissimilar=gamma_dissimilar, exponent=exponent,
        components=components, learning_rate=learning_rate, n_epochs=epochs, n_iter=n_iter,
        validation=validation, pairs=pairs, signs=signs, from_labels=from_labels,
        temperature=temperature, soft_neighbor_objective=objective,
        largest_range=float(np.einsum("ij,ij->i", diffs, diffs).max()),
        loss=_pair_loss(_sq_distances(centred @ components.T, pairs), **measure),
        prior_loss=_pair_loss(_sq_distances(centred, pairs), **measure))
