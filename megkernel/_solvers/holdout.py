"""Held-out data, in one place: splits, folds, the verdict's statistics, training length.

Every learner that holds data out goes through this module, with one
convention: a function takes the data (or its size), the share or number of
folds, and ``random_state`` (anything :func:`~sklearn.utils.check_random_state`
takes: a seed, a ``RandomState`` -- used as it is, so a caller's generator
goes on drawing -- or ``None``), and returns the training indices, what is
held out, and a reason when nothing could be held out.

* **Splits of pairs.** :func:`holdout_pairs` (a share of the pairs, for the
  MEG batch fit's early stopping and verdict) and
  :func:`split_labelled_pairs` (a share of each kind of labelled pair, for
  DefiniteBoost's verdict and its choice of ``gamma``).
* **Folds of points.** :func:`resolve_n_folds`, :func:`validation_folds`
  (the metric learners' validation).
* **The verdict's statistics.** :func:`r2_score` (held-out squared
  distances), :func:`pair_ranking_auc` and :class:`HeldOutPairs` (held-out
  pair constraints), :func:`gain_is_real` (paired gains against their
  standard error).
* **Training length** of the metric learners, below.

Training length: one validation loop for every metric learner.

The training points are split into folds (:func:`resolve_n_folds`: five
below 600 points, else two); each fold's model learns from
pairs among the other points only (as the final model learns from pairs
among the training points and then meets new points) and is scored on the
held-out points after each checkpoint of its training length. From class
labels the classes are the k-NN score's labels; random pairs drawn from them
are drawn again for each fold, as many as the final fit draws, among the
fold's own training points (with two folds, the pairs with both ends in a
fold's half are only about a quarter of them, too few to show a gain the
full fit makes), and the final fit runs ``n / n_f`` times the validated length
(:func:`_length_scale`). Neighbourhood pairs (the default from labels) and
given pairs stay the fold's pairs with both ends among its training points
(about ``((k-1)/k)**2`` of them with ``k`` folds): the log records their
ratio and how far past the choice the held-out curve held it, for a learner
whose refit on every pair gains longer than a fold's
(:func:`megkernel._solvers.metric_validation.refit_epochs`).

* ``"knn"`` -- the mean relative 1-NN margin of the held-out points against
  the others, with the similar pairs' connected components as classes
  (:func:`pair_components`), when those can stand in for classes;
* ``"auc"`` -- otherwise the ROC AUC of the held-out pairs (those with a
  held-out end) by their learned distance.

A learner enters the loop through a *fold path*: an object made from a
fold's :class:`HeldOutScorer` whose ``score_at(length)`` trains the fold's
model to ``length`` (in the learner's units, asked in increasing order) and
returns the scorer's per-item scores. :func:`validate_length` advances the
folds together over checkpoints that double (:func:`doubling_checkpoints`:
0, 1/8, 1/4, ... passes over the pairs) with no cap but a safety net, by
one rule (:func:`choose_checkpoint`): checkpoint 0 is the prior (the
Euclidean metric) and the first choice; a longer length replaces the
choice only if

* its paired gain over the choice on the held-out items exceeds ``z``
  standard errors (the gain is real), and
* its gain over the prior is at least ``(length / chosen length) **
  ELASTICITY`` times the choice's (the gain is worth the length): learning
  that still pays grows its gain about in proportion to the length
  (elasticity 1); once the gain grows more slowly than the square root of
  the length, the rest is a creep that longer training does not repay.

A longer length whose held-out 1-NN accuracy (the share of positive
margins) is below the choice's by more than ``z`` standard errors never
replaces it: the margins can go on rising while the accuracy falls (the
margins of points already classified right grow, those of a few others
turn negative). The elasticity and significance tests are both needed:
the held-out margins (and AUCs) go on rising slowly and consistently long
after the 1-NN accuracy has peaked -- a doubling that adds a few per cent
of the gain is still "significant" over some hundreds of paired items,
so significance alone would train on with no accuracy to show for it
(figures: the benchmarks page). The loop stops after ``patience`` checkpoints without a
replacement (counted from one pass over the pairs: before it, not every
pair has been seen), or at the last checkpoint (with a
:class:`~sklearn.exceptions.ConvergenceWarning` if that one was chosen:
the gain was still growing there). It stops after the first of them
already where the next one cannot be chosen (:func:`_out_of_reach`: the
held-out score fell significantly below the choice, or it stopped
accelerating and the next doubling, extrapolated along the last one, stays
below the elasticity bar): that second checkpoint of the patience costs as
much as every length before it.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.stats import norm, rankdata
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from .._warnings import warn_user

__all__ = [
    "MIN_HELD_OUT",
    "MIN_RANDOM_PAIRS",
    "HeldOutPairs",
    "gain_is_real",
    "canonical_order",
    "holdout_pairs",
    "pair_ranking_auc",
    "r2_score",
    "split_labelled_pairs",
    "ELASTICITY",
    "FIRST_CHECKPOINT",
    "MAX_PASSES",
    "PATIENCE_FROM",
    "SMALL_DATA_FOLDS",
    "HeldOutScorer",
    "choose_checkpoint",
    "doubling_checkpoints",
    "pair_components",
    "resolve_n_folds",
    "validate_length",
    "validation_folds",
]

#: The first learned checkpoint, in passes over the pairs (epochs, sweeps);
#: each next one doubles it.
FIRST_CHECKPOINT = 0.125

#: Default safety net of a validated length, in passes over the pairs: the
#: search stops there even while its score still improves (and says so).
MAX_PASSES = 1000

#: Checkpoints shorter than one pass over the pairs do not count against
#: patience: before every pair has been seen once, no gain is no evidence
#: that learning has stalled.
PATIENCE_FROM = 1.0

#: Least elasticity of the validated gain to the training length: a length
#: ``r`` times the chosen one replaces it only if its gain over the prior is
#: at least ``r ** ELASTICITY`` times the choice's (a doubling adds at least
#: 41 % of the gain so far). 1 is the learning curve's early, proportional
#: growth and 0 a plateau; one half stops a logarithmic creep within a few
#: doublings of its onset.
ELASTICITY = 0.5

#: Queries per fold of the k-NN validation score (a random subset beyond).
_MAX_QUERIES = 400

#: The validation's budget: small data sets repeat the folds (at most
#: ``_MAX_REPEATS`` times) until ``(n_folds - 1) x items x repetitions``
#: reaches it (see :func:`validation_folds`); with two folds it is the
#: number of held-out items scored.
_MIN_ITEMS, _MAX_REPEATS = 600, 10

#: Folds of ``n_folds="auto"`` below ``_MIN_ITEMS`` training points; from
#: there on two (see :func:`resolve_n_folds`).
SMALL_DATA_FOLDS = 5


# -- splits of pairs -------------------------------------------------------------

#: Fewest held-out pairs for early stopping and a verdict: with fewer, a
#: held-out score's standard error is of the order of the score itself.
MIN_HELD_OUT = 10

#: Random pairs drawn as the other side when only one kind of labelled pair
#: is held out: at least this many, and at least as many as the held-out ones.
MIN_RANDOM_PAIRS = 200


def canonical_order(pairs, values):
    """Return the order that sorts a pair table by its content, whatever its row order.

    Rows are ordered by the value (a target or a label), then the pair's
    smaller and larger object, so that a split drawn over this order with a
    fixed ``random_state`` holds out the same pairs however the user's table
    is ordered: the same data give the same answer. The value comes first so
    that the order does not change either when the objects are renamed or
    the targets rescaled (only ties of the value are broken by the objects).
    Rows equal in all three are interchangeable.

    Parameters
    ----------
    pairs : ndarray of int, shape (n, 2)
        Object indices.
    values : ndarray of shape (n,)
        The rows' targets or labels.

    Returns
    -------
    order : ndarray of int, shape (n,)
        The canonical order (a permutation of ``range(n)``).
    """
    low = np.minimum(pairs[:, 0], pairs[:, 1])
    high = np.maximum(pairs[:, 0], pairs[:, 1])
    return np.lexsort((high, low, np.asarray(values, dtype=float)))


def holdout_pairs(n_pairs, fraction, random_state, *, min_held=MIN_HELD_OUT):
    """Hold out a random share of the pairs.

    Parameters
    ----------
    n_pairs : int
        Number of pairs.
    fraction : float
        Share held out (rounded to the nearest count).
    random_state : int, RandomState instance or None
        The split's randomness.
    min_held : int, default=MIN_HELD_OUT
        Fewest pairs held out, and fewest left to train on.

    Returns
    -------
    train : ndarray of int
        Sorted indices of the training pairs (every pair when nothing is
        held out).
    held : ndarray of int or None
        Sorted indices of the held-out pairs; ``None`` when there are too few.
    reason : str
        Why nothing was held out, in the user's terms (empty otherwise).
    """
    everything = np.arange(n_pairs)
    n_held = int(round(fraction * n_pairs))
    if n_held < min_held:
        return everything, None, (
            f"{n_pairs} pairs are too few to hold out {min_held} at validation_fraction="
            f"{fraction} (it takes about {int(np.ceil(min_held / fraction))})")
    if n_pairs - n_held < min_held:
        return everything, None, (
            f"{n_pairs} pairs are too few to keep {min_held} for training at "
            f"validation_fraction={fraction}, which holds out {n_held} (it takes about "
            f"{int(np.ceil(min_held / (1.0 - fraction)))}; or a smaller validation_fraction)")
    order = check_random_state(random_state).permutation(n_pairs)
    return np.sort(order[n_held:]), np.sort(order[:n_held]), ""


class HeldOutPairs:
    """Held-out pairs in two sides: those that should be closer, and farther.

    Parameters
    ----------
    closer, farther : ndarray of int, shape (n, 2)
        Object indices of each side's pairs.
    description : str
        What is ranked against what, for messages.
    """

    def __init__(self, closer, farther, description):
        self.closer = closer
        self.farther = farther
        self.description = description

    def score(self, sq_distances):
        """Return the AUC of a kernel, given its squared distances.

        Parameters
        ----------
        sq_distances : callable
            ``sq_distances(a, b)``: the kernel's squared distances of the
            pairs ``(a[i], b[i])``.

        Returns
        -------
        auc : float
            :func:`pair_ranking_auc` of the two sides.
        """
        return pair_ranking_auc(sq_distances(self.closer[:, 0], self.closer[:, 1]),
                                sq_distances(self.farther[:, 0], self.farther[:, 1]))


def split_labelled_pairs(pairs, signs, n_objects, fraction, random_state, *, held=None):
    """Hold out a share of each kind of labelled pair (similar / dissimilar).

    When only one kind is held out, random pairs of distinct objects stand on
    the other side of the ranking.

    Parameters
    ----------
    pairs : ndarray of int, shape (n_pairs, 2)
        Object indices.
    signs : ndarray of shape (n_pairs,)
        ``+1`` similar, ``-1`` dissimilar.
    n_objects : int
        Number of objects (for the random pairs).
    fraction : float
        Share of each kind held out (rounded down).
    random_state : int, RandomState instance or None
        The split's randomness.
    held : ndarray of int, optional
        Hold out exactly these pairs (indices) instead of drawing a share:
        the pairs another split held out, so that one fit's held-out data
        serve both.

    Returns
    -------
    train : ndarray of int or None
        Indices of the training pairs; ``None``: too few pairs to hold any
        out (see ``reason``).
    held_out : HeldOutPairs or None
        The held-out ranking.
    reason : str
        Why nothing was held out (empty when something was).
    """
    rng = check_random_state(random_state)
    similar, dissimilar = np.flatnonzero(signs > 0), np.flatnonzero(signs < 0)
    if held is not None:
        held = [np.intersect1d(kind, held) for kind in (similar, dissimilar)]
    else:
        held = []
        for kind in (similar, dissimilar):
            n_held = int(np.floor(fraction * kind.size))
            held.append(rng.permutation(kind)[:n_held] if n_held else kind[:0])
    n_held = sum(part.size for part in held)
    if n_held < MIN_HELD_OUT or n_held == len(pairs):
        needed = int(np.ceil(MIN_HELD_OUT / fraction))
        return None, None, (
            f"{len(pairs)} pairs are too few to hold out {MIN_HELD_OUT} at "
            f"validation_fraction={fraction:g} (it takes about {needed})")
    sim_held, dis_held = held
    if sim_held.size and dis_held.size:
        held_out = HeldOutPairs(pairs[sim_held], pairs[dis_held],
                                "held-out similar pairs against held-out dissimilar pairs")
    else:
        n_random = max(MIN_RANDOM_PAIRS, n_held)
        a = rng.randint(n_objects, size=n_random)
        b = (a + 1 + rng.randint(n_objects - 1, size=n_random)) % n_objects  # b != a
        random_pairs = np.column_stack([a, b])
        if sim_held.size:
            held_out = HeldOutPairs(pairs[sim_held], random_pairs,
                                    "held-out similar pairs against random pairs")
        else:
            held_out = HeldOutPairs(random_pairs, pairs[dis_held],
                                    "random pairs against held-out dissimilar pairs")
    train = np.setdiff1d(np.arange(len(pairs)), np.concatenate(held))
    return train, held_out, ""


# -- the verdict's statistics ----------------------------------------------------

def r2_score(loss, z):
    """Return the ``R^2`` of predictions with mean square error ``loss`` on targets ``z``.

    Parameters
    ----------
    loss : float
        Mean square error of the predictions.
    z : ndarray
        The targets.

    Returns
    -------
    r2 : float
        ``1 - loss / var(z)``; NaN when the targets do not vary: when their
        variance is within :data:`CONSTANT_TARGETS` ``* eps * mean(z)^2``
        (equal targets in units that are not a power of two leave a variance
        of round-off, and a ratio to it is any number at all).
    """
    if not len(z):
        return np.nan
    z = np.asarray(z, dtype=float)
    scale = float(np.max(np.abs(z)))  # in units of the largest: no overflow in squares
    if not scale > 0:
        return np.nan
    scaled = z / scale
    spread = float(np.std(scaled))
    if not spread > np.sqrt(CONSTANT_TARGETS * np.finfo(float).eps) * abs(float(np.mean(scaled))):
        return np.nan
    with np.errstate(over="ignore"):  # subnormal targets: a ratio beyond the range is -inf
        return 1.0 - loss / scale / scale / (spread * spread)


#: Targets whose variance is within this many ``eps * mean^2`` count as
#: constant for :func:`r2_score` (a relative spread below ~3e-8): the
#: round-off of equal targets is ``~(n eps mean)^2``, and no kernel's
#: predictions are more precise than that spread.
CONSTANT_TARGETS = 4.0


def pair_ranking_auc(closer, farther):
    """Return the AUC of two sides of values: how often ``closer`` ranks below ``farther``.

    ``P(closer < farther) + P(closer == farther) / 2`` over all pairs of one
    value from each side (Mann-Whitney, by ranks: ``O(n log n)``). Values
    equal up to round-off (relative ``1e-12``) count as ties, so that the
    prior ``I / d``, whose pair distances differ only by round-off, scores
    0.5.

    Parameters
    ----------
    closer, farther : array-like of float
        The two sides' values (squared distances).

    Returns
    -------
    auc : float
        In ``[0, 1]``.
    """
    closer = np.asarray(closer, dtype=float)
    farther = np.asarray(farther, dtype=float)
    values = np.concatenate([closer, farther])
    scale = np.max(np.abs(values), initial=0.0)
    if scale > 0:
        values = np.round(values / scale, 12)
    ranks = rankdata(values)
    n_closer, n_farther = closer.size, farther.size
    # rank sum of the farther side: each (closer, farther) with closer < farther adds 1
    u = ranks[n_closer:].sum() - n_farther * (n_farther + 1) / 2.0
    return float(u / (n_closer * n_farther))


# -- training length of the metric learners --------------------------------------


def pair_components(n_objects, pairs, signs, *, min_size=10, min_coverage=0.8):
    """Class-like labels from the similar pairs' connected components.

    Returns ``None`` when they cannot stand in for classes: a dissimilar pair
    inside a component, fewer than two components of two or more points, or
    less than ``min_coverage`` of the linked points in components of at
    least ``min_size`` points (the similar pairs too sparse to link a class
    together). Points in no similar pair get -1.
    """
    similar = pairs[signs > 0]
    graph = coo_matrix((np.ones(len(similar)), (similar[:, 0], similar[:, 1])),
                       shape=(n_objects, n_objects))
    _, labels = connected_components(graph, directed=False)
    sizes = np.bincount(labels)
    labels = np.where(sizes[labels] > 1, labels, -1)
    dissimilar = pairs[signs < 0]
    a, b = labels[dissimilar[:, 0]], labels[dissimilar[:, 1]]
    if np.any((a >= 0) & (a == b)):
        return None
    linked = sizes[sizes > 1]
    if len(linked) < 2 or linked[linked >= min_size].sum() < min_coverage * linked.sum():
        return None
    return labels


def _knn_score(embedded, labels, queries, references):
    """Relative 1-NN margin of each query against ``references``.

    For each query, ``(d_other - d_same) / (d_other + d_same)`` with ``d_same``
    (``d_other``) the distance to its nearest reference of the same (another)
    class: positive exactly where 1-NN is right, and smooth in the metric, so
    that the mean is less noisy than the 0/1 accuracy. Queries without both
    kinds of reference score 0.

    Returns
    -------
    margins : ndarray of shape (n_queries,)
    """
    q, ref = embedded[queries], embedded[references]
    sq = (np.einsum("ij,ij->i", q, q)[:, None] - 2.0 * q @ ref.T
          + np.einsum("ij,ij->i", ref, ref)[None, :])
    distances = np.sqrt(np.maximum(sq, 0.0))
    same = labels[references][None, :] == labels[queries][:, None]
    d_same = np.where(same, distances, np.inf).min(axis=1)
    d_other = np.where(same, np.inf, distances).min(axis=1)
    ok = np.isfinite(d_same) & np.isfinite(d_other) & (d_same + d_other > 0)
    margins = np.zeros(len(queries))
    margins[ok] = (d_other[ok] - d_same[ok]) / (d_other[ok] + d_same[ok])
    return margins


def _placements(scores, signs):
    """DeLong's placement values of the ROC AUC of ``scores`` (higher: similar).

    Returns the share of dissimilar pairs each similar pair out-ranks and the
    share of similar pairs each dissimilar pair is out-ranked by (ties count
    half): the mean of each is the AUC, and their paired differences between
    two metrics give the variance of the AUC's difference (DeLong et al. 1988).
    """
    positive, negative = scores[signs > 0], scores[signs < 0]  # in pair order: paired

    def share_below(values, sorted_reference):
        below = np.searchsorted(sorted_reference, values, side="left")
        at_or_below = np.searchsorted(sorted_reference, values, side="right")
        return (below + at_or_below) / (2.0 * len(sorted_reference))

    return (share_below(positive, np.sort(negative)),
            1.0 - share_below(negative, np.sort(positive)))


class HeldOutScorer:
    """Scores a fold's metric on its held-out points (or pairs), for any learner.

    The fold learns from the pairs with both ends outside ``held_out``
    (:attr:`train`); :meth:`score` takes the embedding of all training
    points under the fold's metric and returns the per-item scores
    (k-NN margins, or AUC placements).
    """

    def __init__(self, held_out, pairs, signs, labels, rng, fold_pairs=None):
        self.train = ~held_out[pairs[:, 0]] & ~held_out[pairs[:, 1]]
        self.n_train_points = int(np.count_nonzero(~held_out))
        self.drawn = fold_pairs is not None  # pairs drawn again among the fold's points
        self.train_pairs, self.train_signs = (
            (pairs[self.train], signs[self.train]) if fold_pairs is None else fold_pairs)
        self.labels = labels
        if labels is not None:
            labelled = labels >= 0
            queries = np.flatnonzero(held_out & labelled)
            if len(queries) > _MAX_QUERIES:
                queries = rng.choice(queries, _MAX_QUERIES, replace=False)
            self.queries, self.references = queries, np.flatnonzero(~held_out & labelled)
            usable = len(self.queries) > 0 and len(self.references) > 0
        else:
            self.val_pairs, self.val_signs = pairs[~self.train], signs[~self.train]
            usable = len(np.unique(self.val_signs)) == 2
        self.usable = usable and len(self.train_pairs) > 0

    def steps(self, length):
        """Return the updates (pairs processed) of ``length`` passes over the fold's pairs."""
        return int(round(length * len(self.train_pairs)))

    def score(self, embedded):
        """Per-item scores of the embedding of all training points."""
        if self.labels is not None:
            return _knn_score(embedded, self.labels, self.queries, self.references)
        differences = embedded[self.val_pairs[:, 0]] - embedded[self.val_pairs[:, 1]]
        sq_distances = np.einsum("ij,ij->i", differences, differences)
        return _placements(-sq_distances, self.val_signs)


