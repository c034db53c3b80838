"""MEG on the stochastic-neighbour objective: a metric from class labels.

Pure solver functions for :class:`megkernel.MEGMetric`'s
``from_labels="soft-neighbors"``. In the whitened coordinates ``z`` of
:mod:`megkernel._solvers.metric_meg` (a density matrix ``M``, squared
distances ``u^T M u`` in trace-one units, ``u = z_i - z_k``), each point
picks a neighbour at random with probability

    p_ik = exp(-u_ik^T M u_ik / T) / sum_{l != i} exp(-u_il^T M u_il / T),

and the objective is the mean probability that the pick is of the point's own
class, ``f(M) = (1/n) sum_i sum_{j in C_i} p_ij`` -- the expected
leave-one-out accuracy of a soft 1-NN, the objective of NCA (Goldberger et
al., 2005). NCA ascends it over an unconstrained linear map; here ``M`` stays
a density matrix and each step is MEG's (eqs. 2-4 with the objective's
gradient in place of the square loss's): ``A <- A + eta G / ||G||``,
``M = exp(A) / tr exp(A)``, with

    G = df/dM = (1/(T n)) sum_{i,k} (p_i p_ik - [y_k = y_i] p_ik) u_ik u_ik^T
               = (1/(T n)) Z^T L Z,

``L`` the Laplacian of those weights (``O(n^2 r)``, never an ``n^2 x r x r``
array). A step is taken only if it raises ``f`` (the step halves until it
does, and grows by half after each success): the ascent is monotone. The
trace fixes the mean squared distance, so the temperature ``T`` is fixed
too: the mean squared distance from each training point to its nearest
neighbour under the Euclidean prior (a soft 1-NN at the data's own scale).
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from .metric_meg import MetricExponent, embedding

__all__ = ["MAX_POINTS", "TEMPERATURES", "SoftNeighborAscent", "pair_masks",
           "prior_temperature", "soft_neighbor_probabilities"]

#: Training points up to which the objective is used (its ``n x n``
#: probabilities take ``8 n^2`` bytes each; 4000 points: 128 MB per array).
MAX_POINTS = 4000

#: Temperatures validated, in units of :func:`prior_temperature` (the mean
#: squared distance to the nearest neighbour under the Euclidean prior).
#: A broad soft neighbourhood (1) sees classes that are globally separated;
#: a sharper one (1/2) classes that are local, such as interleaved moons.
#: Sharper ones still are left out: the folds, of fewer points, cannot tell
#: them apart reliably, and the choice then costs held-out accuracy (see the
#: benchmarks page).
TEMPERATURES = (1.0, 0.5)

#: Given pairs' objective is computed over the pairs alone
#: (:class:`_PartnerEdges`, ``O(E r^2)`` per evaluation for ``E`` directed
#: edges in ``r`` coordinates) where ``E r`` is at most this many times
#: ``n^2``, else over the ``n x n`` arrays (``O(n^2 r)``): the two cost the
#: same near ``E r = 2 n^2`` (measured from 8 to 100 coordinates and 300 to
#: 1000 points).
_EDGES_BELOW = 2.0

#: Halvings of the step before an iteration gives up (no ascent direction
#: left at the scale of double precision: converged).
_MAX_HALVINGS = 40


def _sq_distances(embedded):
    sq_norms = np.einsum("ij,ij->i", embedded, embedded)
    return np.maximum(sq_norms[:, None] + sq_norms[None, :] - 2.0 * embedded @ embedded.T,
                      0.0)


def _shifted_logits(embedded, temperature):
    """Return ``-||e_i - e_k||^2 / T`` up to a constant per row (the softmax's own).

    ``(2 e_i.e_k - ||e_k||^2) / T``: the row's ``-||e_i||^2 / T`` is left
    out, as the softmax over a row does not see it (one matrix product and
    one pass over the ``n x n`` logits, instead of the squared distances'
    five). ``None`` where the logits could overflow (a temperature far
    below the squared distances).
    """
    sq_norms = np.einsum("ij,ij->i", embedded, embedded)
    if not 3.0 * float(sq_norms.max(initial=0.0)) / temperature < 1e300:
        return None
    logits = embedded @ embedded.T
    logits *= 2.0 / temperature
    logits -= sq_norms / temperature
    return logits


def soft_neighbor_probabilities(embedded, codes, temperature, *, same=None, blocked=None):
    """Stochastic-neighbour probabilities of the rows of ``embedded``.

    ``same``: the ``same`` of an earlier call on the same ``codes`` (not
    computed again; boolean or 0/1), or of given pairs (:func:`pair_masks`).
    ``blocked``: ``-inf`` where a point may not pick the other, else 0
    (given pairs: the points it is not paired with; every row needs one it
    may pick).

    Returns
    -------
    P : ndarray of shape (n, n)
        ``p_ik`` (zero diagonal, rows sum to one).
    p : ndarray of shape (n,)
        Each point's probability of picking its own class.
    same : ndarray of bool, shape (n, n)
    """
    logits = _shifted_logits(embedded, temperature)
    if logits is None:  # the squared distances themselves, a far pair's -inf clipped
        logits = _sq_distances(embedded)
        with np.errstate(over="ignore"):
            np.divide(logits, -temperature, out=logits)
            np.maximum(logits, -1e300, out=logits)
    logits.flat[::len(logits) + 1] = -np.inf
    if blocked is not None:
        logits += blocked  # 0, or -inf where blocked
    logits -= logits.max(axis=1, keepdims=True)
    P = np.exp(logits, out=logits)
    P /= P.sum(axis=1, keepdims=True)
    if same is None:
        same = codes[:, None] == codes[None, :]
    return P, np.einsum("ij,ij->i", P, same), same


def pair_masks(n_points, pairs, signs):
    """Return the masks of the soft-neighbour objective of given pairs.

    Each point picks among the points it is paired with (``blocked``: the
    others), and its pick is right when the pair is similar (``same``): the
    objective of :class:`SoftNeighborAscent` restricted to the given pairs,
    each point's similar partners nearer than its dissimilar ones. A pair
    given twice with both labels counts as similar.

    Parameters
    ----------
    n_points : int
        Points the ``pairs`` index (each in at least one pair).
    pairs : ndarray of int, shape (n_pairs, 2)
    signs : ndarray of shape (n_pairs,)
        ``+1`` similar, ``-1`` dissimilar.

    Returns
    -------
    blocked : ndarray of shape (n_points, n_points)
        ``-inf`` where a point may not pick the other, else 0.
    same : ndarray of shape (n_points, n_points)
        1 where the pair is similar, else 0.
    """
    a, b = pairs[:, 0], pairs[:, 1]
    blocked = np.full((n_points, n_points), -np.inf)
    blocked[a, b] = blocked[b, a] = 0.0
    same = np.zeros((n_points, n_points))
    similar = signs > 0
    same[a[similar], b[similar]] = same[b[similar], a[similar]] = 1.0
    return blocked, same


def prior_temperature(coordinates, prior, blocked=None):
    """Mean squared distance of each point to its nearest neighbour under ``prior``.

    In trace-one units; the median positive squared distance if every point
    has a duplicate (nearest distance 0). ``blocked`` (given pairs): the
    nearest of the points it may pick, its partners.
    """
    sq = _sq_distances(coordinates * np.sqrt(prior))
    np.fill_diagonal(sq, np.inf)
    if blocked is not None:
        sq -= blocked  # +inf where blocked
    temperature = float(np.mean(sq.min(axis=1)))
    if temperature > 0:
        return temperature
    positive = sq[np.isfinite(sq) & (sq > 0)]
    return float(np.median(positive)) if positive.size else 1.0


class _PartnerEdges:
    """The soft-neighbour objective of given pairs over their pairs alone.

    Each point's partners (the entries :func:`pair_masks` leaves unblocked),
    as directed edges ``i -> j`` grouped by ``i``: the probabilities, the
    objective and its gradient of :class:`SoftNeighborAscent` with ``masks``,
    computed over the edges (``O(pairs x r)``) instead of the ``n x n``
    arrays of every point against every other. Made from the pairs
    themselves: nothing of size ``n x n`` is built.
    """

    def __init__(self, coordinates, pairs, signs):
        # pairs: local rows of ``coordinates``, no pair of a point with itself
        n = len(coordinates)
        a, b = pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)
        similar = np.asarray(signs) > 0
        # both directions, each directed edge once, in row-major order (grouped by row)
        keys, inverse = np.unique(np.r_[a * n + b, b * n + a], return_inverse=True)
        self.rows, self.cols = np.divmod(keys, n)
        self.right = np.zeros(len(keys))  # a pair given with both labels counts as similar
        self.right[inverse.reshape(-1)[np.r_[similar, similar]]] = 1.0
        self.starts = np.flatnonzero(np.r_[True, self.rows[1:] != self.rows[:-1]])
        self._coordinates = coordinates

    @cached_property
    def differences(self):
        """The edges' instances ``u_ij = z_i - z_j``, the same at every step (made once)."""
        return self._coordinates[self.rows] - self._coordinates[self.cols]

    def prior_temperature(self, coordinates, prior):
        """:func:`prior_temperature` among partners, over the edges."""
        scaled = coordinates * np.sqrt(prior)
        sq_norms = np.einsum("ij,ij->i", scaled, scaled)
        sq = np.maximum(sq_norms[self.rows] + sq_norms[self.cols]
                        - 2.0 * np.einsum("ij,ij->i", scaled[self.rows], scaled[self.cols]),
                        0.0)
        temperature = float(np.mean(np.minimum.reduceat(sq, self.starts)))
        if temperature > 0:
            return temperature
        positive = sq[sq > 0]
        return float(np.median(positive)) if positive.size else 1.0

    def probabilities(self, exponent, temperature):
        """Return each edge's ``p_ij`` and each point's probability of a similar pick."""
        projected = embedding(self.differences, exponent)  # rows u_ij^T M^{1/2}
        logits = np.einsum("ij,ij->i", projected, projected)
        if float(logits.max(initial=0.0)) / temperature < 1e300:
            logits /= -temperature
        else:  # beyond a double's range: a far pair's -inf clipped (no row all -inf)
            with np.errstate(over="ignore"):
                np.divide(logits, -temperature, out=logits)
                np.maximum(logits, -1e300, out=logits)
        logits -= np.maximum.reduceat(logits, self.starts)[self.rows]
        P = np.exp(logits, out=logits)
        P /= np.add.reduceat(P, self.starts)[self.rows]
        return P, np.add.reduceat(P * self.right, self.starts)

    def gradient(self, P, p, temperature):
        """``df/dM``: ``sum_ij W_ij u_ij u_ij^T / (T n)``, ``W_ij = p_ij (p_i - [similar])``.

        The Laplacian form of :meth:`SoftNeighborAscent.gradient` over the
        edges: ``Z^T L Z`` of the symmetrised weights ``W + W^T`` is ``sum_ij
        W_ij (z_i - z_j)(z_i - z_j)^T``.
        """
        weights = P * (p[self.rows] - self.right)
        return (self.differences.T @ (weights[:, None] * self.differences)
                / (temperature * len(p)))


class SoftNeighborAscent:
    """Monotone MEG ascent of the stochastic-neighbour objective, resumable.

    Parameters
    ----------
    coordinates : ndarray of shape (n, r)
        Whitened coordinates of the points it learns from.
    codes : ndarray of int, shape (n,)
        Their classes.
    prior : ndarray of shape (r,)
        Eigenvalues of the diagonal start ``M_1`` (the Euclidean metric).
    temperature : float
        ``T``, trace-one units.
    masks : tuple of ndarray or None, default=None
        Given pairs instead of classes: ``(blocked, same)`` of
        :func:`pair_masks` (``codes`` is then not read).
    edges : _PartnerEdges or None, default=None
        Given pairs instead of classes, over their edges alone (``codes``
        is then not read): see :meth:`of_pairs`, which chooses.
    """

    def __init__(self, coordinates, codes, prior, temperature, *, masks=None, edges=None):
        self.coordinates, self.codes = coordinates, np.asarray(codes)
        self.temperature = float(temperature)
        self.exponent = MetricExponent.from_prior(prior)
        self.step, self.n_iter, self.converged = 1.0, 0, False
        self._blocked, self._same = masks if masks is not None else (None, None)
        self._edges = edges
        if self._same is None and edges is None:  # 0/1: a product, not a masked reduction
            self._same = (self.codes[:, None] == self.codes[None, :]).astype(float)
        self.objective, self._state = self._evaluate(self.exponent)
        self.objectives = [self.objective]

    @classmethod
    def of_pairs(cls, coordinates, pairs, signs, prior, temperature):
        """Start the ascent of the soft-neighbour objective of given pairs (:func:`pair_masks`).

        Over the points in ``pairs`` (rows of ``coordinates``), at
        ``temperature`` times their :func:`prior_temperature` among
        partners. A pair of a point with itself is no pick and is left out;
        without any other pair the ascent stays at the prior (converged).
        """
        other = pairs[:, 0] != pairs[:, 1]
        pairs, signs = pairs[other], np.asarray(signs)[other]
        if not len(pairs):
            return cls._at_prior(coordinates, prior, temperature)
        points, local = np.unique(pairs, return_inverse=True)
        local, own, codes = local.reshape(-1, 2), coordinates[points], np.zeros(len(points), int)
        edges = _PartnerEdges(own, local, signs)  # O(pairs): which path, before any n x n
        if len(edges.rows) * own.shape[1] <= _EDGES_BELOW * len(points) ** 2:
            # given pairs among many points: over the pairs alone (O(E r^2), not O(n^2 r))
            return cls(own, codes, prior, temperature * edges.prior_temperature(own, prior),
                       edges=edges)
        masks = pair_masks(len(points), local, signs)
        return cls(own, codes, prior, temperature * prior_temperature(own, prior, masks[0]),
                   masks=masks)

    @classmethod
    def of_classes(cls, coordinates, codes, prior, temperature):
        """Start the ascent over the points of a class (``codes >= 0``; -1: of none).

        At ``temperature`` times their :func:`prior_temperature`; with fewer
        than two classes among them the ascent stays at the prior
        (converged): no pick can be wrong.
        """
        codes = np.asarray(codes)
        own = codes >= 0
        if np.unique(codes[own]).size < 2:
            return cls._at_prior(coordinates, prior, temperature)
        points = coordinates[own]
        return cls(points, codes[own], prior,
                   temperature * prior_temperature(points, prior))

    @classmethod
    def _at_prior(cls, coordinates, prior, temperature):
        """Return an ascent with nothing to learn from: the prior, converged."""
        ascent = cls.__new__(cls)
        ascent.coordinates, ascent.codes = coordinates[:0], np.zeros(0, dtype=int)
        ascent.temperature, ascent.exponent = float(temperature), \
            MetricExponent.from_prior(prior)
        ascent.step, ascent.n_iter, ascent.converged = 1.0, 0, True
        ascent.objective, ascent.objectives = 0.0, [0.0]
        return ascent

    def _evaluate(self, exponent):
        if self._edges is not None:
            P, p = self._edges.probabilities(exponent, self.temperature)
            return float(p.mean()), (P, p, None)
        P, p, same = soft_neighbor_probabilities(embedding(self.coordinates, exponent),
                                                 self.codes, self.temperature,
                                                 same=self._same, blocked=self._blocked)
        return float(p.mean()), (P, p, same)

    def gradient(self):
        """``df/dM`` at the current metric (symmetric, ``r x r``).

        ``Z^T L Z / (T n)`` with ``L`` the Laplacian of the symmetrised
        weights ``W + W^T``, ``W = P (p - [same class])`` (one ``n x n x r``
        product).
        """
        P, p, same = self._state
        if self._edges is not None:
            return self._edges.gradient(P, p, self.temperature)
        weights = p[:, None] - same
        weights *= P
        weights += weights.T.copy()
        laplacian_z = (weights.sum(axis=1)[:, None] * self.coordinates
                       - weights @ self.coordinates)
        n = len(self.coordinates)
        return self.coordinates.T @ laplacian_z / (self.temperature * n)

    def advance(self, n_more):
        """Take up to ``n_more`` ascent steps (fewer once converged)."""
        for _ in range(int(n_more)):
            if self.converged:
                return self
            gradient = self.gradient()
            gradient = 0.5 * (gradient + gradient.T)
            if not np.all(np.isfinite(gradient)):  # LAPACK never sees a non-finite matrix
                self.converged = True
                return self
            scale = np.abs(np.linalg.eigvalsh(gradient)).max()
            if scale == 0:
                self.converged = True
                return self
            direction = gradient / scale
            for _ in range(_MAX_HALVINGS):
                trial = MetricExponent(None, None, None)  # assign sets all three
                try:
                    trial.assign(self.exponent.exponent + self.step * direction)
                except ValueError:  # the step overflowed the exponent: shorter
                    self.step *= 0.5
                    continue
                objective, state = self._evaluate(trial)
                if objective > self.objective:
                    self.exponent, self.objective, self._state = trial, objective, state
                    self.step *= 1.5
                    break
                self.step *= 0.5
            else:
                self.converged = True
                return self
            self.n_iter += 1
            self.objectives.append(self.objective)
        return self
