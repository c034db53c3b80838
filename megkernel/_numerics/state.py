"""The state both algorithms evolve: the exponent of a density matrix.

Both MEG (eq. 7) and DefiniteBoost (eq. 12) keep ``W = exp(A) / tr exp(A)``
through the *exponent* ``A`` and its eigendecomposition ``A = V diag(lam) V^T``.
Distance pairs enter only through rank-one changes ``A <- A + s v v^T`` with
``v = e_a - e_b`` (dense mode) or ``v = P[a] - P[b]`` for a rank-``r`` basis
``P`` (low-rank mode; ``A`` is then ``r x r``).

The exponent itself is kept exactly (a rank-one change touches four entries in
dense mode), so an engine that updates the eigendecomposition incrementally
can re-anchor on ``eigh(A)`` at any time without accumulating drift.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .spectral import (
    check_positive_definite,
    eigh_symmetric,
    factor_pair_sq_distances,
    log_trace_exp,
    normalized_exp_weights,
)
from .validation import check_n_objects, check_real

__all__ = ["ExponentState", "PartitionAnchor", "SubspaceState", "prior_state"]

#: Pairs gathered at a time by :meth:`ExponentState.pair_sq_norms`.
_GATHER_CHUNK = 100_000

#: Coordinates (pairs x eigenvectors) gathered at a time by
#: :meth:`ExponentState.pair_sq_distances` (16 MB of doubles).
_GATHER_ENTRIES = 2_000_000


class PartitionAnchor(NamedTuple):
    """``log tr exp(A)`` carried across calls by an engine.

    Kept by an engine that does not keep eigenpairs per trial (Lanczos);
    valid while ``stamp`` matches the state.
    """

    log_partition: float
    updates_since_anchor: int
    stamp: tuple


class ExponentState:
    """Exponent ``A`` of ``W = exp(A)/tr exp(A)`` with its eigendecomposition.

    Parameters
    ----------
    exponent : ndarray of shape (r, r)
        Symmetric exponent ``A``; ``W`` does not depend on adding ``c I``.
    basis : ndarray of shape (d, r) or None
        Orthonormal basis ``P`` of the range (low-rank mode) or ``None``
        for the identity (dense mode, ``r = d``).
    """

    #: The fields of a state; :meth:`copy` and :meth:`assign` go through them.
    FIELDS = ("exponent", "basis", "eigenvalues", "eigenvectors",
              "updates_since_refresh", "partition_anchor", "engine_memo", "cost_said",
              "cost_checked")

    #: The engine ``method="auto"`` chose for short calls on this state, and
    #: for which kind of call (:func:`megkernel._engines.run_pair_trials`),
    #: or None: a stream of small calls keeps its choice instead of paying
    #: for a new one at every call.
    engine_memo = None

    #: The engines whose cost a warning named on this state (said once per
    #: state and engine, not at every call of a stream) ...
    cost_said = ()

    #: ... and, for each kind of call, the trials since the cost model last
    #: checked the engine asked for (pairs ``(kind, trials)``), or None.
    cost_checked = None

    def __init__(self, exponent, *, basis=None):
        #: Symmetric exponent ``A`` (r x r), kept exactly.
        self.exponent = np.array(exponent, dtype=float, order="C")
        #: Orthonormal basis ``P`` (d x r) of the range, or None (dense mode).
        self.basis = basis
        #: Ascending eigenvalues of ``A``.
        self.eigenvalues = None
        #: Eigenvectors of ``A`` (columns), in the order of ``eigenvalues``.
        self.eigenvectors = None
        #: Rank-one updates of the eigenpairs since the last ``eigh(A)``.
        self.updates_since_refresh = 0
        #: :class:`PartitionAnchor` of the Lanczos engine, or None.
        self.partition_anchor = None
        self.refresh()

    @classmethod
    def from_prior(cls, prior, *, name="init"):
        """State for a symmetric positive definite prior (scaled to trace one)."""
        prior, lam, vecs = check_positive_definite(prior, name=name)
        lam = lam / lam[-1]  # scale first: sums of huge eigenvalues overflow
        log_lam = np.log(lam) - np.log(lam.sum())
        exponent = (vecs * log_lam) @ vecs.T
        state = cls.__new__(cls)
        state.exponent = np.ascontiguousarray(0.5 * (exponent + exponent.T))
        state.basis = None
        state.eigenvalues, state.eigenvectors = log_lam, vecs
        state.updates_since_refresh = 0
        state.partition_anchor = None
        return state

    @classmethod
    def from_factor(cls, factor, *, name="init_factor"):
        """Low-rank state for the prior ``W_1 = F F^T / ||F||_F^2``.

        A thin SVD ``F = U diag(s) V^T`` gives the basis ``P = U`` and
        ``S = diag(s^2) / sum(s^2)`` (``O(d r^2)`` time, ``O(d r)`` memory).
        Directions with ``s <= max(d, r) * eps * s_max`` are dropped (the
        numerical rank, as in ``numpy.linalg.matrix_rank``).
        """
        factor = check_real(factor, name=name)
        if factor.ndim != 2 or factor.shape[0] < 2 or factor.shape[1] < 1:
            raise ValueError(
                f"{name} must be a 2-D array of shape (n_objects >= 2, rank >= 1), "
                f"got shape {factor.shape}."
            )
        if not np.all(np.isfinite(factor)):
            raise ValueError(f"{name} contains NaN or infinite entries.")
        basis, singular, _ = np.linalg.svd(factor, full_matrices=False)
        keep = singular > max(factor.shape) * np.finfo(float).eps * singular[0]
        if not np.any(keep):
            raise ValueError(f"{name} is zero: the prior has rank 0.")
        basis = np.ascontiguousarray(basis[:, keep])
        # every row equal (the constant direction, e.g. a column of ones):
        # each pair of distinct objects is at squared distance 0 under the
        # prior, and a pair's update v = P[a] - P[b] is 0, so nothing can be
        # learned (and round-off in v would pass for tiny distances)
        if np.ptp(basis, axis=0).max() <= _separation_tolerance(basis):
            raise ValueError(
                f"{name} gives every object the same row (e.g. only the constant "
                "direction, a column of ones): under its prior every pair of distinct "
                "objects is at squared distance 0, and no distance can be learned from "
                f"it. Give an {name} whose rows differ between the objects (or no "
                f"{name}).")
        log_lam = 2.0 * np.log(singular[keep])
        log_lam -= log_trace_exp(log_lam)
        return cls(np.diag(log_lam), basis=basis)

    def check_separates(self, a, b, *, name="init_factor"):
        """Refuse a low-rank prior under which no pair ``(a, b)`` of distinct objects moves.

        In low-rank mode a pair whose rows of the basis agree (to round-off)
        has squared distance 0 under every kernel of the model and its
        update ``v = P[a] - P[b]`` is 0: if that holds for every given pair
        of distinct objects, a fit learns nothing and its units (the trace)
        come from round-off. Dense states separate every pair; pairs of
        one object alone (no pair of distinct objects) are not checked.
        """
        if self.basis is None:
            return
        a, b = np.atleast_1d(a), np.atleast_1d(b)
        distinct = a != b
        if not distinct.any():
            return
        a, b = a[distinct], b[distinct]
        tolerance = _separation_tolerance(self.basis)
        for start in range(0, len(a), _GATHER_CHUNK):
            stop = start + _GATHER_CHUNK
            gap = np.abs(self.basis[a[start:stop]] - self.basis[b[start:stop]]).max(axis=1)
            if np.any(gap > tolerance):
                return
        raise ValueError(
            f"Under the prior of {name} none of the {len(a)} given pairs of distinct "
            "objects has a positive squared distance (their objects have the same rows "
            f"in {name}): their distances cannot be learned. Give an {name} that "
            "separates the objects of the pairs (or no init_factor).")

    @classmethod
    def identity(cls, n_objects):
        """State for the prior ``W_1 = I / d`` (its eigenpairs known: no eigh)."""
        state = cls.__new__(cls)
        state.exponent = -np.log(n_objects) * np.eye(n_objects)
        state.basis = None
        state.eigenvalues = np.full(n_objects, -np.log(n_objects))
        state.eigenvectors = np.eye(n_objects)
        state.updates_since_refresh = 0
        state.partition_anchor = None
        return state

    # -- views -------------------------------------------------------------
    @property
    def size(self):
        """Dimension ``r`` of the exponent."""
        return self.exponent.shape[0]

    @property
    def n_objects(self):
        """Number of objects ``d``."""
        return self.size if self.basis is None else self.basis.shape[0]

    def density_eigenvalues(self):
        """Eigenvalues of ``W`` (trace one), in the order of ``eigenvectors``."""
        return normalized_exp_weights(self.eigenvalues)

    def log_partition(self):
        """``log tr exp(A)``."""
        return log_trace_exp(self.eigenvalues)

    def matrix(self):
        """``W`` itself (``r x r``; in low-rank mode the matrix ``M``)."""
        vecs = self.eigenvectors
        return (vecs * self.density_eigenvalues()) @ vecs.T

    def factor(self):
        """``B`` with ``W = B B^T``: shape (d, r), ``P V diag(sqrt(w))``.

        Eigenvalues below ``NEGLIGIBLE_WEIGHT`` of the largest count as 0:
        after many projections some underflow towards 1e-300, and the
        subnormal products they would leave in every distance are slow on
        most CPUs, for terms that no double sum can hold.
        """
        weights = self.density_eigenvalues()
        weights = np.where(weights < NEGLIGIBLE_WEIGHT * weights.max(), 0.0, weights)
        scaled = self.eigenvectors * np.sqrt(weights)
        return scaled if self.basis is None else self.basis @ scaled

    def entries(self, rows, cols):
        """Return the block ``W[rows][:, cols]`` without forming ``W``."""
        vecs = self.eigenvectors
        left = vecs[rows] if self.basis is None else self.basis[rows] @ vecs
        right = vecs[cols] if self.basis is None else self.basis[cols] @ vecs
        return (left * self.density_eigenvalues()) @ right.T

    def entry_sum(self):
        """``1^T W 1``, the sum of ``W``'s entries (``|B^T 1|^2`` for ``W = B B^T``)."""
        column_sums = self.factor().sum(axis=0)
        return float(column_sums @ column_sums)

    def pair_vectors(self, a, b):
        """``v = e_a - e_b`` (dense) or ``P[a] - P[b]`` as rows, shape (n, r)."""
        a = np.atleast_1d(a)
        b = np.atleast_1d(b)
        if self.basis is None:
            out = np.zeros((a.size, self.size))
            rows = np.arange(a.size)
            out[rows, a] += 1.0
            out[rows, b] -= 1.0
            return out
        return self.basis[a] - self.basis[b]

    def pair_sq_norms(self, a, b):
        """Return ``||v||^2`` for each pair.

        ``2`` or ``0`` in dense mode; in low-rank mode ``||P[a] - P[b]||^2``,
        gathered in chunks.
        """
        a = np.atleast_1d(a)
        b = np.atleast_1d(b)
        if self.basis is None:
            return 2.0 * (a != b)
        out = np.empty(len(a))
        for start in range(0, len(a), _GATHER_CHUNK):
            stop = start + _GATHER_CHUNK
            v = self.basis[a[start:stop]] - self.basis[b[start:stop]]
            out[start:stop] = np.einsum("ij,ij->i", v, v)
        return out

    def pair_coordinates(self, a, b):
        """``V^T v`` for each pair (rows), shape (n, r)."""
        a = np.atleast_1d(a)
        b = np.atleast_1d(b)
        vecs = self.eigenvectors
        if self.basis is None:
            return vecs[a] - vecs[b]
        return (self.basis[a] - self.basis[b]) @ vecs

    def pair_sq_distances(self, a, b):
        """Return ``v^T W v`` for each pair: squared distances under trace-one ``W``.

        Gathered in chunks of at most :data:`_GATHER_ENTRIES` coordinates, so
        memory stays that of the model whatever the number of pairs (a
        single gather of 20,000 pairs at ``d = 2000`` took 640 MB).
        """
        a, b = np.broadcast_arrays(np.atleast_1d(a), np.atleast_1d(b))
        weights = self.density_eigenvalues()
        out = np.empty(len(a))
        chunk = max(1, _GATHER_ENTRIES // max(self.size, 1))
        for start in range(0, len(out), chunk):
            coords = self.pair_coordinates(a[start:start + chunk], b[start:start + chunk])
            out[start:start + chunk] = (coords * coords) @ weights
        return out

    # -- updates -----------------------------------------------------------
    def add_pair_outer(self, a, b, scale):
        """Update ``A <- A + scale * v v^T`` on the stored exponent only."""
        if self.basis is None:
            A = self.exponent
            A[a, a] += scale
            A[b, b] += scale
            A[a, b] -= scale
            A[b, a] -= scale
        else:
            v = self.basis[a] - self.basis[b]
            self.exponent += scale * np.outer(v, v)

    def add_symmetric(self, matrix, scale):
        """Update ``A <- A + scale * X`` and re-decompose."""
        self.exponent += scale * matrix
        self.refresh()

    def refresh(self):
        """Re-anchor the eigendecomposition on the stored exponent.

        Raises ``ValueError`` (before any LAPACK call) if the
        exponent is not finite.
        """
        self.eigenvalues, self.eigenvectors = eigh_symmetric(
            self.exponent, name="the exponent log W", check=False
        )
        self.updates_since_refresh = 0

    def copy(self):
        """Return an independent copy (the basis, never changed, is shared)."""
        new = self.__class__.__new__(self.__class__)
        for field in self.FIELDS:
            value = getattr(self, field)
            if isinstance(value, np.ndarray) and field != "basis":
                value = value.copy()
            setattr(new, field, value)
        return new

    def assign(self, other):
        """Make this state equal to ``other`` (in place, sharing its arrays)."""
        for field in self.FIELDS:
            setattr(self, field, getattr(other, field))


def _separation_tolerance(basis):
    """Largest entry gap of two rows of an orthonormal ``basis`` that is round-off.

    The basis comes from an SVD, whose rows of equal objects agree to a
    few ``eps`` per entry (``max(d, r) eps``, as the numerical rank).
    """
    return 16.0 * max(basis.shape) * np.finfo(float).eps * float(np.abs(basis).max())


#: Density eigenvalues below this fraction of the largest are left out of
#: :meth:`ExponentState.factor` (their terms are below any double's precision).
NEGLIGIBLE_WEIGHT = 1e-200


def prior_state(n_objects=None, prior=None, prior_factor=None):
    """Return the state of a prior: ``I / d``, a d x d matrix or a d x r factor."""
    if prior is not None and prior_factor is not None:
        raise ValueError("Give the prior either as a d x d matrix or as a d x r "
                         "factor, not both.")
    if prior_factor is not None:
        return ExponentState.from_factor(prior_factor, name="prior_factor")
    if prior is not None:
        return ExponentState.from_prior(prior, name="prior")
    if n_objects is None:
        raise ValueError("Give n_objects or a prior matrix.")
    return ExponentState.identity(check_n_objects(n_objects))


class SubspaceState(ExponentState):
    r"""Exponent of ``W = P M P^T + mu (I - P P^T)``: a subspace plus its complement.

    The density matrices of this form (``P``: ``d x k`` orthonormal, ``M``
    PSD, ``mu >= 0``) are those of a matrix algebra, closed under ``exp``
    and ``log``; their exponent ``P B P^T + alpha (I - P P^T)`` is kept in
    the ``(k + 1) x (k + 1)`` layout ``diag(B, alpha)`` of
    :class:`~megkernel._solvers.pair_loss.SubspacePairLoss` (the last
    coordinate stands for the ``d - k`` dimensions of the complement).

    A pair enters through ``E(v v^T)``, the projection of ``v v^T`` onto the
    algebra (trace-preserving): ``q q^T`` in the block (``q = P^T v``) and
    ``||(I - P P^T) v||^2 / (d - k)`` on the complement. A Bregman
    projection of a density matrix of the algebra onto ``tr(W C) <= 0``
    within the algebra moves the exponent along ``E(C)``, so DefiniteBoost's
    greedy projections (eqs. 11-13) run in it unchanged, at ``O(k^3)`` per
    update instead of ``O(d^3)``, and Theorem 4.1's bound holds with the
    eigenvalue range of ``E(C_j)``.

    Parameters
    ----------
    exponent : ndarray of shape (k + 1, k + 1)
        ``diag(B, alpha)`` (the off-block entries are ignored).
    basis : ndarray of shape (d, k)
        ``P``, orthonormal columns, ``k < d``.
    """

    FIELDS = ExponentState.FIELDS + ("multiplicity",)

    def __init__(self, exponent, *, basis):
        d, k = basis.shape
        if not 0 <= k < d or np.shape(exponent) != (k + 1, k + 1):
            raise ValueError(f"a subspace state needs a basis of k < d columns and a "
                             f"(k + 1) x (k + 1) exponent, got {basis.shape} and "
                             f"{np.shape(exponent)}.")
        #: How many dimensions each exponent coordinate stands for.
        self.multiplicity = np.ones(k + 1)
        self.multiplicity[k] = d - k
        block = np.zeros((k + 1, k + 1))
        block[:k, :k] = np.asarray(exponent, dtype=float)[:k, :k]
        block[k, k] = float(exponent[k, k])
        super().__init__(block, basis=basis)

    def _outside(self, a, b):
        """``||(I - P P^T) v||^2 = ||v||^2 - ||P^T v||^2`` per pair (``>= 0``)."""
        inside = factor_pair_sq_distances(self.basis, a, b)
        return np.maximum(np.where(a != b, 2.0, 0.0) - inside, 0.0)

    def density_eigenvalues(self):
        """Eigenvalues of ``W`` (the complement's one per dimension)."""
        shifted = np.exp(self.eigenvalues - self.eigenvalues.max())
        return shifted / float(shifted @ self.multiplicity)

    def log_partition(self):
        """``log tr exp(A)``, the complement's eigenvalue counted ``d - k`` times."""
        top = self.eigenvalues.max()
        return float(top + np.log(np.exp(self.eigenvalues - top) @ self.multiplicity))

    def pair_vectors(self, a, b):
        """Rows ``(P^T v, ||(I - P P^T) v||)``: ``v^T W v`` is their ``W``-norm."""
        a, b = np.atleast_1d(a), np.atleast_1d(b)
        return np.column_stack([self.basis[a] - self.basis[b],
                                np.sqrt(self._outside(a, b))])

    def pair_sq_norms(self, a, b):
        """Largest eigenvalue of ``E(v v^T)`` per pair (its range starts at 0)."""
        a, b = np.atleast_1d(a), np.atleast_1d(b)
        outside = self._outside(a, b)
        inside = np.where(a != b, 2.0, 0.0) - outside
        return np.maximum(inside, outside / self.multiplicity[-1])

    def pair_coordinates(self, a, b):
        """``V^T`` of :meth:`pair_vectors` (rows), shape (n, k + 1)."""
        return self.pair_vectors(a, b) @ self.eigenvectors

    def entry_sum(self):
        """``1^T W 1`` (``s = P^T 1``: ``s^T M s + mu (d - ||s||^2)``)."""
        k = self.size - 1
        weights = self.density_eigenvalues()
        s = self.basis.sum(axis=0) @ self.eigenvectors[:k, :k]
        return float((s * s) @ weights[:k] + weights[k] * (self.n_objects - s @ s))

    def add_pair_outer(self, a, b, scale):
        """Update ``A <- A + scale E(v v^T)`` on the stored exponent only."""
        k = self.size - 1
        q = self.basis[a] - self.basis[b]
        self.exponent[:k, :k] += scale * np.outer(q, q)
        self.exponent[k, k] += scale * self._outside(np.atleast_1d(a),
                                                     np.atleast_1d(b))[0] / self.multiplicity[k]

    def add_symmetric(self, matrix, scale):
        """Not defined: a general matrix leaves the algebra."""
        raise NotImplementedError("a subspace state takes pair updates only")

    def refresh(self):
        """Decompose the block and the complement separately (never mixed)."""
        k = self.size - 1
        lam, vecs = eigh_symmetric(self.exponent[:k, :k], name="the exponent log W",
                                   check=False)
        self.eigenvalues = np.append(lam, self.exponent[k, k])
        self.eigenvectors = np.zeros((k + 1, k + 1))
        self.eigenvectors[:k, :k] = vecs
        self.eigenvectors[k, k] = 1.0
        self.updates_since_refresh = 0

    def matrix(self):
        """Not formed: use :meth:`dense` (``d x d``)."""
        raise NotImplementedError("a subspace state's W is d x d: use dense()")

    def factor(self):
        """Not formed (the complement needs ``d - k`` columns): use :meth:`dense`."""
        raise NotImplementedError("a subspace state has no thin factor: use dense()")

    def dense(self):
        """Return the same ``W`` as a dense :class:`ExponentState` (one ``d x d`` eigh)."""
        k = self.size - 1
        alpha = self.exponent[k, k]
        full = self.basis @ (self.exponent[:k, :k] - alpha * np.eye(k)) @ self.basis.T
        full[np.diag_indices_from(full)] += alpha
        return ExponentState(0.5 * (full + full.T))
