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

import numpy as np

from ._spectral import (
    check_positive_definite,
    eigh_symmetric,
    log_trace_exp,
    normalized_exp_weights,
)

__all__ = ["ExponentState"]


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

    def __init__(self, exponent, *, basis=None):
        self.exponent = np.array(exponent, dtype=float, order="C")
        self.basis = basis
        self.refresh()

    @classmethod
    def from_prior(cls, prior, *, name="init"):
        """State for a symmetric positive definite prior (scaled to trace one)."""
        prior, lam, vecs = check_positive_definite(prior, name=name)
        log_lam = np.log(lam / lam.sum())
        state = cls.__new__(cls)
        state.exponent = (vecs * log_lam) @ vecs.T
        state.exponent = 0.5 * (state.exponent + state.exponent.T)
        state.basis = None
        state.eigenvalues, state.eigenvectors = log_lam, vecs
        state.updates_since_refresh = 0
        return state

    @classmethod
    def from_factor(cls, factor, *, name="init_factor"):
        """Low-rank state for the prior ``W_1 = F F^T / ||F||_F^2``.

        A thin SVD ``F = U diag(s) V^T`` gives the basis ``P = U`` and
        ``S = diag(s^2) / sum(s^2)`` (``O(d r^2)`` time, ``O(d r)`` memory).
        Directions with ``s <= max(d, r) * eps * s_max`` are dropped (the
        numerical rank, as in ``numpy.linalg.matrix_rank``).
        """
        factor = np.asarray(factor, dtype=float)
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
        log_lam = 2.0 * np.log(singular[keep])
        log_lam -= log_trace_exp(log_lam)
        return cls(np.diag(log_lam), basis=np.ascontiguousarray(basis[:, keep]))

    @classmethod
    def identity(cls, n_objects):
        """State for the prior ``W_1 = I / d``."""
        return cls(-np.log(n_objects) * np.eye(n_objects))

    # -- views -------------------------------------------------------------
    @property
    def size(self):
        """Dimension ``r`` of the exponent."""
        return self.exponent.shape[0]

    @property
    def n_objects(self):
        """Number of objects ``d``."""
        return self.size if self.basis is None else self.basis.shape[0]

    def weights(self):
        """Eigenvalues of ``W`` (trace one), in the order of ``eigenvectors``."""
        return normalized_exp_weights(self.eigenvalues)

    def log_partition(self):
        """``log tr exp(A)``."""
        return log_trace_exp(self.eigenvalues)

    def matrix(self):
        """``W`` itself (``r x r``; in low-rank mode the matrix ``M``)."""
        vecs = self.eigenvectors
        return (vecs * self.weights()) @ vecs.T

    def factor(self):
        """``B`` with ``W = B B^T``: shape (d, r), ``P V diag(sqrt(w))``."""
        scaled = self.eigenvectors * np.sqrt(self.weights())
        return scaled if self.basis is None else self.basis @ scaled

    def entries(self, rows, cols):
        """The block ``W[rows][:, cols]`` without forming ``W``."""
        vecs = self.eigenvectors
        left = vecs[rows] if self.basis is None else self.basis[rows] @ vecs
        right = vecs[cols] if self.basis is None else self.basis[cols] @ vecs
        return (left * self.weights()) @ right.T

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

    def pair_coordinates(self, a, b):
        """``V^T v`` for each pair (rows), shape (n, r)."""
        a = np.atleast_1d(a)
        b = np.atleast_1d(b)
        vecs = self.eigenvectors
        if self.basis is None:
            return vecs[a] - vecs[b]
        return (self.basis[a] - self.basis[b]) @ vecs

    def pair_sq_distances(self, a, b):
        """``v^T W v`` for each pair: squared distances under trace-one ``W``."""
        coords = self.pair_coordinates(a, b)
        return (coords * coords) @ self.weights()

    # -- updates -----------------------------------------------------------
    def add_pair_outer(self, a, b, scale):
        """``A <- A + scale * v v^T`` on the stored exponent only."""
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
        """``A <- A + scale * X`` and re-decompose."""
        self.exponent += scale * matrix
        self.refresh()

    def refresh(self):
        """Re-anchor the eigendecomposition on the stored exponent."""
        self.eigenvalues, self.eigenvectors = eigh_symmetric(
            self.exponent, check=False
        )
        self.updates_since_refresh = 0

    def copy(self):
        new = self.__class__.__new__(self.__class__)
        new.__dict__.update(
            {k: (v.copy() if isinstance(v, np.ndarray) and k != "basis" else v)
             for k, v in self.__dict__.items()}
        )
        return new
