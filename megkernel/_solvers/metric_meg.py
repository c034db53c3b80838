"""MEG for metric learning on features: one-sided square loss, in the
whitened coordinates of the training points.

Pure solver functions: arrays in, arrays out. :class:`megkernel.MEGMetric`
wraps them. The derivation of the one-sided loss bound is in
the README, "The one-sided loss and its bound".

Coordinates
-----------
The centred training features ``X = U S V^T`` (rank ``r``) give whitened
coordinates ``z(x) = S^-1 V^T (x - mean)``; the rows of ``U`` are those of the
training points. A metric is ``d^2(x, x') = tau (z - z')^T M (z - z')`` with
``M`` an ``r x r`` density matrix and ``tau = ||X||_F^2``. The prior
``M_1 = S^2 / tau`` is the Euclidean metric. A pair of points is the instance
``u u^T`` with ``u = z - z'``; its prediction is ``u^T M u`` and its
eigenvalue range is ``||u||^2`` (trace-one units: targets are divided by
``tau``).

Loss
----
``sides`` says which errors count: ``+1`` only ``yhat > y`` (a similar pair
farther than its target), ``-1`` only ``yhat < y`` (a dissimilar pair nearer
than its target), ``0`` both (the square loss). A trial whose error does not
count makes no update; otherwise it is the square-loss MEG update with the
same target, so Lemma 3.1's relative loss bound holds for the one-sided
losses of algorithm and comparator alike.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from .._numerics.spectral import log_trace_exp, normalized_exp_weights

__all__ = [
    "MetricExponent",
    "one_sided_residuals",
    "run_batches",
    "validate_epochs",
    "mean_range_learning_rate",
    "CHECKPOINTS",
    "HeldOutScorer",
    "choose_checkpoint",
    "validation_folds",
    "online_trials",
    "online_bound",
    "normalised_loss",
    "divergence_to",
    "pair_components",
    "whiten",
]


def whiten(centred, *, rtol=1e-10):
    """Whitened coordinates of centred training points.

    Returns
    -------
    coordinates : ndarray of shape (n_samples, rank)
        ``U``: rows are the training points' ``z``.
    scales : ndarray of shape (rank,)
        Singular values ``S``.
    directions : ndarray of shape (rank, n_features)
        ``V^T``.
    trace : float
        ``tau = ||X||_F^2 = sum(S^2)``.
    """
    U, s, Vt = np.linalg.svd(centred, full_matrices=False)
    keep = s > s[0] * rtol
    s = s[keep]
    return U[:, keep], s, Vt[keep], float(np.sum(s * s))


class MetricExponent:
    """The exponent ``A = log M`` of an ``r x r`` density matrix, kept with
    its eigendecomposition (eq. 7's stable form: ``M = V diag(exp lam) V^T / Z``).
    """

    FIELDS = ("exponent", "eigvals", "eigvecs")

    def __init__(self, exponent, eigvals, eigvecs):
        self.exponent, self.eigvals, self.eigvecs = exponent, eigvals, eigvecs

    @classmethod
    def from_prior(cls, prior_eigvals):
        """``A = diag(log prior)`` for the diagonal prior ``S^2 / tau``."""
        log_prior = np.log(np.asarray(prior_eigvals, dtype=float))
        return cls(np.diag(log_prior), log_prior.copy(), np.eye(len(log_prior)))

    def copy(self):
        return MetricExponent(*(getattr(self, name).copy() for name in self.FIELDS))

    @property
    def weights(self):
        """Eigenvalues of ``M`` (sum one), in the order of ``eigvecs``."""
        return normalized_exp_weights(self.eigvals)

    def density(self):
        """``M`` itself."""
        return (self.eigvecs * self.weights) @ self.eigvecs.T

    def log_density(self):
        """``log M = A - log tr exp(A) I``, exact however small ``M``'s eigenvalues."""
        return (self.eigvecs * (self.eigvals - log_trace_exp(self.eigvals))) @ self.eigvecs.T

    def divergence_from(self, start_log):
        """Von Neumann divergence ``Delta(M, M_start)`` (eq. 1) from ``log M_start``."""
        log_own = self.log_density()
        return float(max(np.sum(self.density() * (log_own - start_log)), 0.0))

    def predict(self, diffs):
        """``u^T M u`` for each row ``u`` of ``diffs``."""
        projected = diffs @ self.eigvecs
        return (projected * projected) @ self.weights

    def add(self, diffs, coefficients):
        """``A <- A - sum_t c_t u_t u_t^T``, then re-diagonalise."""
        exponent = self.exponent - (diffs.T * coefficients) @ diffs
        exponent = 0.5 * (exponent + exponent.T)
        magnitude = np.abs(exponent).max()
        if not np.isfinite(magnitude):  # LAPACK never sees a non-finite matrix
            raise ValueError("The metric's exponent overflowed: the learning rate or "
                             "the targets are too large for double precision.")
        if magnitude == 0:  # A = 0: M = I / rank
            eigvals, eigvecs = np.zeros(len(exponent)), np.eye(len(exponent))
        else:
            # numpy's eigh (LAPACK syevd) on the scaled matrix: for the small
            # rank x rank exponents here, far less call overhead than scipy's
            eigvals, eigvecs = np.linalg.eigh(exponent / magnitude)
            eigvals = eigvals * magnitude
        self.exponent, self.eigvals, self.eigvecs = exponent, eigvals, eigvecs


def one_sided_residuals(predictions, targets, sides):
    """``yhat - y`` where the error counts for its side, else 0."""
    residuals = predictions - targets
    return np.where(sides * residuals >= 0, residuals, 0.0)


def run_batches(exponent, diffs, targets, sides, *, learning_rate, n_seen, n_more,
                batch_size, rng, order=None):
    """Mini-batch MEG over the pairs in epochs of random order, in place.

    Each batch predicts with the current ``M``, then makes the MEG update on
    the batch's summed loss, ``A <- A - 2 eta sum_t (yhat_t - y_t) u_t u_t^T``
    (one eigendecomposition per batch; ``batch_size=1`` is on-line MEG).
    Trials ``n_seen .. n_seen + n_more - 1`` of the endless sequence of
    epochs are run; ``order`` carries the current epoch's permutation
    between calls (drawn from ``rng`` at each epoch's start).

    Parameters
    ----------
    exponent : MetricExponent
    diffs : ndarray of shape (n_pairs, rank)
    targets, sides : ndarray of shape (n_pairs,)
        Targets in trace-one units; sides as :func:`one_sided_residuals`.
    learning_rate : float
    n_seen, n_more : int
    batch_size : int
    rng : numpy.random.Generator or None
        Draws each epoch's order; ``None``: the pairs' own order.
    order : ndarray or None

    Returns
    -------
    loss : float
        Summed loss of the predictions made before each update.
    order : ndarray
        The current epoch's permutation.
    """
    n_pairs = len(diffs)
    total, position, stop = 0.0, n_seen, n_seen + n_more
    while position < stop:
        within = position % n_pairs
        if within == 0 or order is None:
            order = np.arange(n_pairs) if rng is None else rng.permutation(n_pairs)
        end = min(within + batch_size, n_pairs, within + stop - position)
        batch = order[within:end]
        residuals = one_sided_residuals(exponent.predict(diffs[batch]), targets[batch],
                                        sides[batch])
        if residuals.any():
            total += float(residuals @ residuals)
            exponent.add(diffs[batch], 2.0 * learning_rate * residuals)
        position += len(batch)
    return total, order


def online_trials(exponent, diffs, targets, sides, ranges):
    """On-line MEG, one pair per update, at the bound's rate ``1 / rho_t^2``.

    ``ranges[t]`` is ``rho_t``, the largest instance range seen up to trial
    ``t`` (non-decreasing). With ``eta_t = 1 / rho_t^2`` (Lemma 3.1 with
    ``c = 2``) the one-sided losses obey :func:`online_bound`.

    Returns
    -------
    losses : ndarray of shape (n_pairs,)
        One-sided loss of each trial's prediction (before its update).
    """
    losses = np.empty(len(diffs))
    for t in range(len(diffs)):
        u = diffs[t:t + 1]
        residual = one_sided_residuals(exponent.predict(u), targets[t:t + 1],
                                       sides[t:t + 1])
        losses[t] = residual[0] ** 2
        if residual[0] != 0 and ranges[t] > 0:  # range 0: u = 0, nothing to learn
            exponent.add(u, 2.0 * (residual / ranges[t]) / ranges[t])
    return losses


def online_bound(comparator_losses, ranges, divergence):
    """Right-hand side of the normalised relative loss bound (c = 2).

    ``sum_t loss_t / rho_t^2 <= 2 sum_t loss_U,t / rho_t^2 + Delta(U, M_1)``
    for any comparator density ``U``, where ``loss_U,t`` is ``U``'s one-sided
    loss on trial ``t`` (see the README, "The one-sided loss and its bound").
    """
    return 2.0 * normalised_loss(comparator_losses, ranges) + float(divergence)


def divergence_to(comparator, start_log):
    """Von Neumann divergence ``Delta(U, M_start)`` of a trace-one ``U`` (eq. 1),
    from ``log M_start`` (``0 log 0 = 0``)."""
    mu = np.linalg.eigvalsh(comparator)
    mu = mu[mu > 0]
    return float(max(np.sum(mu * np.log(mu)) - np.sum(comparator * start_log), 0.0))


def normalised_loss(losses, ranges):
    """Left-hand side of :func:`online_bound`: ``sum_t loss_t / rho_t^2``.

    Trials before any pair of distinct points (``rho_t = 0``) are left out on
    both sides: there every metric predicts 0, so ``loss_t = loss_U,t``.
    """
    ranges = np.asarray(ranges, dtype=float)
    moving = ranges > 0
    return float(np.sum((np.sqrt(losses[moving]) / ranges[moving]) ** 2))


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


#: Training lengths tried by :func:`validate_epochs`, in epochs over the pairs.
CHECKPOINTS = (0.0, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)

#: Queries per fold of the k-NN validation score (a random subset beyond).
_MAX_QUERIES = 400


def mean_range_learning_rate(diffs):
    """Lemma 3.2's rate ``2 / rho^2`` at the mean instance range ``rho``.

    ``rho = mean ||u||^2`` over the pairs: the typical trial's range (the
    largest, the worst case of the bound, is set by a few outlying pairs and
    would slow every other trial by ``(max / mean)^2``).
    """
    ranges = np.einsum("ij,ij->i", diffs, diffs)
    rho = ranges.mean()
    if not rho > 0:
        raise ValueError("Every pair joins two points with the same features: "
                         "no pair can move the metric.")
    return 2.0 / rho**2


def _embedding(coordinates, exponent):
    return coordinates @ (exponent.eigvecs * np.sqrt(exponent.weights))


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
    points under the fold's metric and returns the per-item scores of
    :func:`validate_epochs` (k-NN margins, or AUC placements).
    """

    def __init__(self, held_out, pairs, signs, labels, rng):
        self.train = ~held_out[pairs[:, 0]] & ~held_out[pairs[:, 1]]
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
        self.usable = usable and bool(self.train.any())

    def score(self, embedded):
        if self.labels is not None:
            return _knn_score(embedded, self.labels, self.queries, self.references)
        differences = embedded[self.val_pairs[:, 0]] - embedded[self.val_pairs[:, 1]]
        sq_distances = np.einsum("ij,ij->i", differences, differences)
        return _placements(-sq_distances, self.val_signs)


class _Fold:
    """One fold of :func:`validate_epochs`: its training pairs, state and scorer."""

    def __init__(self, held_out, coordinates, pairs, targets, sides, signs, labels,
                 prior, rng):
        self.scorer = HeldOutScorer(held_out, pairs, signs, labels, rng)
        train = self.scorer.train
        self.diffs = coordinates[pairs[train, 0]] - coordinates[pairs[train, 1]]
        self.targets, self.sides = targets[train], sides[train]
        self.exponent = MetricExponent.from_prior(prior)
        self.rng, self.order, self.n_seen = rng, None, 0
        self.coordinates = coordinates
        self.usable = self.scorer.usable

    def advance(self, epochs, learning_rate, batch_size):
        stop = int(round(epochs * len(self.diffs)))
        _, self.order = run_batches(
            self.exponent, self.diffs, self.targets, self.sides,
            learning_rate=learning_rate, n_seen=self.n_seen, n_more=stop - self.n_seen,
            batch_size=batch_size, rng=self.rng, order=self.order)
        self.n_seen = stop

    def score(self):
        """Per-item scores: k-NN margins of the queries, or AUC placements."""
        return self.scorer.score(_embedding(self.coordinates, self.exponent))


def _fold_mean(item):
    return float(item[0].mean() if isinstance(item, tuple) else item.mean())


#: Held-out items (points or pairs) the validation should see: small data
#: sets repeat the folds (at most ``_MAX_REPEATS`` times) to reach it.
_MIN_ITEMS, _MAX_REPEATS = 600, 10


def validation_folds(n_objects, pairs, labels, *, n_folds, rng, min_items=_MIN_ITEMS):
    """Held-out masks of the points: ``n_folds`` folds, repeated with new
    random splits until about ``min_items`` held-out items are scored.

    Returns
    -------
    masks : list of ndarray of bool
    n_repeats : int
    """
    items = int(np.sum(labels >= 0)) if labels is not None else len(pairs)
    n_repeats = int(np.clip(np.ceil(min_items / max(items, 1)), 1, _MAX_REPEATS))
    masks = []
    for _ in range(n_repeats):
        assignment = rng.permutation(n_objects) % n_folds
        masks += [assignment == k for k in range(n_folds)]
    return masks, n_repeats


def _gain_is_real(items, prior_items, z, n_repeats=1):
    """Whether the mean gain over the prior exceeds ``z`` standard errors.

    k-NN margins: paired over the held-out points. AUC: DeLong's variance of
    each fold's paired AUC difference, ``var(D10)/n_pos + var(D01)/n_neg``.
    Repeated folds score the same points again: the standard error is taken
    as that of one repeat (``sqrt(n_repeats)`` times the naive one).
    """
    gains, variances = [], []
    for item, prior in zip(items, prior_items):
        parts = item if isinstance(item, tuple) else (item,)
        prior_parts = prior if isinstance(prior, tuple) else (prior,)
        differences = [a - b for a, b in zip(parts, prior_parts)]
        if min(len(d) for d in differences) < 2:
            return False
        gains.append(differences[0].mean())
        variances.append(sum(d.var(ddof=1) / len(d) for d in differences))
    spread = np.sqrt(np.sum(variances) * n_repeats) / len(gains)
    return bool(np.mean(gains) > z * spread)


def validate_epochs(coordinates, pairs, targets, sides, signs, prior, *, learning_rate,
                    batch_size, rng, n_folds=2, checkpoints=CHECKPOINTS, patience=2,
                    z=2.0, min_items=_MIN_ITEMS):
    """How long to train: cross-validated over the training points.

    The points are split into ``n_folds`` folds; each fold's model learns
    from the pairs among the other points only, as the final model learns
    from pairs among the training points and meets new points. Its score
    after each checkpoint (in epochs over its pairs):

    * ``"knn"`` -- mean relative 1-NN margin of the held-out points against
      the others, with the similar pairs' connected components as classes
      (:func:`pair_components`), when those can stand in for classes;
    * ``"auc"`` -- otherwise the ROC AUC of the held-out pairs (those with a
      held-out end) by their learned distance.

    The folds advance together; the mean score decides among the learned
    checkpoints. Checkpoint 0 is the prior (the Euclidean metric), and
    learning has to earn its place: the best learned checkpoint is taken
    only if its paired gain over the prior (per held-out point, or per
    held-out pair's AUC placement) exceeds ``z`` standard errors. The run
    stops after ``patience`` checkpoints without a better mean score.

    Without a usable fold (no held-out point with a labelled reference, or
    no held-out pair of each kind) one epoch is run, as the paper's pass.

    Returns
    -------
    epochs : float
        The chosen checkpoint.
    log : dict
        ``"score"`` ("knn" or "auc"), ``"checkpoints"`` and ``"scores"``
        (mean over folds, one per checkpoint reached), ``"gain_is_real"``.
    """
    n_objects = len(coordinates)
    labels = pair_components(n_objects, pairs, signs)
    masks, n_repeats = validation_folds(n_objects, pairs, labels, n_folds=n_folds, rng=rng,
                                        min_items=min_items)
    folds = [_Fold(mask, coordinates, pairs, targets, sides, signs, labels, prior, rng)
             for mask in masks]
    folds = [fold for fold in folds if fold.usable]
    log = {"score": "knn" if labels is not None else "auc", "checkpoints": [],
           "scores": [], "gain_is_real": False, "n_repeats": n_repeats}
    if not folds:  # nothing to validate on: one pass, the paper's on-line run
        return 1.0, log
    table, best_score, since = [], -np.inf, 0
    for epochs in checkpoints:
        for fold in folds:
            fold.advance(epochs, learning_rate, batch_size)
        table.append([fold.score() for fold in folds])
        log["checkpoints"].append(epochs)
        score = float(np.mean([_fold_mean(item) for item in table[-1]]))
        if len(table) == 1:  # the prior does not count for patience
            continue
        if score > best_score:
            best_score, since = score, 0
        else:
            since += 1
            if since >= patience:
                break
    best, log["scores"], log["gain_is_real"] = choose_checkpoint(
        log["checkpoints"], table, z=z, n_repeats=n_repeats)
    return best, log


def choose_checkpoint(checkpoints, items, *, z=2.0, n_repeats=1):
    """The best checkpoint of a completed validation table.

    ``items[c][k]``: fold ``k``'s per-item scores at ``checkpoints[c]``;
    ``checkpoints[0]`` is the prior. As :func:`validate_epochs`: the best
    mean score among the others, kept only if its paired gain over the prior
    exceeds ``z`` standard errors; else the prior.

    Returns
    -------
    best : the chosen checkpoint
    scores : list of float (mean over folds, per checkpoint)
    gain_is_real : bool
    """
    scores = [float(np.mean([_fold_mean(item) for item in row])) for row in items]
    if len(checkpoints) < 2:
        return checkpoints[0], scores, False
    best = 1 + int(np.argmax(scores[1:]))
    if not _gain_is_real(items[best], items[0], z, n_repeats):
        return checkpoints[0], scores, False
    return checkpoints[best], scores, True
