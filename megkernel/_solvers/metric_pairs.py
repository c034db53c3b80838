"""Pairs from class labels for the metric learners.

:func:`neighbor_pairs` (each point's neighbourhood), :func:`draw_pairs`
(random, metric-learn's ``*_Supervised`` sampling) and the rule
:func:`pairs_from_labels` that ``fit``, the validation folds
(:class:`ClassPairs`) and ``partial_fit``'s labeled chunks share. The labels
are taken as checked (the public samplers of :mod:`megkernel.metric` check
them first: a missing label or a mix of kinds is named there).
"""

from __future__ import annotations

import warnings
from numbers import Integral

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from sklearn.utils import check_random_state

from .._warnings import warn_user

__all__ = ["ClassPairs", "component_codes", "draw_pairs", "label_candidates", "neighbor_pairs",
           "pairs_from_labels", "resolve_from_labels"]

#: Default neighbours per point of :func:`neighbor_pairs` (scikit-learn's
#: ``KNeighborsClassifier`` default: the neighbourhood a k-NN user looks at).
N_NEIGHBORS = 5


def draw_pairs(labels, n_constraints, *, random_state=None, max_rounds=10, asked=None):
    """Random similar and dissimilar pairs from checked class labels.

    :func:`megkernel.draw_pairs`, whose docstring says the rule; ``labels``
    are taken as checked. ``asked``: how a shortage's warning names the
    count (default: ``asked for n_constraints``).
    """
    asked = f"asked for {n_constraints}" if asked is None else asked
    labels = np.asarray(labels)
    rng = check_random_state(random_state)
    _, codes = np.unique(labels, return_inverse=True)
    codes = codes.ravel()
    counts = np.bincount(codes)
    n_similar = int(np.sum(counts * (counts - 1) // 2))
    possible = {True: n_similar, False: len(codes) * (len(codes) - 1) // 2 - n_similar}
    kinds = []
    for same in (True, False):
        kind = "similar" if same else "dissimilar"
        if n_constraints >= possible[same]:  # all of them: no redraws of pairs that do not exist
            pairs = _all_pairs(codes, same)[rng.permutation(possible[same])]
            flip = rng.randint(2, size=len(pairs)).astype(bool)
            pairs[flip] = pairs[flip, ::-1]
            if possible[same] < n_constraints:
                warn_user(f"Only {possible[same]} distinct {kind} pairs exist ({asked}); "
                          "using all of them.", UserWarning)
            kinds.append(pairs)
            continue
        drawn = _draw_distinct(codes, n_constraints, same, rng, max_rounds)
        if len(drawn) < n_constraints:
            warn_user(f"Only {len(drawn)} distinct {kind} pairs could be drawn "
                      f"({asked}).", UserWarning)
        kinds.append(drawn)
    pair_labels = np.r_[np.ones(len(kinds[0]), int), -np.ones(len(kinds[1]), int)]
    return np.vstack(kinds), pair_labels


def neighbor_pairs(X, labels, n_neighbors=N_NEIGHBORS):
    """Each point's neighbourhood pairs from checked class labels.

    :func:`megkernel.neighbor_pairs`, whose docstring says the rule;
    ``labels`` are taken as checked.
    """
    X = np.asarray(X, dtype=float)
    labels = np.asarray(labels)
    if X.ndim != 2 or len(X) != len(labels):
        raise ValueError(f"X must have shape (n_samples, n_features) with one row per "
                         f"label; got X of shape {X.shape} and {len(labels)} labels.")
    if not (isinstance(n_neighbors, Integral) and n_neighbors >= 1):
        raise ValueError(f"n_neighbors must be an integer >= 1, got {n_neighbors!r}.")
    _, codes = np.unique(labels, return_inverse=True)
    codes = codes.ravel()
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or infinite values.")
    largest = float(np.abs(X).max(initial=0.0))
    # in units of the largest entry (the order of distances is the same): squared
    # distances of points near 1e200 would overflow
    centred = X / largest if largest > 0 else X
    centred = centred - centred.mean(axis=0)
    sq_norms = np.einsum("ij,ij->i", centred, centred)
    # squared distances are compared in steps of 1e-9 of their mean, ties broken by
    # index: the same pairs for X scaled, rotated or shifted (round-off aside)
    quantum = 1e-9 * 2.0 * sq_norms.sum() / max(len(X) - 1, 1) or 1.0
    kinds = ([], [])
    for c in range(codes.max(initial=-1) + 1):
        own, other = np.flatnonzero(codes == c), np.flatnonzero(codes != c)
        for kind, reference in enumerate((own, other)):
            k = min(n_neighbors, len(reference) - (kind == 0))
            if k >= 1:
                kinds[kind].append(_nearest(centred, sq_norms, own, reference, k,
                                            quantum, exclude_self=kind == 0))
    unique = [np.unique(np.sort(np.vstack(k + [np.zeros((0, 2), np.intp)]), axis=1),
                        axis=0).astype(np.intp) for k in kinds]
    pair_labels = np.r_[np.ones(len(unique[0]), int), -np.ones(len(unique[1]), int)]
    return np.vstack(unique), pair_labels


#: Query rows x reference columns per block of :func:`_nearest` (32 MB of doubles).
_BLOCK = 1 << 22


def _nearest(centred, sq_norms, queries, reference, k, quantum, *, exclude_self):
    """Pairs ``(query, one of its k nearest references)``, in blocks of queries.

    Squared distances rounded to ``quantum``; ties at the k-th go to the
    lowest reference index. ``exclude_self``: ``queries`` and ``reference``
    are the same points, none its own neighbour.
    """
    rows = max(1, _BLOCK // max(len(reference), 1))
    blocks = []
    for start in range(0, len(queries), rows):
        block = queries[start:start + rows]
        sq = (sq_norms[block][:, None] + sq_norms[reference][None, :]
              - 2.0 * centred[block] @ centred[reference].T)
        keys = np.round(np.maximum(sq, 0.0) / quantum)
        if exclude_self:
            keys[np.arange(len(block)), start + np.arange(len(block))] = np.inf
        kth = np.partition(keys, k - 1, axis=1)[:, k - 1:k]
        below, at = keys < kth, keys == kth
        take = below | (at & (np.cumsum(at, axis=1) <= k - below.sum(axis=1, keepdims=True)))
        row, column = np.nonzero(take)
        blocks.append(np.column_stack([block[row], reference[column]]))
    return np.vstack(blocks)


def _draw_distinct(codes, n_constraints, same, rng, max_rounds):
    """``draw_pairs``' rounds for one kind: anchors, partners, first occurrences.

    Each round draws the missing number of anchors uniformly, then for each
    anchor with a partner (in order) one uniformly among the points of its
    class other than itself (``same``), or of the other classes, each list
    in ascending order; an unordered pair drawn before is dropped. The draws
    are those of one ``randint`` call per anchor, vectorised (a legacy
    ``RandomState`` gives the same stream for an array of bounds): O(n +
    n_constraints log n) per round instead of O(n) per anchor.
    """
    n = len(codes)
    order = np.argsort(codes, kind="stable")  # each class's points ascending
    counts = np.bincount(codes)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    rank_in_class = np.empty(n, dtype=np.intp)
    rank_in_class[order] = np.arange(n) - starts[codes[order]]
    # per class, its members' index minus their rank: non-members before each member
    gaps = order - (np.arange(n) - starts[codes[order]])
    found = np.zeros((0, 2), dtype=np.intp)
    keys = np.zeros(0, dtype=np.int64)
    for _ in range(max_rounds):
        missing = n_constraints - len(found)
        if missing <= 0:
            break
        anchors = rng.randint(n, size=missing)
        classes = codes[anchors]
        sizes = counts[classes] - 1 if same else n - counts[classes]
        anchors, classes, sizes = anchors[sizes > 0], classes[sizes > 0], sizes[sizes > 0]
        k = rng.randint(0, sizes) if len(sizes) else np.zeros(0, dtype=np.intp)
        if same:  # the k-th of the class, skipping the anchor itself
            k = k + (k >= rank_in_class[anchors])
            partners = order[starts[classes] + k]
        else:  # the k-th point outside the class: k plus the members before it
            partners = np.empty(len(k), dtype=np.intp)
            for c in np.unique(classes):
                at = classes == c
                members = slice(starts[c], starts[c] + counts[c])
                partners[at] = k[at] + np.searchsorted(gaps[members], k[at], side="right")
        pairs = np.column_stack([anchors, partners]).astype(np.intp)
        new_keys = pairs.min(axis=1).astype(np.int64) * n + pairs.max(axis=1)
        _, first = np.unique(new_keys, return_index=True)
        first = np.sort(first)
        first = first[~np.isin(new_keys[first], keys)]
        found = np.vstack([found, pairs[first]])
        keys = np.r_[keys, new_keys[first]]
    return found[:n_constraints]


def _all_pairs(codes, same):
    """Return every pair ``(a, b)``, ``a < b``, of points of one class or of two.

    One class when ``same``; an array of shape (n_pairs, 2) (their number,
    not n^2, of memory).
    """
    members = [np.flatnonzero(codes == c) for c in range(codes.max(initial=-1) + 1)]
    blocks = []
    for c, own in enumerate(members):
        partners = own if same else np.flatnonzero(codes > c)
        a, b = np.meshgrid(own, partners, indexing="ij")
        keep = a < b if same else np.ones(a.shape, dtype=bool)  # classes: distinct points
        blocks.append(np.sort(np.column_stack([a[keep], b[keep]]), axis=1))
    return np.vstack(blocks + [np.zeros((0, 2), dtype=np.intp)]).astype(np.intp)


def component_codes(n_points, pairs, signs):
    """Classes rebuilt from given pairs: their similar pairs' connected components.

    Codes ``0, 1, ...`` of the components of two or more points, -1 for a
    point in none (no check that they stand in for classes: see
    :func:`~megkernel._solvers.holdout.pair_components`).
    """
    similar = np.asarray(pairs)[np.asarray(signs) > 0]
    graph = coo_matrix((np.ones(len(similar)), (similar[:, 0], similar[:, 1])),
                       shape=(n_points, n_points))
    _, labels = connected_components(graph, directed=False)
    linked = np.bincount(labels)[labels] > 1
    codes = np.full(n_points, -1)
    codes[linked] = np.unique(labels[linked], return_inverse=True)[1].ravel()
    return codes


class ClassPairs:
    """The class labels a fit drew its pairs from, for the validation's folds.

    Random pairs (``n_constraints`` set): a fold draws as many as the final
    fit among its own training points (:func:`draw_pairs`), not the share
    of those with both ends among them (a quarter for a half). Neighbourhood pairs
    (:func:`neighbor_pairs`, ``n_constraints=None``): a fold keeps the final
    pairs among its points (:meth:`draw` says why). Either way the classes
    are the validation's labels.
    """

    def __init__(self, y, from_labels, n_constraints, pairs, signs, codes=None):
        # codes: given class codes instead of y's (-1: a point of no class)
        self.codes = (np.unique(np.asarray(y), return_inverse=True)[1].ravel()
                      if codes is None else np.asarray(codes))
        self.from_labels, self.n_constraints = from_labels, n_constraints
        self.pairs, self.signs = pairs, signs

    def draw(self, points, seed):
        """Pairs (row indices of all training points) among ``points`` and their signs.

        ``None`` for neighbourhood pairs: the fold learns from the final
        fit's pairs among ``points`` (each point's neighbours that are also
        training points of the fold), as :meth:`fit_pairs` validates. Made
        again among the fold's points, the neighbourhoods would reach
        farther (a sparser sample) than the final fit's: the fold would
        validate other pairs than those the final fit learns from.
        """
        if self.from_labels in ("neighbors", "soft-neighbors"):
            return None
        with warnings.catch_warnings():  # a fold may have fewer pairs: the fit warns, not it
            warnings.simplefilter("ignore")
            pairs, signs = draw_pairs(self.codes[points], self.n_constraints,
                                      random_state=seed)
        return points[pairs], signs.astype(float)


def resolve_from_labels(from_labels, n_constraints, default):
    """Return the kinds of pairs a fit makes from labels (several: validation chooses).

    ``"auto"``: ``("random",)`` when ``n_constraints`` is set (it counts
    random pairs), else the learner's ``default`` (a tuple). An explicit
    ``"neighbors"`` with ``n_constraints`` set is refused (one of them would
    be ignored).
    """
    if from_labels == "auto":
        return ("random",) if n_constraints is not None else tuple(default)
    if from_labels != "random" and n_constraints is not None:
        raise ValueError(
            f"n_constraints={n_constraints} counts random pairs, but from_labels="
            f"{from_labels!r} draws none; set from_labels='random' or "
            "n_constraints=None.")
    return (from_labels,)


def pairs_from_labels(X, y, from_labels, n_constraints=None, *, n_neighbors=N_NEIGHBORS,
                      random_state=None):
    """Make the metric learners' pairs from class labels: one rule for fit and chunks.

    ``from_labels="neighbors"`` (and ``"soft-neighbors"``, whose learner
    reports on these pairs): :func:`neighbor_pairs` of ``X``; ``"random"``:
    ``n_constraints`` random pairs of each kind (:func:`draw_pairs`;
    ``None``: ``20 n_classes^2``).

    Returns
    -------
    pairs, pair_labels, n_constraints
        The last: the number of random pairs of each kind (``None`` for
        neighbourhood pairs).
    """
    if from_labels in ("neighbors", "soft-neighbors"):
        return (*neighbor_pairs(X, y, n_neighbors), None)
    asked = None
    if n_constraints is None:  # the default count: a shortage is not of a number asked for
        n_constraints = 20 * np.unique(np.asarray(y)).size ** 2
        asked = f"n_constraints=None draws 20 * n_classes**2 = {n_constraints} of each kind"
    return (*draw_pairs(y, n_constraints, random_state=random_state, asked=asked),
            n_constraints)


def label_candidates(X, labels, kinds, n_constraints=None, *, n_neighbors=N_NEIGHBORS,
                     random_state=None):
    """Return the candidate pair sets a fit makes from class labels, one per kind.

    Each a :class:`ClassPairs` of :func:`pairs_from_labels` (same
    ``random_state`` for each kind).
    """
    candidates = []
    for kind in kinds:
        pairs, signs, drawn = pairs_from_labels(X, labels, kind, n_constraints,
                                                n_neighbors=n_neighbors,
                                                random_state=random_state)
        candidates.append(ClassPairs(labels, kind, drawn, pairs, signs))
    return candidates