def _fold_mean(item):
    return float(item[0].mean() if isinstance(item, tuple) else item.mean())


def resolve_n_folds(n_folds, n_objects):
    """Return the folds of a validation over ``n_objects`` training points.

    ``"auto"``: ``SMALL_DATA_FOLDS`` (5) below ``_MIN_ITEMS`` (600) points,
    with the repetitions of :func:`validation_folds`, else 2. A fold of
    half the points validates the length that suits half the data: where a
    learned metric needs every point to show its gain (a small, noisy set),
    the halves see none and keep the prior, while folds of four fifths of
    the points see it. The cost is time: the folds' models train on up to
    four times as many points, and a fold keeps about ``((k-1)/k)**2`` of
    given pairs (0.64 against 0.25), so a fit on 599 points takes several
    times one on 600. From 600 points on a half already holds 300, enough
    to show a gain, and five folds would cost that time for little
    (figures: the benchmarks page).
    """
    if isinstance(n_folds, str):  # "auto" (at most one fold per point)
        return max(2, min(SMALL_DATA_FOLDS, n_objects)) if n_objects < _MIN_ITEMS else 2
    return int(n_folds)


def validation_folds(n_objects, pairs, labels, *, n_folds, rng, min_items=_MIN_ITEMS):
    """Draw held-out masks of the points: ``n_folds`` folds, repeated as needed.

    The folds are repeated with new random splits, ``ceil(min_items /
    ((n_folds - 1) items))`` times (at most ``_MAX_REPEATS``): with labelled
    points as items, each repetition holds every point out once and trains
    on it ``n_folds - 1`` times, so the folds' models together learn from
    about ``min_items`` points; with two folds, ``min_items`` held-out items
    are scored. (With pairs as items, a fold trains
    only on the pairs with both ends among its points, about ``((k-1)/k)**2``
    of them: the formula then counts what the points would give.)

    Returns
    -------
    masks : list of ndarray of bool
    n_repeats : int
    """
    if n_folds > n_objects:  # before any mask: n_folds=10**9 would fill the memory
        raise ValueError(f"n_folds={n_folds} exceeds the {n_objects} training points: "
                         f"every fold holds out at least one; use at most {n_objects}.")
    items = int(np.sum(labels >= 0)) if labels is not None else len(pairs)
    n_repeats = int(np.clip(np.ceil(min_items / max((n_folds - 1) * items, 1)), 1,
                            _MAX_REPEATS))
    masks = []
    for _ in range(n_repeats):
        assignment = rng.permutation(n_objects) % n_folds
        masks += [assignment == k for k in range(n_folds)]
    return masks, n_repeats


