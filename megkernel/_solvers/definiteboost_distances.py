"""DefiniteBoost on a user's distances: what ``y`` is, and the constraints it gives.

:class:`megkernel.DefiniteBoostKernel` takes, besides similar / dissimilar
labels, the observed (squared) distances of the pairs. From distances it
builds its prior (the kernel that fits them, see the estimator) and its
constraints by one stated rule: the closest :data:`DISTANCE_PAIR_FRACTION`
of the observed pairs of distinct objects are similar pairs, the farthest
as many dissimilar ones, with the thresholds at the boundaries of the two
sets (``gamma``: the largest observed squared distance among the similar
pairs, ``gamma_dissimilar``: the smallest among the dissimilar ones), in the
distances' own units. The learned kernel is then the one closest to the
prior that keeps every observed-close pair at least as close as the
closest tenth of the observations and every observed-far pair at least as
far as the farthest tenth.
"""

from __future__ import annotations

import numpy as np

from .._numerics.validation import SelfDistanceError, check_pair_labels

__all__ = [
    "DISTANCE_PAIR_FRACTION",
    "Y_KINDS",
    "distance_constraints",
    "pair_sq_distances_from_y",
    "resolve_y_kind",
]

#: ``y_kind`` values of :class:`~megkernel.DefiniteBoostKernel`.
Y_KINDS = ("auto", "labels", "sq_distances", "distances")

#: Distance mode: the share of the observed pairs of distinct objects taken
#: as similar (the closest) and as dissimilar (the farthest) pairs. A tenth,
#: as the paper's ``gamma = 0.2 / d`` is a tenth of the identity prior's
#: squared distance; not tuned to a data set.
DISTANCE_PAIR_FRACTION = 0.1


def resolve_y_kind(y_kind, y):
    """Resolve what ``y`` holds: ``"labels"``, ``"sq_distances"`` or ``"distances"``.

    ``"auto"``: squared distances when ``y`` is of a floating dtype,
    non-negative and holds a value other than 0 and 1, read off its finite
    values (NaN, a missing pair, and infinity are never labels: they say
    nothing of the kind, and a distance's check refuses infinity); labels
    otherwise (``None``, booleans, integers, values all in ``{-1, 1}`` or
    all in ``{0, 1}``, where ``0`` is *dissimilar*), so that the labels'
    check names a bad value (integer classes such as ``1`` / ``2`` are an
    error, not distances). Distances that are integers, or all 0 or 1, are
    thus read as labels under ``"auto"``: pass ``y_kind="sq_distances"``
    (or ``"distances"``) for them.
    """
    if y_kind not in Y_KINDS:
        raise ValueError(f"y_kind must be one of {Y_KINDS}, got {y_kind!r}.")
    if y_kind != "auto":
        return y_kind
    if y is None:
        return "labels"
    values = np.asarray(y)
    if values.dtype.kind != "f" or values.size == 0:
        return "labels"
    values = values.astype(float, copy=False).ravel()
    values = values[np.isfinite(values)]
    if values.size == 0:
        return "labels"
    distinct = set(np.unique(values).tolist())
    if distinct <= {-1.0, 1.0} or distinct <= {0.0, 1.0} or np.any(values < 0):
        return "labels"
    return "sq_distances"


def pair_sq_distances_from_y(y, pairs, y_kind):
    """Return the pairs' squared distances from ``y`` (``y_kind`` resolved).

    Raises
    ------
    ValueError
        ``y`` missing, of the wrong shape, not numeric, NaN, infinite or
        negative, naming the first bad pair; a pair of an object with itself
        at a positive distance; no two pairs of distinct objects.
    """
    name = f"y (y_kind={y_kind!r})"
    if y is None:
        raise ValueError(f"{name} is None: give the pairs' observed distances, or "
                         "y_kind='labels' for similar pairs only.")
    values = np.asarray(y)
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.shape != (len(pairs),):
        raise ValueError(f"{name} must hold one distance per pair: got shape "
                         f"{values.shape} for {len(pairs)} pairs.")
    if values.dtype == bool or values.dtype.kind not in "iuf":
        raise ValueError(f"{name} must hold numbers (the pairs' distances), got dtype "
                         f"{values.dtype}.")
    values = values.astype(float)
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
    if bad.size:
        raise ValueError(f"{name} must hold finite non-negative distances: pair "
                         f"{bad[0]} has {values[bad[0]]:.6g}.")
    if y_kind == "distances":
        with np.errstate(over="ignore"):
            values = values * values
        if not np.all(np.isfinite(values)):
            raise ValueError(f"{name}: a distance up to {np.sqrt(values.max()):.3g} "
                             "overflows when squared; rescale the distances.")
    loops = np.flatnonzero((pairs[:, 0] == pairs[:, 1]) & (values > 0))
    if loops.size:
        raise SelfDistanceError(f"{name}: pair {loops[0]} is an object with itself at the "
                         f"positive distance {values[loops[0]]:.4g}; an object is at "
                         "distance 0 from itself.")
    if np.count_nonzero(pairs[:, 0] != pairs[:, 1]) < 2:
        raise ValueError(f"{name}: at least 2 pairs of distinct objects are needed "
                         "(one closest and one farthest).")
    return values


