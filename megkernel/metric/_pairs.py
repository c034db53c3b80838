"""The public pair samplers of :mod:`megkernel.metric`.

Each checks its class labels (a missing label or a mix of kinds, named by
row), then calls the sampler of :mod:`megkernel._solvers.metric_pairs`.
"""

from __future__ import annotations

import numpy as np

from .._pair_estimator import check_class_labels
from .._solvers import metric_pairs
from .._solvers.metric_pairs import N_NEIGHBORS

__all__ = ["draw_pairs", "neighbor_pairs"]


def draw_pairs(labels, n_constraints, *, random_state=None, max_rounds=10):
    """Random similar and dissimilar pairs from class labels.

    As metric-learn's ``*_Supervised`` learners: an anchor drawn uniformly,
    its partner uniformly among the other points of its class (similar) or
    of the other classes (dissimilar); repeated pairs are redrawn, at most
    ``max_rounds`` times. A kind with no more distinct pairs than
    ``n_constraints`` gives all of them, in random order (a warning says so
    when they are fewer), so a large ``n_constraints`` costs no more than
    all the pairs.

    Parameters
    ----------
    labels : array-like of shape (n_samples,)
        Class label of each point.
    n_constraints : int
        Number of pairs of each kind.
    random_state : int, RandomState instance or None, default=None
        Seed of the draws; pass an int for reproducible pairs.
    max_rounds : int, default=10
        How many times repeated pairs are redrawn before giving up.

    Returns
    -------
    pairs : ndarray of shape (n_pairs, 2)
        Similar pairs first, then dissimilar ones.
    pair_labels : ndarray of shape (n_pairs,)
        ``+1`` similar, ``-1`` dissimilar.
    """
    labels = np.asarray(check_class_labels(labels, name="labels"))
    return metric_pairs.draw_pairs(labels, n_constraints, random_state=random_state,
                                   max_rounds=max_rounds)


def neighbor_pairs(X, labels, n_neighbors=N_NEIGHBORS):
    """Similar and dissimilar pairs from class labels: each point's neighbourhood.

    For every point, its ``n_neighbors`` nearest points of its own class
    (similar pairs: LMNN's *target neighbours*) and its ``n_neighbors``
    nearest points of the other classes (dissimilar pairs: the *impostors*
    that would outvote the targets), in the Euclidean metric of ``X``;
    each unordered pair once. Their number grows with the data (at most
    ``2 n_neighbors n_samples``), and they are the pairs whose order
    decides a k-NN vote: a far pair of two classes is already right, and
    its constraint would spend the metric's trace (fixed) where it does not
    matter. A class of one point has no similar pair; a point with fewer
    neighbours of a kind gets all of them.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The points; neighbours are found in their Euclidean metric.
    labels : array-like of shape (n_samples,)
        Class label of each point.
    n_neighbors : int, default=5
        Neighbours of each kind (same class, other classes) per point.

    Returns
    -------
    pairs : ndarray of shape (n_pairs, 2)
        Similar pairs first, then dissimilar ones; each ``(a, b)`` with
        ``a < b``, in sorted order.
    pair_labels : ndarray of shape (n_pairs,)
        ``+1`` similar, ``-1`` dissimilar.
    """
    labels = np.asarray(check_class_labels(labels, name="labels"))
    return metric_pairs.neighbor_pairs(X, labels, n_neighbors)