#: A learned length claims no gain where fewer held-out points are 1-NN right
#: under it than under the prior by more than this many standard errors of the
#: paired difference: the one-standard-error rule (one point is noise).
FEWER_RIGHT_Z = 1.0


def gain_is_real(items, prior_items, z, n_repeats=1):
    """Tell whether the mean gain of ``items`` over ``prior_items`` exceeds ``z`` standard errors.

    k-NN margins: paired over the held-out points. AUC: DeLong's variance of
    each fold's paired AUC difference, ``var(D10)/n_pos + var(D01)/n_neg``.
    Repeated folds score the same points again: the standard error is taken
    as that of one repeat (``sqrt(n_repeats)`` times the naive one).
    """
    paired = _paired_gain(items, prior_items, n_repeats)
    return paired is not None and bool(paired[0] > z * paired[1])


def _paired_gain(items, prior_items, n_repeats):
    """Mean gain of ``items`` over ``prior_items`` and its standard error (:func:`gain_is_real`).

    ``None`` where a fold has fewer than two items (no standard error).
    """
    gains, variances = [], []
    for item, prior in zip(items, prior_items):
        parts = item if isinstance(item, tuple) else (item,)
        prior_parts = prior if isinstance(prior, tuple) else (prior,)
        differences = [a - b for a, b in zip(parts, prior_parts)]
        if min(len(d) for d in differences) < 2:
            return None
        gains.append(differences[0].mean())
        variances.append(sum(d.var(ddof=1) / len(d) for d in differences))
    return np.mean(gains), np.sqrt(np.sum(variances) * n_repeats) / len(gains)