def _whole_ties(ranked, n_each):
    """How many of the smallest of ``ranked`` (ascending) to take: ``n_each``, ties whole.

    When the ``n_each``-th value is tied with the next, either every pair at
    it is in or none is: whichever count is nearer ``n_each`` (none on a
    draw), and all of them when none leaves nothing.
    """
    if n_each >= ranked.size or ranked[n_each] != ranked[n_each - 1]:
        return n_each
    edge = ranked[n_each - 1]
    below = int(np.searchsorted(ranked, edge, side="left"))
    through = int(np.searchsorted(ranked, edge, side="right"))
    return below if below and n_each - below <= through - n_each else through


def distance_constraints(pairs, sq_distances, fraction=DISTANCE_PAIR_FRACTION):
    """Similar / dissimilar constraints from observed squared distances.

    The closest ``max(1, round(fraction * m))`` of the ``m`` pairs of
    distinct objects are similar, the farthest as many dissimilar. Pairs
    tied at a side's boundary go to it whole or not at all (whichever count
    is nearer the fraction, not at all on a draw, whole when nothing else is
    left), so that the constraints do not depend on the pairs' order in the
    table (before, the order broke such ties). Where one distance reaches from
    the closest into the farthest (heavily tied distances), the pairs at it
    are left out of one side, so that every similar pair is closer than every
    dissimilar one: out of both when both have other pairs.

    Returns
    -------
    chosen : ndarray of int
        Indices into ``pairs`` of the constrained pairs.
    signs : ndarray of float
        ``+1`` / ``-1`` for each.
    gamma, gamma_dissimilar : float
        The largest squared distance among the similar pairs and the
        smallest among the dissimilar ones (the distances' units). A
        ``gamma`` of 0 (a tenth of the pairs at distance 0) becomes the
        smallest positive distance observed.
    """
    distinct = np.flatnonzero(pairs[:, 0] != pairs[:, 1])
    order = distinct[np.argsort(sq_distances[distinct], kind="stable")]
    n_each = min(max(1, int(round(fraction * order.size))), order.size // 2)
    ranked = sq_distances[order]
    similar = order[:_whole_ties(ranked, n_each)]
    dissimilar = order[order.size - _whole_ties(-ranked[::-1], n_each):]
    positive = sq_distances[distinct][sq_distances[distinct] > 0]
    if not positive.size:
        raise ValueError("Every observed distance between distinct objects is 0: "
                         "there is nothing to tell close pairs from far ones.")
    tied = sq_distances[similar].max()
    if tied >= sq_distances[dissimilar].min():  # one distance spans both ends
        closer = similar[sq_distances[similar] < tied]
        farther = dissimilar[sq_distances[dissimilar] > tied]
        if not (closer.size or farther.size):
            raise ValueError(
                f"The closest and the farthest {fraction:.0%} of the pairs are tied at "
                f"squared distance {tied:.4g}: nothing tells close pairs from far ones. "
                "Give pair labels (y_kind='labels').")
        # the tied pairs stay on the side that has no other pairs
        similar = closer if closer.size else similar
        dissimilar = farther if farther.size else dissimilar
    gamma = float(sq_distances[similar].max())
    if gamma <= 0:
        gamma = float(positive.min())
    chosen = np.concatenate([similar, dissimilar])
    signs = check_pair_labels(np.r_[np.ones(similar.size), -np.ones(dissimilar.size)],
                              pairs[chosen])
    return chosen, signs, gamma, float(sq_distances[dissimilar].min())