def claim_holds(items, prior_items, z, n_repeats, n_looks):
    """Whether a learned length's gain over the prior is real after ``n_looks`` looks.

    The walk that chose it compared up to ``n_looks`` checkpoints with the
    prior at ``z`` standard errors each: the chance that one of them passes
    on noise alone grows with the looks (about ``n_looks`` times the one-look
    rate on independent ones). The claim holds where the gain exceeds the
    ``z`` that keeps the one-look rate for all of them together (Bonferroni:
    ``norm.isf(norm.sf(z) / n_looks)``, 2.64 for 6 looks at ``z=2``).
    """
    z_looks = float(norm.isf(norm.sf(z) / max(int(n_looks), 1)))
    return gain_is_real(items, prior_items, z_looks, n_repeats)


def _replaces(table, candidate, chosen, checkpoints, *, z, n_repeats, elasticity,
              scores):
    """Whether ``checkpoints[candidate]`` replaces the choice ``checkpoints[chosen]``.

    Its paired gain over the choice must exceed ``z`` standard errors; with
    k-NN margins, its held-out 1-NN accuracy (the share of positive margins)
    must not be below the choice's by more than ``z`` standard errors (paired:
    the margins can rise while fewer points are right, e.g. a class pulled
    tight around most of its points and away from a few), and an accuracy
    above it by more than ``z`` standard errors replaces the choice (the
    accuracy is what the score predicts); otherwise (unless the choice is
    the prior) its mean gain over the prior must be at least ``(length
    ratio) ** elasticity`` times the choice's.
    """
    if not gain_is_real(table[candidate], table[chosen], z, n_repeats):
        return False
    if not isinstance(table[candidate][0], tuple):
        right, right_before = _right(table[candidate]), _right(table[chosen])
        if gain_is_real(right_before, right, z, n_repeats):
            return False  # the margins rose, but significantly fewer points are right
        if gain_is_real(right, right_before, z, n_repeats):
            return True  # significantly more points are right: the score's own aim
    if chosen == 0 or elasticity <= 0:
        return True
    gain, chosen_gain = scores[candidate] - scores[0], scores[chosen] - scores[0]
    ratio = checkpoints[candidate] / checkpoints[chosen]
    return bool(gain >= ratio**elasticity * max(chosen_gain, 0.0))


def _out_of_reach(table, chosen, reached, checkpoints, *, z, n_repeats, elasticity, scores,
                  early=False):
    """Whether the next checkpoint cannot replace the choice: the folds stop before it.

    Asked after a checkpoint (the last row of ``table``) missed the choice
    ``chosen``. Either its score is significantly below the choice's (the
    held-out curve has turned down; the choice may be the prior), or, past
    a learned choice, where the scores have stopped accelerating (the last
    doubling added no more than the one before, or more only within the
    noise: :func:`_accelerates`; a curve convex in the log of the length
    may still turn up), the next checkpoint extrapolated along that last
    increment stays below the elasticity bar ``(length / chosen) **
    elasticity`` times the choice's gain, with no sign of the 1-NN accuracy
    rising above the choice's (k-NN margins: more held-out points right,
    counted over the folds) -- so that the patience's
    second checkpoint, which costs as much as every length before it, is
    not run where it could not be chosen.

    ``early``: asked before the first pass, where runs that start by pulling
    pairs apart often recover: a score significantly below the choice stops
    the folds only if two more doublings at the last pace (its rise, none if
    it fell) still leave it below the choice's, as for the prior
    (:func:`_prior_out_of_reach`).
    """
    last = len(table) - 1
    if len(reached) >= len(checkpoints):
        return False
    if gain_is_real(table[chosen], table[last], z, n_repeats) and not (
            early and last >= 2
            and _two_doublings_on(scores[last - 1], scores[last]) >= scores[chosen]):
        return True
    if chosen == 0 or last < 3:
        return False
    if elasticity <= 0:
        return False
    gains = [score - scores[0] for score in scores]
    lengths = reached[last - 2:last + 1]
    rise, rise_before = gains[last] - gains[last - 1], gains[last - 1] - gains[last - 2]
    per_log, per_log_before = rise / np.log(lengths[2] / lengths[1]), rise_before / np.log(
        lengths[1] / lengths[0])
    if per_log > per_log_before and _accelerates(table[last - 2:last + 1], lengths, z=z,
                                                 n_repeats=n_repeats):
        return False  # still accelerating: no extrapolation
    following = float(checkpoints[len(reached)])
    projected = gains[last] + max(per_log, 0.0) * np.log(following / lengths[2])
    bar = (following / reached[chosen]) ** elasticity * max(gains[chosen], 0.0)
    if projected >= bar:
        return False
    if not isinstance(table[last][0], tuple):  # k-NN margins: the 1-NN accuracy
        if _points_right(table[last]) > _points_right(table[chosen]):
            return False
    return True


def _two_doublings_on(before, last):
    """Return the score two doublings on at the last one's pace (its rise; none if it fell)."""
    return last + 2.0 * max(last - before, 0.0)


def _accelerates(rows, lengths, *, z, n_repeats):
    """Whether the held-out scores' pace per log of the length grew beyond their noise.

    ``rows``: three consecutive rows of the validation table, at ``lengths``.
    Each item's second difference (its rise per log of the length over the
    last step, less that over the step before), paired over the same items
    as :func:`gain_is_real`'s: the pace grew where its mean exceeds ``z``
    standard errors. A curve linear in the log of the length, whose two
    rises differ by noise alone, does not accelerate. Folds of fewer than
    two items have no noise to tell: any growth counts.
    """
    steps = np.log(lengths[2] / lengths[1]), np.log(lengths[1] / lengths[0])

    def second(before, middle, after):
        return (after - middle) / steps[0] - (middle - before) / steps[1]

    items = []
    for fold in zip(*rows):
        if isinstance(fold[0], tuple):  # AUC placements: each part
            items.append(tuple(second(*parts) for parts in zip(*fold)))
        else:
            items.append(second(*fold))
    parts = [part for item in items for part in (item if isinstance(item, tuple) else (item,))]
    if min(len(part) for part in parts) < 2:
        return True
    zeros = [tuple(np.zeros_like(part) for part in item) if isinstance(item, tuple)
             else np.zeros_like(item) for item in items]
    return gain_is_real(items, zeros, z, n_repeats)


def _prior_out_of_reach(table, *, z, n_repeats, scores):
    """Whether the prior, still the choice before one pass, stays out of the learner's reach.

    The last checkpoint's score is significantly below the prior's, and two
    more doublings at the pace of the last one (the scores' rise per
    doubling, none if they fell) still leave it below the prior's: the
    checkpoints of the patience, one and two passes, would not replace it.
    Or the curve is flat: two more doublings at that pace leave the gain
    over the prior below ``z`` standard errors of the last checkpoint's
    paired gain, the least a checkpoint needs to replace the prior.
    With k-NN margins the same holds of the held-out 1-NN accuracy (the
    share of positive margins), where the margins do not climb back to the
    prior's within those two doublings (margins still below it but rising
    fast may carry the accuracy back with them): no checkpoint whose
    accuracy is significantly below the choice's replaces it
    (:func:`_replaces`), however far its margins rise above the prior's
    (the margins of points already right grow while a few others turn
    wrong).
    """
    last = len(table) - 1
    if last < 2:
        return False

    def stays_below(rows, values):
        if not gain_is_real(rows[0], rows[2], z, n_repeats):
            return False
        return bool(_two_doublings_on(values[1], values[2]) < values[0])

    rows = [table[0], table[last - 1], table[last]]
    if stays_below(rows, [scores[0], scores[last - 1], scores[last]]):
        return True
    paired = _paired_gain(table[last], table[0], n_repeats)
    ahead = _two_doublings_on(scores[last - 1], scores[last])
    if paired is not None and max(scores[last] - scores[last - 1], 0.0) <= (
            scores[last - 1] - scores[last - 2]):
        # flat: two more doublings at the last pace gain no real gain (a pace
        # that grew, even within its noise, may go on growing: a curve convex
        # in the log of the length is not extrapolated)
        if ahead - scores[0] < z * paired[1]:
            return True
    if isinstance(table[0][0], tuple):  # AUC placements: no accuracy
        return False
    if scores[last] < scores[0] <= ahead:  # margins climbing back to the prior's
        return False
    right = [_right(row) for row in rows]
    return stays_below(right, [_points_right(row) / sum(item.size for item in row)
                               for row in rows])


def _right(row):
    """Whether each held-out point of a row is 1-NN right (its k-NN margin positive)."""
    return [(item > 0).astype(float) for item in row]


def _points_right(row):
    """Held-out points with a positive k-NN margin in a row of the table, over its folds.

    The 1-NN accuracy's rises and falls are counted in points: one point
    turned right in a fold and another turned wrong in a fold of another
    size move the mean of the folds' shares, not the accuracy.
    """
    return sum(int(np.count_nonzero(item > 0)) for item in row)


def _mean_scores(items):
    return [float(np.mean([_fold_mean(item) for item in row])) for row in items]


def choose_checkpoint(checkpoints, items, *, z=2.0, n_repeats=1, elasticity=ELASTICITY):
    """Choose the checkpoint of a validation table: the rule of every learner.

    ``items[c][k]``: fold ``k``'s per-item scores at ``checkpoints[c]``;
    ``checkpoints[0]`` is the prior, the first choice. Walking to longer
    lengths, a checkpoint replaces the current choice only if its paired
    gain over it exceeds ``z`` standard errors (learning has to earn its
    place against the prior, and each longer run against the shorter one
    chosen before) and its mean gain over the prior is at least
    ``(length / chosen length) ** elasticity`` times the choice's (a score
    that only creeps up does not buy more training), or (k-NN margins) its
    1-NN accuracy is significantly higher; never if it is significantly
    lower (see :func:`_replaces`).

    Returns
    -------
    best : the chosen checkpoint
    scores : list of float (mean over folds, per checkpoint)
    gain_is_real : bool
        Whether a learned checkpoint was chosen.
    """
    scores = _mean_scores(items)
    chosen = 0
    for index in range(1, len(items)):
        if _replaces(items, index, chosen, checkpoints, z=z, n_repeats=n_repeats,
                     elasticity=elasticity, scores=scores):
            chosen = index
    return checkpoints[chosen], scores, chosen > 0


def doubling_checkpoints(max_length=MAX_PASSES, *, first=FIRST_CHECKPOINT):
    """Return the lengths :func:`validate_length` tries.

    ``0, first, 2 first, 4 first, ...`` below ``max_length``, then
    ``max_length`` itself.

    Returns
    -------
    list of float
    """
    max_length = float(max_length)
    checkpoints, length = [0.0], float(first)
    while length < max_length:
        checkpoints.append(length)
        length *= 2.0
    checkpoints.append(max_length)
    return checkpoints


def validate_length(n_objects, pairs, signs, make_path, *, checkpoints, n_folds, rng,
                    patience=2, z=2.0, elasticity=ELASTICITY, min_items=_MIN_ITEMS,
                    learner="The learner", safety_net="max_iter", classes=None,
                    reference=None, early_prior=False, looks_before=0):
    """How long to train: cross-validated over the training points.

    Parameters
    ----------
    n_objects : int
        Number of training points.
    pairs : ndarray of shape (n_pairs, 2)
        Row indices of the training points.
    signs : ndarray of shape (n_pairs,)
        ``+1`` similar, ``-1`` dissimilar.
    make_path : callable
        ``make_path(scorer)``: the learner's fold path for a usable
        :class:`HeldOutScorer` (see the module docs).
    checkpoints : sequence of float
        Training lengths to score, increasing; the first is 0 (the prior),
        the last the safety net (e.g. :func:`doubling_checkpoints`).
    n_folds : int or "auto"
        See :func:`resolve_n_folds`.
    rng : numpy.random.Generator
        Draws the folds (and the queries of large folds).
    patience : int or None, default=2
        Stop after this many checkpoints that do not replace the current
        choice (those shorter than ``PATIENCE_FROM``, one pass, do not
        count); ``None``: score every checkpoint.
    z : float, default=2.0
        Standard errors a longer length's gain over the current choice
        (first: the prior) must exceed.
    elasticity : float, default=ELASTICITY
        A longer length's gain over the prior must be at least ``(length /
        chosen length) ** elasticity`` times the current choice's; 0: any
        real gain buys more training.
    min_items : int, default=600
        Training items the fold models learn from together: small data sets
        repeat their folds (:func:`validation_folds`).
    learner, safety_net : str
        Names for the warning when the last checkpoint is reached with the
        score still rising there.
    classes : object or None, default=None
        When the pairs were drawn from class labels: an object with the
        integer class ``codes`` of the training points and ``draw(points,
        seed)``, which draws the final fit's number of pairs among
        ``points`` (returns the pairs, in rows of all training points, and
        their signs; or ``None``: the pairs among them). Each fold then
        learns from those pairs and is scored with the classes as labels.
    reference : callable or None, default=None
        ``reference(scorer)``: a fold's per-item scores under a reference
        metric other than the checkpoint 0 (e.g. the Euclidean metric where
        the learner starts from another, learned prior). The chosen length
        is then also compared with it, paired over the same held-out items:
        ``"gain_is_real"`` says that the chosen metric's gain over the
        reference is real (and, past the prior, its gain over the prior).

    Returns
    -------
    length : float or None
        The chosen checkpoint, times ``log["length_scale"]`` (``n / n_f``
        where the folds drew their pairs again among their ``n_f`` points,
        see :func:`_length_scale`; else 1); ``None`` when no fold can be
        scored (no held-out point with a labeled reference, or no held-out
        pair of each kind).
    log : dict
        ``"score"`` ("knn" or "auc"), ``"checkpoints"`` and ``"scores"``
        (mean over folds, one per checkpoint reached), ``"chosen"``,
        ``"gain_is_real"`` (a learned length chosen), ``"n_folds"``, ``"n_repeats"`` and
        ``"stopped"`` (``"patience"``, ``"out_of_reach"`` (see
        :func:`_out_of_reach`), or ``"max_length"`` when the
        checkpoints ran out), ``"length_scale"``, ``"held_to"`` (the longest
        checkpoint reached up to which no checkpoint past the choice scored
        significantly below it: :func:`_held_to`), ``"pair_ratio"`` (the
        pairs over a fold's mean training pairs); with the k-NN score also ``"accuracies"``,
        the held-out 1-NN accuracy (share of positive margins) per
        checkpoint; with ``reference``, ``"reference_score"`` (its mean),
        ``"gain_over_reference"`` and ``"worse_than_reference"`` (the
        chosen length's paired gain over it, or loss, beyond ``z`` standard
        errors).
    early_prior : bool, default=False
        Also stop at the last checkpoint before one pass (``PATIENCE_FROM``)
        where the choice is out of reach: the prior by
        :func:`_prior_out_of_reach`, a learned length by
        :func:`_out_of_reach` (the rules of the patience, asked half a pass
        sooner): for learners whose every pass costs much (DefiniteBoost's
        sweeps: the patience's one and two passes cost four times every
        checkpoint before them). Earlier checkpoints never stop it:
        projections that start by pulling a good prior apart often recover
        within the first pass.
    looks_before : int, default=0
        Checkpoints already compared with the prior by validations made
        before this one on the same data (other candidates, kept only where
        they showed no gain): they count among the looks a claim must clear
        (:func:`claim_holds`).
    """
    redraw = classes is not None
    labels = classes.codes if redraw else pair_components(n_objects, pairs, signs)
    n_folds = resolve_n_folds(n_folds, n_objects)
    masks, n_repeats = validation_folds(n_objects, pairs, labels, n_folds=n_folds, rng=rng,
                                        min_items=min_items)
    scorers = [HeldOutScorer(mask, pairs, signs, labels, rng, fold_pairs=(
        classes.draw(np.flatnonzero(~mask), int(rng.integers(2**31))) if redraw else None))
        for mask in masks]
    paths = [make_path(scorer) for scorer in scorers if scorer.usable]
    log = {"score": "knn" if labels is not None else "auc", "checkpoints": [],
           "scores": [], "chosen": None, "gain_is_real": False, "n_folds": n_folds,
           "n_repeats": n_repeats,
           "stopped": "max_length", "length_scale": 1.0}
    if not paths:
        return None, log
    table, scores, chosen, since = [], [], 0, 0  # scores: each row's mean over folds
    for length in checkpoints:
        table.append([path.score_at(length) for path in paths])
        scores.append(float(np.mean([_fold_mean(item) for item in table[-1]])))
        log["checkpoints"].append(length)
        if len(table) == 1:  # the prior: the first choice
            continue
        if _replaces(table, len(table) - 1, chosen, log["checkpoints"], z=z,
                     n_repeats=n_repeats, elasticity=elasticity, scores=scores):
            chosen, since = len(table) - 1, 0
        elif (early_prior and length < PATIENCE_FROM <= 2 * length
              and (_prior_out_of_reach(table, z=z, n_repeats=n_repeats, scores=scores)
                   if chosen == 0 else
                   _out_of_reach(table, chosen, log["checkpoints"], checkpoints, z=z,
                                 n_repeats=n_repeats, elasticity=elasticity,
                                 scores=scores, early=True))):
            log["stopped"] = "out_of_reach"
            break
        elif patience is not None and length >= PATIENCE_FROM:
            since += 1
            if since >= patience:
                log["stopped"] = "patience"
                break
            if _out_of_reach(table, chosen, log["checkpoints"], checkpoints, z=z,
                             n_repeats=n_repeats, elasticity=elasticity, scores=scores):
                log["stopped"] = "out_of_reach"
                break
    # the walk of choose_checkpoint, made as the rows came (each step sees rows up to it)
    log["looks"] = len(table) - 1
    log["within_noise"] = chosen > 0 and not claim_holds(table[chosen], table[0], z, n_repeats,
                                                         looks_before + len(table) - 1)
    if log["within_noise"]:  # the best of several looks, not beyond their noise
        chosen = 0
    # margins that rose while fewer held-out points are right than under the prior,
    # by more than one standard error of the paired difference (a point or two is
    # noise), claim no gain: the 1-NN accuracy is what the margins stand for
    log["fewer_right"] = bool(chosen > 0 and not isinstance(table[0][0], tuple)
                              and gain_is_real(_right(table[0]), _right(table[chosen]),
                                               FEWER_RIGHT_Z, n_repeats))
    best, log["scores"] = log["checkpoints"][chosen], scores
    log["gain_is_real"] = chosen > 0 and not log["fewer_right"]
    log["chosen"] = best
    if reference is not None:  # the chosen row against the reference, item by item
        usable = [scorer for scorer in scorers if scorer.usable]
        reference_items = [reference(scorer) for scorer in usable]
        chosen_items = table[log["checkpoints"].index(best)]
        log["reference_score"] = float(np.mean([_fold_mean(item)
                                                for item in reference_items]))
        log["gain_over_reference"] = gain_is_real(chosen_items, reference_items, z,
                                                  n_repeats)
        log["worse_than_reference"] = gain_is_real(reference_items, chosen_items, z,
                                                   n_repeats)
        # real: over the reference, and over the prior where learning went past it
        log["gain_is_real"] = log["gain_over_reference"] and (
            best == 0 or log["gain_is_real"])
    if labels is not None:  # a margin is positive exactly where 1-NN is right
        log["accuracies"] = [float(np.mean([np.mean(item > 0) for item in row]))
                             for row in table]
    if log["stopped"] == "max_length" and best == log["checkpoints"][-1] and best > 0:
        warn_user(f"{learner}: the validated score still improved at the longest "
                  f"length allowed ({best:g} passes over the pairs); raise {safety_net} "
                  "to let it learn longer.", ConvergenceWarning)
    log["length_scale"] = _length_scale(n_objects, paths, scorers)
    log["held_to"] = _held_to(table, log["checkpoints"].index(best), z=z, n_repeats=n_repeats,
                              checkpoints=log["checkpoints"])
    log["pair_ratio"] = _pair_ratio(len(pairs), [scorer for scorer in scorers if scorer.usable])
    # the safety net stays a cap on the final fit's length too
    return min(best * log["length_scale"], float(checkpoints[-1])), log


def _held_to(table, chosen, *, z, n_repeats, checkpoints):
    """Return the longest checkpoint reached up to which the held-out curve held the choice.

    Walking past the chosen row, each checkpoint whose held-out scores are
    not significantly below the choice's (paired, ``z`` standard errors;
    with k-NN margins, nor its 1-NN accuracy) extends the reach; the first
    that is stops it. The choice itself where none past it was reached.
    """
    held = chosen
    for row in range(chosen + 1, len(table)):
        if gain_is_real(table[chosen], table[row], z, n_repeats):
            break
        if not isinstance(table[row][0], tuple) and gain_is_real(
                _right(table[chosen]), _right(table[row]), z, n_repeats):
            break
        held = row
    return float(checkpoints[held])


def _pair_ratio(n_pairs, usable):
    """Return the final fit's pairs over a usable fold's training pairs (mean over folds)."""
    if not usable:
        return 1.0
    return float(n_pairs / np.mean([len(scorer.train_pairs) for scorer in usable]))


def _length_scale(n_objects, paths, scorers):
    """Return the factor from a fold's validated length to the final fit's.

    ``n / n_f`` where the folds drew as many random pairs as the final fit
    again among their ``n_f`` training points, so that the final fit makes
    the same updates per point as the validated fold; 1 for given or
    neighbourhood pairs (a fold keeps those among its points). The result is
    capped by the safety net. (Where a fold's draw runs out of distinct
    pairs, its pairs are less than ``n / n_f`` times denser; ``n / n_f`` is
    used there too, as scaling by the actual density validates no better
    length.) Without the scaling the final fit, whose random pairs are
    spread over ``n`` points, would make fewer updates per point than the
    fold whose length was validated, and stop short (figures: the
    benchmarks page).
    """
    drawn = [scorer for scorer in scorers if scorer.usable and scorer.drawn]
    if not drawn or len(drawn) != len(paths):
        return 1.0
    return float(n_objects / np.mean([scorer.n_train_points for scorer in drawn]))
